//! One version of a model, loaded: [`LoadedModel`], the model with the
//! settings the server schedules it by, and `load_version`, which reads a
//! version's configuration into it (Triton's reshape and sequence
//! batching, labels, the text face, the backend's or composite's load).
//! `repository.rs` finds the folders and their layouts; this reads one.

use std::path::Path;
use std::sync::Arc;

use wirespeed_backend::Composite;
use wirespeed_core::{CpuPool, Model};

use crate::registry::{Loader, Registry};
use crate::repository::RepositoryError;
use wirespeed_backend::config::ModelConfig;
use wirespeed_backend::versions::VersionPolicy;
use wirespeed_backend::ModelSource;
use wirespeed_backend::Serving;

/// One loaded model, with the settings the server schedules it by.
pub struct LoadedModel {
    /// The name clients call it by: its folder's name.
    pub name: String,
    /// The model: what clients see of it, and, for a model that computes,
    /// what the scheduler calls.
    pub model: Arc<dyn Model>,
    /// How a model that answers through other served models runs (an
    /// ensemble, a graph, an application); `None` for one that computes.
    pub composite: Option<Arc<dyn Composite>>,
    /// How the server serves it: concurrency, queue, batching and
    /// objectives, sequences, the response cache.
    pub serving: Serving,
    /// The backend that loaded it, by its registry name.
    pub backend: String,
    /// The labels of the outputs that declare a labels file.
    pub labels: Vec<OutputLabels>,
    /// The versions of its model folder that are served: Triton's
    /// default (the latest) in the flat layout.
    pub version_policy: VersionPolicy,
    /// TF Serving's version labels: label to version.
    pub version_labels: std::collections::BTreeMap<String, String>,
    /// Triton's `max_batch_size`, when the model has a batch dimension
    /// of Triton's (0 when not).
    pub max_batch_size: usize,
    /// The inputs that declare an image layout, and it (`FORMAT_NCHW`,
    /// `FORMAT_NHWC`).
    pub input_formats: Vec<(String, String)>,
    /// Triton's string `parameters` of the model (its `[parameters]`
    /// table), read back in its configuration.
    pub parameters: Vec<(String, String)>,
    /// The parameters every output answers with, unless the model gave
    /// the output its own (`[output_parameters]`).
    pub output_parameters: wirespeed_core::Parameters,
    /// Whose server its clients know (MLServer's, KServe's, Triton's).
    pub dialect: wirespeed_core::Dialect,
    /// The metadata its own server answers (MLServer's, from its settings),
    /// in place of the model's.
    pub metadata_answer: Option<serde_json::Value>,
}

/// An output's class labels, read from its labels file at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLabels {
    /// The output.
    pub output: String,
    /// The file, as `config.toml` names it.
    pub file: String,
    /// Label `i` names class `i`.
    pub labels: Vec<String>,
}

impl LoadedModel {
    /// The models it calls, by name and version (a composite's); none for
    /// a model that computes.
    pub fn callees(&self) -> Vec<(String, Option<String>)> {
        self.composite
            .as_ref()
            .map(|c| c.callees())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("platform", &self.model.metadata().platform)
            .field("max_concurrency", &self.serving.max_concurrency)
            .field("max_queue", &self.serving.max_queue)
            .finish()
    }
}

