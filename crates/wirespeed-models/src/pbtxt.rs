//! Triton's `config.pbtxt`, read as the keys of a `config.toml`, so that a
//! model folder laid out for Triton loads unchanged, for every backend
//! wirespeed runs: Triton's Python backend, ONNX Runtime's
//! (`platform: "onnxruntime_onnx"` or `backend: "onnxruntime"`, run by the
//! onnx backend), its FIL backend's tree models (`fil.rs`) and its
//! identity backend:
//!
//! ```text
//! models/add_sub/config.pbtxt      backend: "python", input [...], output [...]
//! models/add_sub/1/model.py
//! models/densenet/config.pbtxt     platform: "onnxruntime_onnx", ...
//! models/densenet/1/model.onnx
//! ```
//!
//! The text is parsed as Triton parses it, protobuf's text format of
//! `inference.ModelConfig` (`model_config.proto`), with prost-reflect. Then:
//! `input`/`output` become `inputs`/`outputs` (with a leading `-1` when
//! `max_batch_size` is above 0, `TYPE_STRING` as BYTES), `dynamic_batching`
//! becomes `[batching]`, the instance groups' counts `instances`,
//! `version_policy` and `default_model_filename` carry over, string
//! `parameters` become the model's `[parameters]`, and the whole
//! configuration, as Triton writes it in JSON, is kept for the model's
//! `initialize(args)`. A platform wirespeed does not run (TensorFlow,
//! PyTorch, TensorRT, OpenVINO, a custom backend) is refused by name with
//! the way to serve it (from a Triton that runs it, `backend = "upstream"`);
//! `reshape` becomes the tensor's `reshape` (`reshape.rs`); fields
//! wirespeed would not honour are refused by name (a decoupled transaction
//! policy outside the Python backend, a packed Python environment).

use prost_reflect::DynamicMessage;
use wirespeed_proto::inference as pb;
use wirespeed_proto::model_config::descriptor;
use wirespeed_proto::model_config::to_json;

/// Parses the text of a `config.pbtxt`.
pub(crate) fn parse(text: &str) -> Result<pb::ModelConfig, String> {
    let message =
        DynamicMessage::parse_text_format(descriptor()?, &list_colons(text)).map_err(|e| {
            format!(
                "it is not a valid model configuration, or uses a field wirespeed does not \
                 read (docs/python-models.md lists them): {e}"
            )
        })?;
    message
        .transcode_to::<pb::ModelConfig>()
        .map_err(|e| e.to_string())
}

/// `text` with a colon between a field's name and a list of messages:
/// protobuf's own parser (Triton's) takes `input [ { ... } ]`, and
/// prost-reflect's wants `input: [ { ... } ]`. Strings and `#` comments are
/// left alone. (Extension names in brackets do not occur in a model
/// configuration.)
fn list_colons(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut quote = None;
    let mut escaped = false;
    let mut comment = false;
    for c in text.chars() {
        if comment {
            comment = c != '\n';
        } else if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if c == '#' {
            comment = true;
        } else if c == '[' {
            let before = out.trim_end().chars().last();
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == '_') {
                out.push(':');
            }
        }
        out.push(c);
    }
    out
}

fn datatype(number: i32, tensor: &str) -> Result<String, String> {
    let name = pb::DataType::try_from(number)
        .map(|t| t.as_str_name())
        .unwrap_or("TYPE_INVALID");
    match name {
        "TYPE_STRING" => Ok("BYTES".into()),
        "TYPE_INVALID" => Err(format!("tensor '{tensor}' has no data_type")),
        other => Ok(other.trim_start_matches("TYPE_").into()),
    }
}

