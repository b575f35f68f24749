//! MLServer's model repositories, read as they are: each
//! `model-settings.json` is a model, configured here as its `config.toml`
//! would configure it, so that `wirespeed serve --models DIR` serves the
//! folder `mlserver start DIR` serves.
//!
//! | `implementation` | served by |
//! |---|---|
//! | `mlserver_xgboost.XGBoostModel` | the `xgboost` tree backend, outputs `predict` (a classifier's labels, INT64) and `predict_proba` |
//! | `mlserver_lightgbm.LightGBMModel` | the `lightgbm` tree backend, output `predict` (the booster's prediction) |
//! | `mlserver_sklearn.SKLearnModel` | the `sklearn` backend (`predict`, `predict_proba`, `transform`, `extra.predict_fn`) |
//! | any other (`models.Scorer`, `mlserver_mlflow.MLflowRuntime`, ...) | the `python` backend running the class with the model's own `mlserver` package |
//!
//! The native runtimes take a request's one input whatever its name, and
//! answer `predict` unless the request asks for other outputs, as MLServer's
//! do ([`Binding::FirstInput`](wirespeed_core::Binding)); a custom runtime
//! takes whatever it is sent and answers what it returns
//! ([`Binding::Open`](wirespeed_core::Binding)).
//!
//! Keys: `name` (the folder's name unless given), `implementation`,
//! `parameters.uri` (the model file, or a folder holding one of the
//! runtime's well-known names; the folder itself unless given),
//! `parameters.version` (the version served; folders of one name side by
//! side are that model's versions), `parameters.extra` (given to
//! the runtime), `parameters.environment_path` (the model's Python
//! environment), `inputs` and `outputs` (shown in the model's metadata; a
//! custom runtime reads their content types), `max_batch_size` and
//! `max_batch_time` (adaptive batching: `[batching]` with a queue delay of
//! `max_batch_time` seconds), `parallel_workers` (worker processes of a
//! Python-run model; `settings.json`'s when not given). Keys that mean
//! nothing here (`platform`, `versions`, `warm_workers`, `cache_enabled`,
//! ...) are taken and logged; a key MLServer does not have is refused by
//! name.
//!
//! `settings.json` is read from the model's folder or the nearest folder
//! above it that has one (the folder `mlserver start` is given): its
//! `parallel_workers` applies, and so does its `model_repository_root`
//! (where the models are, below the repository folder); its ports and
//! host apply when the server is asked (`--ports-from-settings`,
//! [`listen_addresses`]), and the rest are MLServer's own.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use wirespeed_backend::config::ModelConfig;

/// The file that makes a folder an MLServer model.
pub(crate) const MODEL_SETTINGS: &str = "model-settings.json";

/// The keys of `model-settings.json` that wirespeed acts on.
const MODEL_KEYS: &[&str] = &[
    "name",
    "implementation",
    "parameters",
    "inputs",
    "outputs",
    "max_batch_size",
    "max_batch_time",
    "parallel_workers",
];

/// Keys of `model-settings.json` that MLServer has and that mean nothing
/// here: taken, and logged.
const MODEL_KEYS_IGNORED: &[&str] = &["platform", "versions", "warm_workers", "cache_enabled"];

/// The keys of `parameters` that wirespeed acts on.
const PARAMETER_KEYS: &[&str] = &[
    "uri",
    "version",
    "extra",
    "environment_path",
    "content_type",
    "format",
];

/// Keys of `parameters` that mean nothing here.
const PARAMETER_KEYS_IGNORED: &[&str] = &["inference_pool_gid", "autogenerate_inference_pool_gid"];

/// The keys of `settings.json`, all MLServer's; only `parallel_workers`
/// applies to models.
const SERVER_KEYS: &[&str] = &[
    "debug",
    "parallel_workers",
    "parallel_workers_timeout",
    "environments_dir",
    "model_repository_implementation",
    "model_repository_root",
    "model_repository_implementation_args",
    "load_models_at_startup",
    "server_name",
    "server_version",
    "extensions",
    "host",
    "http_port",
    "root_path",
    "grpc_port",
    "grpc_max_message_length",
    "cors_settings",
    "metrics_endpoint",
    "metrics_port",
    "metrics_rest_server_prefix",
    "metrics_dir",
    "use_structured_logging",
    "logging_settings",
    "kafka_enabled",
    "kafka_servers",
    "kafka_topic_input",
    "kafka_topic_output",
    "tracing_server",
    "cache_enabled",
    "cache_size",
    "gzip_enabled",
];