/// Loads one version of model `name`: its config's files are in `files`
/// (the model's folder, or a version folder inside it), its labels in
/// `folder`, beside `config.toml`, as Triton keeps them.
pub(crate) fn load_version(
    name: &str,
    folder: &Path,
    files: &Path,
    config: &ModelConfig,
    registry: &Registry,
    pool: &CpuPool,
    policy: VersionPolicy,
) -> Result<LoadedModel, RepositoryError> {
    let error = |path: &Path, message: String| RepositoryError {
        path: path.to_owned(),
        message,
    };
    let config_path = folder.join("config.toml");
    let backend = registry
        .get(&config.backend)
        .map_err(|m| error(&config_path, m))?;
    let labels = read_labels(folder, config).map_err(|m| error(&config_path, m))?;
    if let Some(output) = config.outputs.iter().find(|t| t.optional) {
        return Err(error(
            &config_path,
            format!("output '{}' is optional; only inputs may be", output.name),
        ));
    }
    if let Some(input) = config.inputs.iter().find(|t| t.optional) {
        if !matches!(backend, Loader::Backend(b) if b.takes_optional_inputs()) {
            return Err(error(
                &config_path,
                format!(
                    "input '{}' is optional, which a {} model cannot take (a Python model \
                     can: its request then has no such input)",
                    input.name, config.backend
                ),
            ));
        }
    }
    // Triton's reshape: the backend loads the model's own shapes, and the
    // model is wrapped to show the wire's (`reshape.rs`).
    let batch = config.max_batch_size.unwrap_or(0) > 0;
    let (mut model_config, reshapes) =
        reshaped(config, batch).map_err(|m| error(&config_path, m))?;
    // A stateful model: its control and state tensors are the backend's
    // too, and requests of different sequences batch.
    let sequencing = match &config.sequence {
        Some(keys) => {
            let mut sequencing = wirespeed_backend::sequence::Sequencing::from_keys(keys, files)
                .map_err(|m| error(&config_path, m))?;
            sequencing.flags_as_parameters =
                matches!(backend, Loader::Backend(b) if b.sequence_flags_as_parameters());
            wirespeed_backend::sequence::extend(&mut model_config, &sequencing, batch);
            Some((keys, sequencing))
        }
        None => None,
    };
    let mut config = std::borrow::Cow::Borrowed(config);
    if let (Some((keys, _)), true, None) = (&sequencing, batch, &config.batching) {
        let table = wirespeed_backend::sequence::batching(keys, config.max_batch_size.unwrap_or(0));
        let batching = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| error(&config_path, e.to_string()))?;
        config.to_mut().batching = Some(batching);
    }
    let config: &ModelConfig = &config;
    let sequencing = sequencing.map(|(_, s)| s);
    let source =
        ModelSource::new(name, files, &model_config, pool).with_caller(registry.caller().clone());
    let (mut model, composite, backend_name): (Arc<dyn Model>, _, _) = match backend {
        Loader::Backend(backend) => (
            backend.load(&source).map_err(|m| error(files, m))?,
            None,
            backend.name(),
        ),
        Loader::Composite(backend) => {
            let composite = backend.load(&source).map_err(|m| error(files, m))?;
            (composite.clone(), Some(composite), backend.name())
        }
    };
    source
        .unread_keys(backend_name)
        .map_err(|m| error(&config_path, m))?;
    if let (false, Some(composite)) = (reshapes.is_empty(), &composite) {
        return Err(error(
            &config_path,
            format!(
                "an {}'s tensors are not reshaped; reshape in the models it calls",
                composite.noun()
            ),
        ));
    }
    if !reshapes.is_empty() {
        model = crate::reshape::Reshaped::wrap(model, &reshapes, batch);
    }
    // A text face for the OpenAI API: an embedder, a chat template.
    model = text(model, files, folder, config).map_err(|m| error(&config_path, m))?;
    let mut labels = labels;
    for (output, given) in model.class_labels() {
        if !given.is_empty() && labels.iter().all(|l| l.output != output) {
            labels.push(OutputLabels {
                output,
                file: String::new(),
                labels: given,
            });
        }
    }
    let metadata = model.metadata();
    let max_batch_size = match config.max_batch_size {
        Some(n) => n,
        // Triton's auto-complete: a model whose every tensor's first
        // dimension is variable batches, up to its default of 4.
        None if config.auto_completed
            && metadata
                .inputs
                .iter()
                .chain(&metadata.outputs)
                .all(|s| s.shape.len() > 1 && s.shape[0] == -1) =>
        {
            TRITON_DEFAULT_MAX_BATCH_SIZE
        }
        None => 0,
    };
    if max_batch_size > 0 {
        // Triton's batch dimension is implicit and variable.
        if let Some(spec) = metadata
            .inputs
            .iter()
            .chain(&metadata.outputs)
            .find(|s| s.shape.first() != Some(&-1))
        {
            return Err(error(
                &config_path,
                format!(
                    "max_batch_size {max_batch_size} means a batch dimension first, and \
                     '{}' has shape {:?}; give it -1 first",
                    spec.name, spec.shape
                ),
            ));
        }
    }
    let scheduling = wirespeed_backend::scheduling::resolve(config, metadata)
        .map_err(|m| error(&config_path, m))?;
    crate::warmup::run(&model, &config.warmup, folder, max_batch_size)
        .map_err(|m| error(&config_path, m))?;
    tracing::info!(
        model = %name,
        version = %metadata.versions.join(","),
        platform = %metadata.platform,
        "loaded model"
    );
    // A runtime's own (MLServer's metadata() once loaded), else the one
    // its settings give.
    let metadata_answer = model
        .metadata_answer()
        .and_then(|text| serde_json::from_str(text).ok())
        .or_else(|| {
            let text = config.metadata_answer.as_deref()?;
            serde_json::from_str(text).ok()
        });
    Ok(LoadedModel {
        name: name.to_owned(),
        model,
        composite,
        serving: Serving {
            max_concurrency: config.max_concurrency,
            max_queue: config.max_queue,
            scheduling,
            sequencing,
            response_cache: config.response_cache,
        },
        backend: config.backend.clone(),
        labels,
        version_policy: policy,
        version_labels: config.version_labels.clone(),
        max_batch_size,
        input_formats: input_formats(config).map_err(|m| error(&config_path, m))?,
        parameters: string_parameters(config),
        output_parameters: output_parameters(config).map_err(|m| error(&config_path, m))?,
        dialect: dialect(config).map_err(|m| error(&config_path, m))?,
        metadata_answer,
    })
}