/// The wirespeed backend that runs what a `config.pbtxt`'s `backend` (or
/// `platform`) names, or why none does.
fn backend_of(config: &pb::ModelConfig) -> Result<&'static str, String> {
    let named = if config.backend.is_empty() {
        config.platform.as_str()
    } else {
        config.backend.as_str()
    };
    Ok(match named {
        "python" => "python",
        "onnxruntime" | "onnxruntime_onnx" => "onnx",
        "identity" => "identity",
        "fil" => "fil",
        "ensemble" => "ensemble",
        "" => return Err("config.pbtxt names neither a backend nor a platform".to_owned()),
        other => {
            let what = match other {
                "tensorflow" | "tensorflow_graphdef" | "tensorflow_savedmodel" => "TensorFlow",
                "pytorch" | "pytorch_libtorch" => "PyTorch",
                "tensorrt" | "tensorrt_plan" => "TensorRT",
                "openvino" => "OpenVINO",
                _ => "a custom backend",
            };
            return Err(format!(
                "Triton's '{other}' ({what}) is not run by wirespeed, which runs Python \
                 (backend: \"python\"), ONNX (platform: \"onnxruntime_onnx\"), FIL tree \
                 (backend: \"fil\") and identity models from a config.pbtxt; serve this model from a Triton that runs it and \
                 put wirespeed in front (backend = \"upstream\" in a config.toml, \
                 docs/upstream.md)"
            ));
        }
    })
}

/// `model_warmup` as `config.toml`'s `[[warmup]]` tables.
fn warmup_value(samples: &[pb::ModelWarmup]) -> Result<toml::Value, String> {
    use pb::model_warmup::input::InputDataType;
    let mut tables = Vec::new();
    for sample in samples {
        let mut inputs = toml::Table::new();
        for (name, input) in &sample.inputs {
            let mut table = toml::Table::new();
            table.insert("datatype".into(), datatype(input.data_type, name)?.into());
            table.insert(
                "dims".into(),
                toml::Value::Array(input.dims.iter().map(|&d| d.into()).collect()),
            );
            match &input.input_data_type {
                Some(InputDataType::ZeroData(true)) | None => {
                    table.insert("zero_data".into(), true.into());
                }
                Some(InputDataType::ZeroData(false)) => {}
                Some(InputDataType::RandomData(random)) => {
                    table.insert("random_data".into(), (*random).into());
                }
                Some(InputDataType::InputDataFile(file)) => {
                    table.insert("input_data_file".into(), file.clone().into());
                }
            }
            inputs.insert(name.clone(), toml::Value::Table(table));
        }
        let mut table = toml::Table::new();
        table.insert("name".into(), sample.name.clone().into());
        if sample.batch_size > 0 {
            table.insert("batch_size".into(), i64::from(sample.batch_size).into());
        }
        if sample.count > 0 {
            table.insert("count".into(), i64::from(sample.count).into());
        }
        table.insert("inputs".into(), toml::Value::Table(inputs));
        tables.push(toml::Value::Table(table));
    }
    Ok(toml::Value::Array(tables))
}