/// Where MLServer looks for models when started on `dir`: `dir`, or its
/// `settings.json`'s `model_repository_root` (relative to `dir`).
pub(crate) fn repository_root(dir: &Path) -> PathBuf {
    std::fs::read(dir.join("settings.json"))
        .ok()
        .and_then(|text| serde_json::from_slice::<Value>(&text).ok())
        .and_then(|v| {
            v.get("model_repository_root")?
                .as_str()
                .map(|r| dir.join(r))
        })
        .filter(|root| root.is_dir())
        .unwrap_or_else(|| dir.to_owned())
}

/// The addresses MLServer's `settings.json` in `dir` gives its REST and
/// gRPC servers (`host`, `http_port`, `grpc_port`; MLServer's defaults,
/// 0.0.0.0, 8080 and 8081, for those it leaves out), as `HOST:PORT`, for
/// a server asked to listen where MLServer would.
pub fn listen_addresses(dir: &Path) -> Result<(String, String), String> {
    let path = dir.join("settings.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let settings: Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a JSON object: {e}", path.display()))?;
    let host = match settings.get("host") {
        None => "0.0.0.0".to_owned(),
        Some(Value::String(h)) if h.contains(':') => format!("[{h}]"),
        Some(Value::String(h)) => h.clone(),
        Some(other) => return Err(format!("{}: host is {other}, not a string", path.display())),
    };
    let port = |key: &str, default: u16| match settings.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("{}: {key} is {v}, not a port", path.display())),
    };
    Ok((
        format!("{host}:{}", port("http_port", 8080)?),
        format!("{host}:{}", port("grpc_port", 8081)?),
    ))
}

/// Whether `dir` holds MLServer's models (a `model-settings.json` at any
/// depth below where MLServer would look): such a repository's models may
/// be loaded and unloaded through the repository API, as MLServer always
/// allows.
pub fn is_repository(dir: &Path) -> bool {
    !models_under(&repository_root(dir)).is_empty()
}

/// Whether `folder` is an MLServer model's.
pub(crate) fn is_model(folder: &Path) -> bool {
    folder.join(MODEL_SETTINGS).is_file()
}

/// The MLServer models under `dir`, as MLServer finds them: every
/// `model-settings.json` below it, at any depth (hidden folders skipped),
/// named by its `name` or its folder's. `dir` itself is one when it has
/// one (`mlserver start .` in a model's folder).
pub(crate) fn models_under(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    walk(dir, 0, &mut found);
    found.sort();
    found
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<(String, PathBuf)>) {
    if is_model(dir) {
        found.push((model_name(dir), dir.to_owned()));
        return;
    }
    if depth >= 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() && !entry.file_name().to_string_lossy().starts_with('.') {
            walk(&path, depth + 1, found);
        }
    }
}

/// The repository's models with MLServer's versions of one model (folders
/// of one name side by side, each its settings' `parameters.version`)
/// taken together as one model in their common folder, which
/// [`version_folders`] reads back. Two folders of one name elsewhere stay
/// two, for the caller to refuse.
pub(crate) fn versions_together(
    folders: Vec<(String, PathBuf)>,
) -> Result<Vec<(String, PathBuf)>, crate::repository::RepositoryError> {
    let mut together: Vec<(String, PathBuf)> = Vec::with_capacity(folders.len());
    // Where each name is in `together`: a list scan per folder made a
    // repository of 10,000 models quadratic.
    let mut at: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
    for (name, folder) in folders {
        let parent = folder.parent().map(Path::to_owned);
        let sibling = at.get(&name).and_then(|places| {
            places.iter().copied().find(|&i| {
                let f = &together[i].1;
                f.parent().map(Path::to_owned) == parent || Some(f) == parent.as_ref()
            })
        });
        match (sibling, parent) {
            (Some(at), Some(parent)) if is_model(&folder) && !is_model(&parent) => {
                together[at].1 = parent;
            }
            _ => {
                at.entry(name.clone()).or_default().push(together.len());
                together.push((name, folder));
            }
        }
    }
    Ok(together)
}