/// The `dialect` key: whose server the model's clients know.
fn dialect(config: &ModelConfig) -> Result<wirespeed_core::Dialect, String> {
    use wirespeed_core::Dialect;
    match config.dialect.as_deref() {
        None | Some("triton") => Ok(Dialect::Triton),
        Some("mlserver") => Ok(Dialect::Mlserver),
        Some("kserve") => Ok(Dialect::Kserve),
        Some(other) => Err(format!(
            "dialect '{other}' is none of 'triton', 'mlserver', 'kserve'"
        )),
    }
}

/// `[output_parameters]`, as the protocol's parameters: strings, numbers
/// and bools.
fn output_parameters(config: &ModelConfig) -> Result<wirespeed_core::Parameters, String> {
    use wirespeed_core::ParameterValue;
    config
        .output_parameters
        .iter()
        .map(|(key, value)| {
            let value = match value {
                toml::Value::String(s) => ParameterValue::String(s.clone()),
                toml::Value::Integer(i) => ParameterValue::Int(*i),
                toml::Value::Float(x) => ParameterValue::Float(*x),
                toml::Value::Boolean(b) => ParameterValue::Bool(*b),
                other => {
                    return Err(format!(
                        "output_parameters.{key} must be a string, number or bool, not {other}"
                    ))
                }
            };
            Ok((key.clone(), value))
        })
        .collect()
}

/// The model's `[parameters]`, as Triton's strings.
fn string_parameters(config: &ModelConfig) -> Vec<(String, String)> {
    let Some(toml::Value::Table(table)) = config.backend_keys.get("parameters") else {
        return Vec::new();
    };
    table
        .iter()
        .map(|(k, v)| match v {
            toml::Value::String(s) => (k.clone(), s.clone()),
            other => (k.clone(), other.to_string()),
        })
        .collect()
}

/// The image layouts the inputs declare, as Triton names them; one on an
/// output, or one Triton does not have, is an error.
fn input_formats(config: &ModelConfig) -> Result<Vec<(String, String)>, String> {
    if let Some(output) = config.outputs.iter().find(|t| t.format.is_some()) {
        return Err(format!(
            "output '{}' has a format; an image layout belongs to inputs",
            output.name
        ));
    }
    let mut formats = Vec::new();
    for input in &config.inputs {
        let Some(format) = &input.format else {
            continue;
        };
        let name = match format.trim_start_matches("FORMAT_") {
            "NONE" => continue,
            "NCHW" => "FORMAT_NCHW",
            "NHWC" => "FORMAT_NHWC",
            other => {
                return Err(format!(
                    "input '{}' has format '{other}'; Triton's are NCHW and NHWC",
                    input.name
                ))
            }
        };
        formats.push((input.name.clone(), name.to_owned()));
    }
    Ok(formats)
}