/// `sequence_batching` as `config.toml`'s `[sequence]` (`sequence.rs`).
fn sequence_value(sequence: &pb::ModelSequenceBatching) -> Result<toml::Table, String> {
    use pb::model_sequence_batching::control::Kind;
    use pb::model_sequence_batching::StrategyChoice;
    let mut table = toml::Table::new();
    let (strategy, delay, preferred) = match &sequence.strategy_choice {
        None => ("direct", 0, Vec::new()),
        Some(StrategyChoice::Direct(direct)) => {
            ("direct", direct.max_queue_delay_microseconds, Vec::new())
        }
        Some(StrategyChoice::Oldest(oldest)) => {
            if oldest.max_candidate_sequences > 0 {
                table.insert(
                    "max_sequences".into(),
                    i64::from(oldest.max_candidate_sequences).into(),
                );
            }
            (
                "oldest",
                oldest.max_queue_delay_microseconds,
                oldest.preferred_batch_size.clone(),
            )
        }
    };
    table.insert("strategy".into(), strategy.into());
    if sequence.iterative_sequence {
        table.insert("iterative".into(), true.into());
    }
    if sequence.max_sequence_idle_microseconds > 0 {
        let idle = i64::try_from(sequence.max_sequence_idle_microseconds).unwrap_or(i64::MAX);
        table.insert("max_sequence_idle_us".into(), idle.into());
    }
    table.insert(
        "max_queue_delay_us".into(),
        i64::try_from(delay).unwrap_or(i64::MAX).into(),
    );
    if !preferred.is_empty() {
        table.insert(
            "preferred_batch_sizes".into(),
            toml::Value::Array(preferred.iter().map(|&n| i64::from(n).into()).collect()),
        );
    }
    let mut controls = Vec::new();
    for input in &sequence.control_input {
        let [control] = input.control.as_slice() else {
            return Err(format!(
                "control_input '{}' has {} controls; give it one",
                input.name,
                input.control.len()
            ));
        };
        let mut entry = toml::Table::new();
        entry.insert("name".into(), input.name.clone().into());
        let kind = match Kind::try_from(control.kind) {
            Ok(Kind::ControlSequenceStart) => "start",
            Ok(Kind::ControlSequenceEnd) => "end",
            Ok(Kind::ControlSequenceReady) => "ready",
            Ok(Kind::ControlSequenceCorrid) => "corrid",
            Err(_) => return Err(format!("control_input '{}': unknown kind", input.name)),
        };
        entry.insert("kind".into(), kind.into());
        let pair = |values: Vec<f64>, datatype: &str| -> Result<(String, Vec<f64>), String> {
            if values.len() != 2 {
                return Err(format!(
                    "control_input '{}': give [false, true], two values",
                    input.name
                ));
            }
            Ok((datatype.to_owned(), values))
        };
        let (datatype, values) = if kind == "corrid" {
            (datatype(control.data_type, &input.name)?, Vec::new())
        } else if !control.int32_false_true.is_empty() {
            pair(
                control
                    .int32_false_true
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect(),
                "INT32",
            )?
        } else if !control.fp32_false_true.is_empty() {
            pair(
                control
                    .fp32_false_true
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect(),
                "FP32",
            )?
        } else if !control.bool_false_true.is_empty() {
            pair(
                control
                    .bool_false_true
                    .iter()
                    .map(|&v| f64::from(u8::from(v)))
                    .collect(),
                "BOOL",
            )?
        } else {
            return Err(format!(
                "control_input '{}' gives no int32_false_true, fp32_false_true or bool_false_true",
                input.name
            ));
        };
        entry.insert("datatype".into(), datatype.into());
        if !values.is_empty() {
            entry.insert(
                "false_true".into(),
                toml::Value::Array(values.into_iter().map(toml::Value::from).collect()),
            );
        }
        controls.push(toml::Value::Table(entry));
    }
    table.insert("controls".into(), toml::Value::Array(controls));
    let mut states = Vec::new();
    for state in &sequence.state {
        let mut entry = toml::Table::new();
        entry.insert("input".into(), state.input_name.clone().into());
        entry.insert("output".into(), state.output_name.clone().into());
        entry.insert(
            "datatype".into(),
            datatype(state.data_type, &state.input_name)?.into(),
        );
        entry.insert(
            "shape".into(),
            toml::Value::Array(state.dims.iter().map(|&d| d.into()).collect()),
        );
        if state.use_growable_memory {
            return Err(format!(
                "state '{}' uses growable memory, which wirespeed does not have",
                state.input_name
            ));
        }
        use pb::model_sequence_batching::initial_state::StateData;
        match state.initial_state.as_slice() {
            [] => {}
            [initial] => {
                if let Some(StateData::DataFile(file)) = &initial.state_data {
                    // Triton reads it from the version's initial_state folder.
                    entry.insert("data_file".into(), format!("initial_state/{file}").into());
                }
            }
            _ => {
                return Err(format!(
                    "state '{}' has several initial states; give one",
                    state.input_name
                ))
            }
        }
        states.push(toml::Value::Table(entry));
    }
    table.insert("states".into(), toml::Value::Array(states));
    Ok(table)
}