/// The versions of MLServer model `name` whose settings lie in folders
/// below `folder` (`models/m/v0.1.0/model-settings.json`, ...): each
/// version's `parameters.version` (`None` where it has none) and folder,
/// in folder order; none when `folder` is not laid out so (it has settings
/// of its own, or fewer than two folders of the name).
pub(crate) fn version_folders(folder: &Path, name: &str) -> Vec<(Option<String>, PathBuf)> {
    if is_model(folder) || folder.join("config.toml").is_file() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut found: Vec<(Option<String>, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_model(p) && model_name(p) == name)
        .map(|p| {
            let version = std::fs::read(p.join(MODEL_SETTINGS))
                .ok()
                .and_then(|text| serde_json::from_slice::<Value>(&text).ok())
                .and_then(|v| {
                    v.pointer("/parameters/version")?
                        .as_str()
                        .map(str::to_owned)
                });
            (version, p)
        })
        .collect();
    if found.len() < 2 {
        return Vec::new();
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    found
}

/// The model's name: its settings' `name`, else its folder's.
pub(crate) fn model_name(folder: &Path) -> String {
    let named = std::fs::read(folder.join(MODEL_SETTINGS))
        .ok()
        .and_then(|text| serde_json::from_slice::<Value>(&text).ok())
        .and_then(|v| v.get("name")?.as_str().map(str::to_owned))
        .filter(|n| !n.is_empty());
    named.unwrap_or_else(|| {
        folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

/// The configuration of the MLServer model `name` in `folder`.
pub(crate) fn model_config(name: &str, folder: &Path) -> Result<ModelConfig, String> {
    let path = folder.join(MODEL_SETTINGS);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read it: {e}"))?;
    let settings: Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("{MODEL_SETTINGS} is not a JSON object: {e}"))?;
    for key in settings.keys() {
        if MODEL_KEYS_IGNORED.contains(&key.as_str()) {
            tracing::info!(model = %name, key = %key, "{MODEL_SETTINGS}: MLServer's key has no meaning here; ignored");
        } else if !MODEL_KEYS.contains(&key.as_str()) {
            // MLServer's ModelSettings ignores keys it does not know
            // (pydantic's extra="ignore"); so does wirespeed, saying so.
            tracing::warn!(
                model = %name, key = %key,
                "{MODEL_SETTINGS}: not a key of MLServer's model settings (it has {}); ignored, as MLServer ignores it",
                MODEL_KEYS.iter().chain(MODEL_KEYS_IGNORED).map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let empty = Map::new();
    let parameters = match settings.get("parameters") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(p)) => p,
        Some(other) => return Err(format!("'parameters' must be an object, not {other}")),
    };
    for key in parameters.keys() {
        if PARAMETER_KEYS_IGNORED.contains(&key.as_str()) {
            tracing::info!(model = %name, key = %key, "{MODEL_SETTINGS}: MLServer's parameter has no meaning here; ignored");
        } else if key == "environment_tarball" {
            return Err(
                "parameters.environment_tarball is not unpacked by wirespeed: unpack it and \
                 give its folder as parameters.environment_path"
                    .into(),
            );
        } else if !PARAMETER_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "'parameters.{key}' is not one of MLServer's model parameters ({})",
                PARAMETER_KEYS
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let string = |map: &Map<String, Value>, key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("'{key}' must be a string, not {other}")),
        }
    };
    let implementation = string(&settings, "implementation")?.ok_or_else(|| {
        "has no 'implementation': MLServer's runtimes are named by it \
         (mlserver_sklearn.SKLearnModel, mlserver_xgboost.XGBoostModel, models.MyModel, ...)"
            .to_owned()
    })?;
    let uri = string(parameters, "uri")?;
    let server = server_settings(folder)?;
    let workers = match settings.get("parallel_workers") {
        Some(Value::Number(n)) => n.as_u64(),
        _ => server.parallel_workers,
    };

    let mut table = toml::Table::new();
    // MLServer's clients' conventions (a BYTES input's byte length as its
    // last dimension, V2 JSON on generate_stream), and its metadata.
    table.insert("dialect".into(), "mlserver".into());
    let metadata = metadata_answer(name, &settings, parameters);
    table.insert("metadata_answer".into(), metadata.to_string().into());
    // A model whose settings name no version has none: its answers carry
    // no model_version and the index lists it without one, as MLServer's.
    let version = string(parameters, "version")?.unwrap_or_default();
    table.insert("version".into(), version.into());
    let batch = settings
        .get("max_batch_size")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if batch > 1 {
        let seconds = settings
            .get("max_batch_time")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let mut batching = toml::Table::new();
        batching.insert("max_batch_size".into(), (batch as i64).into());
        batching.insert(
            "max_queue_delay_us".into(),
            ((seconds.max(0.0) * 1e6).round() as i64).into(),
        );
        table.insert("batching".into(), batching.into());
    }
    let file = |wellknown: &[&str]| model_file(folder, uri.as_deref(), wellknown);
    // MLServer's runtimes for these frameworks answer each output encoded
    // by its NumPy codec, which says so in the output's parameters. (Those
    // that run in a worker, MLServer's own code, say it themselves.)
    if matches!(
        implementation.as_str(),
        "mlserver_xgboost.XGBoostModel"
            | "mlserver_lightgbm.LightGBMModel"
            | "mlserver_sklearn.SKLearnModel"
    ) {
        let mut numpy = toml::Table::new();
        numpy.insert("content_type".into(), "np".into());
        table.insert("output_parameters".into(), numpy.into());
    }
    match implementation.as_str() {
        "mlserver_xgboost.XGBoostModel" => {
            let model = file(&["model.bst", "model.json", "model.ubj"])?;
            let bytes = std::fs::read(&model)
                .map_err(|e| format!("cannot read {}: {e}", model.display()))?;
            let classifier =
                wirespeed_trees::xgboost_estimator_type(&bytes).as_deref() == Some("classifier");
            table.insert("backend".into(), "xgboost".into());
            table.insert("model_file".into(), model.display().to_string().into());
            table.insert("binding".into(), "first_input".into());
            table.insert(
                "inputs".into(),
                vec![tensor("input-0", "FP32", [-1, -1], None)].into(),
            );
            let outputs = if classifier {
                vec![
                    tensor("predict", "INT64", [-1, 1], Some("label")),
                    tensor("predict_proba", "FP32", [-1, -1], Some("probabilities")),
                ]
            } else {
                vec![tensor("predict", "FP32", [-1, -1], Some("prediction"))]
            };
            table.insert("outputs".into(), outputs.into());
            refuse_declared(&settings, name, &implementation);
        }
        "mlserver_lightgbm.LightGBMModel" => {
            let model = file(&["model.bst"])?;
            table.insert("backend".into(), "lightgbm".into());
            table.insert("model_file".into(), model.display().to_string().into());
            table.insert("binding".into(), "first_input".into());
            table.insert(
                "inputs".into(),
                vec![tensor("input-0", "FP32", [-1, -1], None)].into(),
            );
            table.insert(
                "outputs".into(),
                // LightGBM's Python package predicts in FP64.
                vec![tensor("predict", "FP64", [-1, -1], Some("prediction"))].into(),
            );
            refuse_declared(&settings, name, &implementation);
        }
        "mlserver_sklearn.SKLearnModel" => {
            let model = file(&["model.joblib", "model.pickle", "model.pkl"])?;
            table.insert("backend".into(), "sklearn".into());
            table.insert("model_file".into(), model.display().to_string().into());
            table.insert("convention".into(), "mlserver".into());
            // A batch of requests is one call of the model, unless the
            // settings say how MLServer batches it.
            if !settings.contains_key("max_batch_size") {
                let mut batching = toml::Table::new();
                batching.insert("max_batch_size".into(), 32.into());
                table.insert("batching".into(), batching.into());
            }
            if let Some(Value::Object(extra)) = parameters.get("extra") {
                if let Some(function) = extra.get("predict_fn").and_then(Value::as_str) {
                    table.insert("predict_fn".into(), function.into());
                }
            }
            python_keys(&mut table, folder, parameters, workers)?;
            refuse_declared(&settings, name, &implementation);
        }
        _ => {
            table.insert("backend".into(), "python".into());
            table.insert("api".into(), "mlserver".into());
            table.insert("model_file".into(), MODEL_SETTINGS.into());
            python_keys(&mut table, folder, parameters, workers)?;
            if batch > 1 && !settings.contains_key("inputs") {
                tracing::warn!(
                    model = %name,
                    "max_batch_size joins a custom runtime's requests when {MODEL_SETTINGS} \
                     declares its inputs (with -1 first); without, each request runs alone"
                );
            }
            for (key, tensors) in [("inputs", "inputs"), ("outputs", "outputs")] {
                if let Some(Value::Array(list)) = settings.get(tensors) {
                    let declared = list
                        .iter()
                        .map(|t| declared_tensor(t, key))
                        .collect::<Result<Vec<_>, _>>()?;
                    table.insert(key.into(), declared.into());
                }
            }
        }
    }
    ModelConfig::from_toml_table(table)
}

/// The keys of a model run by Python workers: its environment and its
/// worker count.
fn python_keys(
    table: &mut toml::Table,
    folder: &Path,
    parameters: &Map<String, Value>,
    workers: Option<u64>,
) -> Result<(), String> {
    if let Some(path) = parameters.get("environment_path").and_then(Value::as_str) {
        let env = folder.join(path);
        if !env.join("bin").join("python").exists() {
            return Err(format!(
                "parameters.environment_path '{path}' has no bin/python"
            ));
        }
        table.insert("venv".into(), env.display().to_string().into());
    }
    if let Some(n) = workers.filter(|&n| n > 0) {
        table.insert("instances".into(), (n as i64).into());
    }
    Ok(())
}

/// Logs the declared tensors of a native runtime: MLServer shows them, its
/// runtime does not check them, and neither does wirespeed's.
fn refuse_declared(settings: &Map<String, Value>, name: &str, implementation: &str) {
    if settings.contains_key("inputs") || settings.contains_key("outputs") {
        tracing::info!(
            model = %name,
            "{implementation} reads the request's one input and answers its own outputs; \
             the inputs and outputs {MODEL_SETTINGS} declares are not checked"
        );
    }
}

/// A tensor of `config.toml`.
fn tensor(name: &str, datatype: &str, shape: [i64; 2], kind: Option<&str>) -> toml::Value {
    let mut t = toml::Table::new();
    t.insert("name".into(), name.into());
    t.insert("datatype".into(), datatype.into());
    t.insert(
        "shape".into(),
        toml::Value::Array(shape.iter().map(|&d| d.into()).collect()),
    );
    if let Some(kind) = kind {
        t.insert("kind".into(), kind.into());
    }
    t.into()
}

/// The metadata MLServer answers for a model (`GET /v2/models/m`): what
/// its settings say, not what its file holds: `versions` and `platform`
/// as set (empty unless), the declared `inputs` and `outputs` (none
/// unless), and `parameters` with the settings' `content_type` when set.
fn metadata_answer(
    name: &str,
    settings: &Map<String, Value>,
    parameters: &Map<String, Value>,
) -> Value {
    let tensors = |key: &str| -> Vec<Value> {
        let Some(Value::Array(list)) = settings.get(key) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(Value::as_object)
            .map(|t| {
                let mut kept = Map::new();
                for field in ["name", "datatype", "shape", "parameters"] {
                    if let Some(value) = t.get(field).filter(|v| !v.is_null()) {
                        kept.insert(field.to_owned(), value.clone());
                    }
                }
                Value::Object(kept)
            })
            .collect()
    };
    let mut own = Map::new();
    if let Some(content_type) = parameters.get("content_type").filter(|v| v.is_string()) {
        own.insert("content_type".to_owned(), content_type.clone());
    }
    serde_json::json!({
        "name": name,
        "versions": settings.get("versions").filter(|v| v.is_array()).cloned().unwrap_or_else(|| serde_json::json!([])),
        "platform": settings.get("platform").and_then(Value::as_str).unwrap_or(""),
        "inputs": tensors("inputs"),
        "outputs": tensors("outputs"),
        "parameters": own,
    })
}

/// A tensor MLServer's settings declare (`name`, `datatype`, `shape`,
/// `parameters.content_type`), as `config.toml` declares it.
fn declared_tensor(value: &Value, key: &str) -> Result<toml::Value, String> {
    let bad = |why: &str| format!("{key}: {why} ({value})");
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a tensor needs a name"))?;
    let datatype = value
        .get("datatype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a tensor needs a datatype"))?;
    let shape = value
        .get("shape")
        .and_then(Value::as_array)
        .map(|dims| dims.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
        .unwrap_or(Some(vec![-1]))
        .ok_or_else(|| bad("a shape is a list of integers"))?;
    let mut t = toml::Table::new();
    t.insert("name".into(), name.into());
    t.insert("datatype".into(), datatype.into());
    t.insert(
        "shape".into(),
        toml::Value::Array(shape.into_iter().map(Into::into).collect()),
    );
    Ok(t.into())
}

/// The model's file: `uri` (relative to the folder), or, when `uri` is a
/// folder or not given, the first of the runtime's well-known names in it;
/// an absolute path.
fn model_file(folder: &Path, uri: Option<&str>, wellknown: &[&str]) -> Result<PathBuf, String> {
    let found = find_model_file(folder, uri, wellknown)?;
    found
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", found.display()))
}

fn find_model_file(
    folder: &Path,
    uri: Option<&str>,
    wellknown: &[&str],
) -> Result<PathBuf, String> {
    let given = match uri {
        Some(uri) => {
            let path = uri.strip_prefix("file://").unwrap_or(uri);
            if uri.contains("://") && !uri.starts_with("file://") {
                return Err(format!(
                    "parameters.uri '{uri}' is remote; wirespeed reads model files from disk \
                     (download it into the folder)"
                ));
            }
            folder.join(path)
        }
        None => folder.to_owned(),
    };
    if given.is_file() {
        return Ok(given);
    }
    if given.is_dir() {
        if let Some(found) = wellknown
            .iter()
            .map(|n| given.join(n))
            .find(|p| p.is_file())
        {
            return Ok(found);
        }
        return Err(format!(
            "{} has none of the runtime's model files ({})",
            given.display(),
            wellknown.join(", ")
        ));
    }
    Err(format!(
        "parameters.uri '{}' is neither a file nor a folder ({} does not exist)",
        uri.unwrap_or_default(),
        given.display()
    ))
}

/// What applies of MLServer's `settings.json`.
#[derive(Debug, Default)]
struct ServerSettings {
    parallel_workers: Option<u64>,
}

/// `settings.json` in `folder` or the nearest folder above it.
fn server_settings(folder: &Path) -> Result<ServerSettings, String> {
    let Some(path) = folder
        .ancestors()
        .take(4)
        .map(|d| d.join("settings.json"))
        .find(|p| p.is_file())
    else {
        return Ok(ServerSettings::default());
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let map: Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a JSON object: {e}", path.display()))?;
    for key in map.keys().filter(|k| !SERVER_KEYS.contains(&k.as_str())) {
        tracing::warn!(
            "{}: '{key}' is not a key of MLServer's settings; ignored, as MLServer ignores it",
            path.display()
        );
    }
    Ok(ServerSettings {
        parallel_workers: map.get("parallel_workers").and_then(Value::as_u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(settings: &str, files: &[&str]) -> crate::testdir::Dir {
        let dir = crate::testdir::Dir::new();
        std::fs::write(dir.path().join(MODEL_SETTINGS), settings).unwrap();
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        dir
    }

    #[test]
    fn a_sklearn_model_is_found_by_its_wellknown_name_and_versioned() {
        let dir = folder(
            r#"{"name": "iris", "implementation": "mlserver_sklearn.SKLearnModel",
                "parameters": {"version": "v0.1.0", "extra": {"predict_fn": "predict_proba"}}}"#,
            &["model.pickle"],
        );
        let config = model_config("iris", dir.path()).unwrap();
        assert_eq!(config.backend, "sklearn");
        assert_eq!(config.version, "v0.1.0");
        let file = config.backend_keys["model_file"].as_str().unwrap();
        assert!(file.ends_with("model.pickle"), "{file}");
        assert_eq!(
            config.backend_keys["predict_fn"].as_str(),
            Some("predict_proba")
        );
    }

    #[test]
    fn a_custom_runtime_runs_in_python_with_its_declared_tensors() {
        let dir = folder(
            r#"{"implementation": "models.Scorer", "max_batch_size": 8, "max_batch_time": 0.002,
                "inputs": [{"name": "x", "datatype": "INT32", "shape": [2, 2],
                            "parameters": {"content_type": "np"}}]}"#,
            &["models.py"],
        );
        let config = model_config("scorer", dir.path()).unwrap();
        assert_eq!(config.backend, "python");
        assert_eq!(config.backend_keys["api"].as_str(), Some("mlserver"));
        assert_eq!(config.inputs[0].shape, vec![2, 2]);
        assert_eq!(config.batching.unwrap().max_batch_size(), 8);
    }

    #[test]
    fn unknown_keys_are_ignored_and_missing_files_named() {
        // MLServer ignores keys its settings do not have; so does wirespeed.
        let dir = folder(
            r#"{"implementation": "models.M", "version": "x"}"#,
            &["models.py"],
        );
        assert!(model_config("m", dir.path()).is_ok());
        let dir = folder(
            r#"{"implementation": "mlserver_xgboost.XGBoostModel", "parameters": {"uri": "./nope.json"}}"#,
            &[],
        );
        let err = model_config("m", dir.path()).unwrap_err();
        assert!(err.contains("nope.json"), "{err}");
        let dir = folder(
            r#"{"implementation": "models.M", "parameters": {"uri": "s3://b/m"}}"#,
            &[],
        );
        assert!(
            model_config("m", dir.path()).is_ok(),
            "a custom runtime reads its own uri"
        );
    }

    #[test]
    fn versions_of_one_model_side_by_side_are_one_model() {
        let root = crate::testdir::Dir::new();
        for version in ["v0.1.0", "v0.2.0"] {
            let folder = root.path().join("m").join(version);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(
                folder.join(MODEL_SETTINGS),
                format!(r#"{{"name": "m", "parameters": {{"version": "{version}"}}}}"#),
            )
            .unwrap();
        }
        let found = versions_together(models_under(root.path())).unwrap();
        assert_eq!(found, vec![("m".to_owned(), root.path().join("m"))]);
        let versions = version_folders(&root.path().join("m"), "m");
        assert_eq!(
            versions
                .iter()
                .map(|(v, _)| v.as_deref())
                .collect::<Vec<_>>(),
            vec![Some("v0.1.0"), Some("v0.2.0")]
        );
    }

    #[test]
    fn the_repository_root_is_the_settings_when_they_name_one() {
        let dir = crate::testdir::Dir::new();
        assert_eq!(repository_root(dir.path()), dir.path());
        std::fs::create_dir(dir.path().join("models")).unwrap();
        std::fs::write(
            dir.path().join("settings.json"),
            r#"{"model_repository_root": "./models"}"#,
        )
        .unwrap();
        assert_eq!(repository_root(dir.path()), dir.path().join("./models"));
    }

    #[test]
    fn models_are_found_at_any_depth_and_named_by_their_settings() {
        let root = crate::testdir::Dir::new();
        let deep = root.path().join("team").join("iris");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join(MODEL_SETTINGS), r#"{"name": "flowers"}"#).unwrap();
        let found = models_under(root.path());
        assert_eq!(found, vec![("flowers".to_owned(), deep)]);
    }
}