/// `config` with each reshaped tensor at the model's own shape, and the
/// reshapes; `config` itself when none is.
fn reshaped(
    config: &ModelConfig,
    batch: bool,
) -> Result<(ModelConfig, Vec<crate::reshape::Reshape>), String> {
    let mut model_config = config.clone();
    let mut reshapes = Vec::new();
    for tensor in model_config
        .inputs
        .iter_mut()
        .chain(model_config.outputs.iter_mut())
    {
        let Some(to) = tensor.reshape.clone() else {
            continue;
        };
        let wire = if batch {
            tensor.shape.get(1..).unwrap_or(&[]).to_vec()
        } else {
            tensor.shape.clone()
        };
        let fixed = |s: &[i64]| s.iter().all(|&d| d >= 0);
        let count = |s: &[i64]| s.iter().try_fold(1u64, |all, &d| all.checked_mul(d as u64));
        if fixed(&wire) && fixed(&to) && (count(&wire).is_none() || count(&wire) != count(&to)) {
            return Err(format!(
                "'{}' has dims {wire:?} and reshape {to:?}: not the same number of elements",
                tensor.name
            ));
        }
        if to.iter().filter(|&&d| d < 0).count() > 1 {
            return Err(format!(
                "'{}' has reshape {to:?}: at most one dimension may be -1",
                tensor.name
            ));
        }
        let mut shape = if batch { vec![-1] } else { Vec::new() };
        shape.extend(&to);
        tensor.shape = shape;
        reshapes.push(crate::reshape::Reshape {
            name: tensor.name.clone(),
            wire,
            model: to,
        });
    }
    Ok((model_config, reshapes))
}

/// The `max_batch_size` Triton's auto-complete gives a model that can
/// batch (its `--backend-config=default-max-batch-size`).
const TRITON_DEFAULT_MAX_BATCH_SIZE: usize = 4;

/// Reads the labels file of each output that names one. A labels file
/// is a classification output's, so naming one on an input is a mistake.
fn read_labels(folder: &Path, config: &ModelConfig) -> Result<Vec<OutputLabels>, String> {
    if let Some(input) = config.inputs.iter().find(|t| t.labels.is_some()) {
        return Err(format!(
            "input '{}' has a labels file; labels belong to outputs",
            input.name
        ));
    }
    let mut all = Vec::new();
    for output in &config.outputs {
        let Some(file) = &output.labels else {
            continue;
        };
        let path = wirespeed_backend::config::inside(
            folder,
            &format!("output '{}': the labels file", output.name),
            file,
        )?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "output '{}': cannot read the labels file {}: {e}",
                output.name,
                path.display()
            )
        })?;
        all.push(OutputLabels {
            output: output.name.clone(),
            file: file.clone(),
            labels: text.lines().map(|l| l.trim_end().to_owned()).collect(),
        });
    }
    Ok(all)
}

/// `model` with the text face its config asks for (`text/`).
#[cfg(feature = "text")]
fn text(
    model: Arc<dyn Model>,
    files: &Path,
    folder: &Path,
    config: &ModelConfig,
) -> Result<Arc<dyn Model>, String> {
    wirespeed_text::wrap(model, files, folder, config)
}

/// Without the `text` feature: refused when asked for.
#[cfg(not(feature = "text"))]
fn text(
    model: Arc<dyn Model>,
    _files: &Path,
    _folder: &Path,
    config: &ModelConfig,
) -> Result<Arc<dyn Model>, String> {
    if config.embedding.is_some() || config.chat.is_some() {
        return Err(
            "[embedding] and [chat] need wirespeed built with the 'text' feature (on by \
                    default)"
                .into(),
        );
    }
    Ok(model)
}