/// `ensemble_scheduling` as `config.toml`'s `[[steps]]` (`ensemble.rs`).
fn steps_value(config: &pb::ModelConfig) -> Result<toml::Value, String> {
    let Some(pb::model_config::SchedulingChoice::EnsembleScheduling(ensembling)) =
        &config.scheduling_choice
    else {
        return Err("an ensemble needs ensemble_scheduling with its steps".to_owned());
    };
    let map = |pairs: &std::collections::HashMap<String, String>| -> toml::Value {
        let table: toml::Table = pairs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        table.into()
    };
    let mut steps = Vec::new();
    for step in &ensembling.step {
        let mut table = toml::Table::new();
        table.insert("model".into(), step.model_name.clone().into());
        if step.model_version > 0 {
            table.insert("version".into(), step.model_version.to_string().into());
        }
        table.insert("inputs".into(), map(&step.input_map));
        table.insert("outputs".into(), map(&step.output_map));
        steps.push(toml::Value::Table(table));
    }
    Ok(toml::Value::Array(steps))
}

/// A reshape's shape as `config.toml`'s `reshape` (Triton's `reshape: {
/// shape: [] }` is a scalar's).
fn reshape_value(shape: &[i64]) -> toml::Value {
    toml::Value::Array(shape.iter().map(|&d| toml::Value::from(d)).collect())
}

/// The keys of `config.toml` that `text`, a `config.pbtxt`, says.
#[cfg(test)]
pub(crate) fn config_table(text: &str) -> Result<toml::Table, String> {
    model_config_table(parse(text)?)
}

/// A `ModelConfig` in Triton's JSON (a repository load's `config`
/// override, which Triton's clients send as the server's own `GET /config`
/// answer or a part of it), or `None` when `json` is not one (it may be
/// `config.toml`'s keys). A config without `backend` or `platform` gets
/// `guessed`, the one the model's files say, as Triton's auto-complete
/// finds it; one without a name is named `name`, its folder's, as Triton
/// names it.
pub(crate) fn from_triton_json(
    name: &str,
    json: &str,
    guessed: Option<&str>,
) -> Option<Result<toml::Table, String>> {
    // Triton's when every key is a ModelConfig field and one is not also
    // a key of config.toml's (`backend` or `parameters` alone could be
    // either, and are read as config.toml's); `{}` is Triton's: complete it
    // all from the model's files.
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json).ok()?;
    let shared = ["backend", "parameters", "version_policy"];
    let descriptor = descriptor().ok()?;
    let triton = |key: &str| descriptor.get_field_by_name(key).is_some();
    if !object.is_empty()
        && (!object.keys().all(|k| triton(k))
            || object.keys().all(|k| shared.contains(&k.as_str())))
    {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize(descriptor, &mut de).ok()?;
    let mut config: pb::ModelConfig = message.transcode_to().ok()?;
    if config.name.is_empty() {
        config.name = name.to_owned();
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        match guessed {
            Some(backend) => config.backend = backend.to_owned(),
            None => {
                return Some(Err(
                    "the configuration names neither a backend nor a platform, and the model's \
                     folder has no model.onnx or model.py to tell"
                        .to_owned(),
                ))
            }
        }
    }
    Some(model_config_table(config))
}

/// The keys of `config.toml` that a parsed `config` says.
pub(crate) fn model_config_table(config: pb::ModelConfig) -> Result<toml::Table, String> {
    let backend = backend_of(&config)?;
    if config.optimization.is_some() {
        tracing::info!(
            model = %config.name,
            "config.pbtxt: 'optimization' tunes Triton's own engines; accepted and not applied"
        );
    }
    let decoupled = config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled);
    if decoupled && backend != "python" {
        return Err(format!(
            "model_transaction_policy {{ decoupled: true }} is for models that answer with a \
             stream of responses, which wirespeed's Python backend runs; the {backend} backend \
             answers each request once"
        ));
    }
    let batch = config.max_batch_size > 0;
    let shape = |dims: &[i64]| -> toml::Value {
        let mut shape: Vec<toml::Value> = Vec::new();
        if batch {
            shape.push((-1).into());
        }
        shape.extend(dims.iter().map(|&d| toml::Value::from(d)));
        toml::Value::Array(shape)
    };
    let mut inputs = Vec::new();
    for input in &config.input {
        let mut table = toml::Table::new();
        if input.optional {
            table.insert("optional".into(), true.into());
        }
        if let Some(reshape) = &input.reshape {
            table.insert("reshape".into(), reshape_value(&reshape.shape));
        }
        table.insert("name".into(), input.name.clone().into());
        table.insert(
            "datatype".into(),
            datatype(input.data_type, &input.name)?.into(),
        );
        table.insert("shape".into(), shape(&input.dims));
        if let Ok(format) = pb::model_input::Format::try_from(input.format) {
            if format != pb::model_input::Format::None {
                table.insert("format".into(), format.as_str_name().into());
            }
        }
        inputs.push(toml::Value::Table(table));
    }
    let mut outputs = Vec::new();
    for output in &config.output {
        let mut table = toml::Table::new();
        if let Some(reshape) = &output.reshape {
            table.insert("reshape".into(), reshape_value(&reshape.shape));
        }
        table.insert("name".into(), output.name.clone().into());
        table.insert(
            "datatype".into(),
            datatype(output.data_type, &output.name)?.into(),
        );
        table.insert("shape".into(), shape(&output.dims));
        if !output.label_filename.is_empty() {
            table.insert("labels".into(), output.label_filename.clone().into());
        }
        outputs.push(toml::Value::Table(table));
    }
    let mut table = toml::Table::new();
    table.insert("backend".into(), backend.into());
    if config.response_cache.as_ref().is_some_and(|c| c.enable) {
        table.insert("response_cache".into(), true.into());
    }
    if !config.model_warmup.is_empty() {
        table.insert("warmup".into(), warmup_value(&config.model_warmup)?);
    }
    if batch {
        table.insert(
            "max_batch_size".into(),
            i64::from(config.max_batch_size).into(),
        );
    }
    table.insert("inputs".into(), toml::Value::Array(inputs));
    table.insert("outputs".into(), toml::Value::Array(outputs));
    if !config.default_model_filename.is_empty() && backend != "identity" {
        table.insert(
            "model_file".into(),
            config.default_model_filename.clone().into(),
        );
    }
    // Triton's instances: worker processes for Python, requests computed
    // at once for ONNX (its sessions).
    let instances: i64 = config
        .instance_group
        .iter()
        .map(|g| i64::from(g.count.max(1)))
        .sum();
    match backend {
        "python" => {
            table.insert("instances".into(), instances.max(1).into());
            if decoupled {
                table.insert("decoupled".into(), true.into());
            }
        }
        "onnx" if instances > 0 => {
            table.insert("instances".into(), instances.into());
        }
        _ => {}
    }
    if let (true, Some(pb::model_config::SchedulingChoice::DynamicBatching(dynamic))) =
        (batch, &config.scheduling_choice)
    {
        let mut batching = toml::Table::new();
        batching.insert(
            "max_batch_size".into(),
            i64::from(config.max_batch_size).into(),
        );
        if !dynamic.preferred_batch_size.is_empty() {
            batching.insert(
                "preferred_batch_sizes".into(),
                toml::Value::Array(
                    dynamic
                        .preferred_batch_size
                        .iter()
                        .map(|&s| i64::from(s).into())
                        .collect(),
                ),
            );
        }
        let delay = i64::try_from(dynamic.max_queue_delay_microseconds).unwrap_or(i64::MAX);
        batching.insert("max_queue_delay_us".into(), delay.into());
        table.insert("batching".into(), toml::Value::Table(batching));
    }
    if let Some(pb::model_config::SchedulingChoice::SequenceBatching(sequence)) =
        &config.scheduling_choice
    {
        table.insert("sequence".into(), sequence_value(sequence)?.into());
    }
    // Triton's choice, in config.toml's short spelling (`versions.rs`).
    use pb::model_version_policy::PolicyChoice;
    let policy: Option<(&str, toml::Value)> = match config
        .version_policy
        .as_ref()
        .and_then(|p| p.policy_choice.as_ref())
    {
        Some(PolicyChoice::Latest(latest)) => {
            Some(("latest", i64::from(latest.num_versions.max(1)).into()))
        }
        Some(PolicyChoice::All(_)) => Some(("all", true.into())),
        Some(PolicyChoice::Specific(specific)) => Some((
            "specific",
            toml::Value::Array(specific.versions.iter().map(|&v| v.into()).collect()),
        )),
        None => None,
    };
    if let Some((choice, value)) = policy {
        let mut chosen = toml::Table::new();
        chosen.insert(choice.into(), value);
        table.insert("version_policy".into(), chosen.into());
    }
    if backend == "identity" {
        // Triton's identity backend's one parameter of note.
        if let Some(delay) = config.parameters.get("execute_delay_ms") {
            let ms: i64 = delay.string_value.trim().parse().map_err(|_| {
                format!(
                    "parameter execute_delay_ms is '{}', not a number of milliseconds",
                    delay.string_value
                )
            })?;
            table.insert("delay_ms".into(), ms.into());
        }
        return Ok(table);
    }
    if backend == "onnx" {
        return Ok(table);
    }
    if backend == "ensemble" {
        table.insert("steps".into(), steps_value(&config)?);
        return Ok(table);
    }
    if backend == "fil" {
        // FIL's parameters are its keys (`fil.rs`).
        let parameters: toml::Table = config
            .parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.string_value.clone().into()))
            .collect();
        table.insert("parameters".into(), parameters.into());
        return Ok(table);
    }
    let mut parameters = toml::Table::new();
    for (key, value) in &config.parameters {
        if key == "EXECUTION_ENV_PATH" {
            return Err(
                "parameter EXECUTION_ENV_PATH (a packed conda environment) is not \
                        read by wirespeed; point the model at a venv in a config.toml \
                        (venv = \"...\") instead"
                    .into(),
            );
        }
        parameters.insert(key.clone(), value.string_value.clone().into());
    }
    if !parameters.is_empty() {
        table.insert("parameters".into(), toml::Value::Table(parameters));
    }
    // As `initialize` reads it, groups named as Triton names them (one
    // group named as the model when the file has none).
    let mut completed = config.clone();
    if completed.instance_group.is_empty() {
        completed.instance_group.push(pb::ModelInstanceGroup {
            name: completed.name.clone(),
            count: 1,
            kind: pb::model_instance_group::Kind::Cpu as i32,
            ..Default::default()
        });
    }
    for (i, group) in completed.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{}_{i}", completed.name);
        }
    }
    table.insert("triton_model_config".into(), to_json(&completed).into());
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD_SUB: &str = r#"
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 4 ] }
]
instance_group [{ count: 2 kind: KIND_CPU }]
version_policy: { specific: { versions: [ 1, 3 ] } }
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 }
parameters: { key: "threshold" value: { string_value: "0.5" } }
"#;

    #[test]
    fn a_python_models_config_reads_as_config_toml_keys() {
        let table = config_table(ADD_SUB).unwrap();
        let config = wirespeed_backend::config::ModelConfig::from_toml_table(table).unwrap();
        assert_eq!(config.backend, "python");
        assert_eq!(config.inputs[1].name, "INPUT1");
        assert_eq!(config.inputs[1].shape, vec![-1, 4]);
        assert_eq!(config.outputs[1].datatype, "BYTES");
        assert_eq!(config.backend_keys["instances"].as_integer(), Some(2));
        assert_eq!(config.batching.as_ref().unwrap().max_batch_size(), 8);
        assert_eq!(
            config.version_policy.as_ref().unwrap().policy().unwrap(),
            crate::VersionPolicy::Specific(vec![1, 3])
        );
        let json: serde_json::Value =
            serde_json::from_str(config.backend_keys["triton_model_config"].as_str().unwrap())
                .unwrap();
        // As Triton writes it: numbers, enum names, proto field names.
        assert_eq!(json["input"][0]["dims"], serde_json::json!([4]));
        assert_eq!(json["output"][1]["data_type"], "TYPE_STRING");
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["parameters"]["threshold"]["string_value"], "0.5");
    }

    #[test]
    fn onnx_and_identity_models_are_read_for_their_backends() {
        let onnx = config_table(
            r#"
name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "data_0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] } ]
output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1, 1000, 1, 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"#,
        )
        .unwrap();
        assert_eq!(onnx["backend"].as_str(), Some("onnx"));
        assert_eq!(onnx["instances"].as_integer(), Some(2));
        assert!(onnx.get("triton_model_config").is_none());
        let identity = config_table(
            r#"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "5" } } ]
"#,
        )
        .unwrap();
        assert_eq!(identity["backend"].as_str(), Some("identity"));
        assert_eq!(identity["delay_ms"].as_integer(), Some(5));
        assert_eq!(
            identity["inputs"].as_array().unwrap()[0]["shape"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_load_override_is_tritons_json_or_config_tomls_keys() {
        // Triton's, with the backend the model's files say.
        let table = from_triton_json("m", r#"{"max_batch_size":"16"}"#, Some("onnxruntime"))
            .unwrap()
            .unwrap();
        assert_eq!(table["backend"].as_str(), Some("onnx"));
        assert_eq!(table["max_batch_size"].as_integer(), Some(16));
        // config.toml's keys, or keys both have, are not Triton's.
        for toml_keys in [
            r#"{"backend": "onnx"}"#,
            r#"{"backend": "xgboost", "model_file": "m.json"}"#,
            r#"{"inputs": []}"#,
            "not json",
        ] {
            assert!(
                from_triton_json("m", toml_keys, None).is_none(),
                "{toml_keys}"
            );
        }
        let unknown = from_triton_json("m", r#"{"max_batch_size": 4}"#, None).unwrap();
        assert!(unknown
            .unwrap_err()
            .contains("neither a backend nor a platform"));
    }

    #[test]
    fn what_wirespeed_would_not_honour_is_refused_by_name() {
        for (platform, what) in [
            ("tensorflow_savedmodel", "TensorFlow"),
            ("pytorch_libtorch", "PyTorch"),
            ("tensorrt_plan", "TensorRT"),
        ] {
            let refused = config_table(&format!("platform: \"{platform}\"")).unwrap_err();
            assert!(
                refused.contains(platform)
                    && refused.contains(what)
                    && refused.contains("upstream"),
                "{refused}"
            );
        }
        let decoupled =
            config_table("backend: \"python\" model_transaction_policy { decoupled: true }")
                .unwrap();
        assert_eq!(decoupled["decoupled"].as_bool(), Some(true));
        let decoupled = config_table(
            "platform: \"onnxruntime_onnx\" model_transaction_policy { decoupled: true }",
        )
        .unwrap_err();
        assert!(decoupled.contains("decoupled"), "{decoupled}");
        // Colons before lists are optional, as in Triton; not in strings.
        assert_eq!(
            list_colons("input [ {} ] # x [\nname: \"a [b\" dims: [ 1 ]"),
            "input :[ {} ] # x [\nname: \"a [b\" dims: [ 1 ]"
        );
        let bad = config_table("backend: \"python\" input [ { name: ").unwrap_err();
        assert!(bad.contains("not a valid model configuration"), "{bad}");
        let unknown = config_table("backend: \"python\" no_such_field: 1").unwrap_err();
        assert!(unknown.contains("no_such_field"), "{unknown}");
    }
}
