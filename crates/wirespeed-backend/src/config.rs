//! A model's `config.toml`, the part every backend shares: which backend,
//! which version, the inputs and outputs, and how the server schedules the
//! model (`max_concurrency`, `max_queue`, and the tables of `scheduling.rs`). Every other key belongs to the backend, which reads it through
//! [`ModelSource`](crate::ModelSource). See `docs/model-repository.md`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use wirespeed_core::{DataType, TensorSpec};

/// The parsed `config.toml` of one model: the keys every backend shares,
/// and the backend's own keys, kept aside for it.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    /// The backend that loads and runs the model, by its registry name.
    pub backend: String,
    /// The version served; `"1"` unless set. With numbered version
    /// folders, each folder's number (`versions.rs`).
    #[serde(default = "default_version")]
    pub version: String,
    /// Whether the config sets `version` (a model in front of another
    /// server asks it for that version, else for its default one).
    #[serde(skip)]
    pub version_given: bool,
    /// The config came with a load request (Triton's `config` override),
    /// not from the model's folder: every file it names must be inside the
    /// folder, so a client cannot make the server read any other file.
    #[serde(skip)]
    pub confined: bool,
    /// No configuration file: the model's own file said it all (an ONNX
    /// graph), and Triton's auto-complete rules apply
    /// (`max_batch_size` from a variable first dimension).
    #[serde(skip)]
    pub auto_completed: bool,
    /// With numbered version folders: which versions are served
    /// (`versions.rs`); the latest one unless set.
    #[serde(default)]
    pub version_policy: Option<crate::versions::VersionPolicyKeys>,
    /// `[version_labels]`: names for versions (`stable = "1"`), as TF
    /// Serving's model config gives them; its clients ask
    /// `/v1/models/m/labels/stable` or a `version_label`. A label that is
    /// not here is refused.
    #[serde(default)]
    pub version_labels: std::collections::BTreeMap<String, String>,
    /// The inputs, as clients must send them.
    #[serde(default)]
    pub inputs: Vec<TensorConfig>,
    /// The outputs clients may ask for.
    #[serde(default)]
    pub outputs: Vec<TensorConfig>,
    /// Triton's `max_batch_size`: the model takes a batch dimension first
    /// (its shapes start with -1), and a request of more rows than this is
    /// refused, as Triton refuses it. Its configuration reads back as
    /// Triton's does: this size, and dims without the batch dimension.
    #[serde(default)]
    pub max_batch_size: Option<usize>,
    /// `[[warmup]]`: Triton's `model_warmup`, requests run before the model
    /// reports ready (`warmup.rs`).
    #[serde(default)]
    pub warmup: Vec<crate::warmup::WarmupConfig>,
    /// Requests computed at once; the server's compute threads unless set.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// Requests that may wait for a turn; more are refused at once with
    /// 503 (REST) or RESOURCE_EXHAUSTED (gRPC). 64 per unit of concurrency
    /// unless set; 0 refuses every request that cannot start at once.
    #[serde(default)]
    pub max_queue: Option<usize>,
    /// `[batching]`: requests joined into batches (`scheduling.rs`).
    #[serde(default)]
    pub batching: Option<crate::scheduling::BatchingKeys>,
    /// `[slo]`: a latency objective and the default answer.
    #[serde(default)]
    pub slo: Option<crate::scheduling::SloKeys>,
    /// `[queue]`: priorities and queue timeouts.
    #[serde(default)]
    pub queue: Option<crate::scheduling::QueueKeys>,
    /// Triton's `response_cache { enable: true }`: the server's response
    /// cache (`--cache-config`) answers this model's repeated requests.
    #[serde(default)]
    pub response_cache: bool,
    /// `[sequence]`: sequence batching of a stateful model (`sequence.rs`).
    #[serde(default)]
    pub sequence: Option<crate::sequence::SequenceKeys>,
    /// `[embedding]`: an encoder made an embedder, with its tokenizer and
    /// pooling (`wirespeed-text`'s `embedding.rs`).
    #[serde(default)]
    pub embedding: Option<toml::Table>,
    /// `[chat]`: a generating model's chat template and tokenizer
    /// (`wirespeed-text`'s `chat.rs`).
    #[serde(default)]
    pub chat: Option<toml::Table>,
    /// `[output_parameters]`: parameters every output answers with
    /// (MLServer's runtimes answer `content_type = "np"`), unless the
    /// model gives an output its own.
    #[serde(default)]
    pub output_parameters: toml::Table,
    /// Whose server the model's clients know, where V2 servers differ
    /// (`wirespeed_core::Dialect`): `"mlserver"` or `"kserve"`, which
    /// their layouts set; Triton's unless.
    #[serde(default)]
    pub dialect: Option<String>,
    /// The metadata the model's own server answers, as JSON, in place of
    /// what wirespeed reads from its file (MLServer's, from its settings;
    /// KServe's); its `name` is the served model's.
    #[serde(default)]
    pub metadata_answer: Option<String>,
    /// The backend's own top-level keys (`model_file`, ...).
    #[serde(flatten)]
    pub backend_keys: toml::Table,
}

/// An input or output: its name, datatype and shape, and any keys of the
/// backend's own (a tree model's output `kind`).
#[derive(Debug, Clone, Deserialize)]
pub struct TensorConfig {
    /// The name.
    pub name: String,
    /// The datatype, spelled as on the wire (`"FP32"`).
    pub datatype: String,
    /// The shape; `-1` for a variable dimension.
    pub shape: Vec<i64>,
    /// An output's labels file (one label per line, beside `config.toml`),
    /// for Triton's classification extension: class `i` is line `i`.
    #[serde(default)]
    pub labels: Option<String>,
    /// An image input's layout, as Triton's `format` says it: `"NCHW"` or
    /// `"NHWC"` (`FORMAT_` before either is taken too). Reported in the
    /// model's configuration, where image clients read it.
    #[serde(default)]
    pub format: Option<String>,
    /// Triton's `reshape`: the model's own shape for this tensor, where
    /// `shape` is the one on the wire (both without a batch dimension of
    /// `max_batch_size`'s); the same elements (`wirespeed-models`' `reshape.rs`).
    #[serde(default)]
    pub reshape: Option<Vec<i64>>,
    /// Triton's optional input: a request may leave it out (Python
    /// models).
    #[serde(default)]
    pub optional: bool,
    /// The backend's own keys for this tensor.
    #[serde(flatten)]
    pub backend_keys: toml::Table,
}

fn default_version() -> String {
    "1".to_owned()
}

impl ModelConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ModelConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        ModelConfig::parse(&text)
    }

    /// Parses the text of a `config.toml`.
    pub fn parse(text: &str) -> Result<ModelConfig, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        ModelConfig::from_table(table)
    }

    /// Parses a configuration given as a JSON object with the keys of
    /// `config.toml` (Triton's load request with a `config` override).
    /// Files it names are held inside the model's folder (`confined`).
    pub fn from_json(text: &str) -> Result<ModelConfig, String> {
        let table: toml::Table = serde_json::from_str(text)
            .map_err(|e| format!("it is not a JSON object with the keys of config.toml: {e}"))?;
        let mut config = ModelConfig::from_table(table)?;
        config.confined = true;
        Ok(config)
    }

    /// The file `name` that this config names under `key` (`model_file`,
    /// `ca_file`), relative to the model's `folder`. One given with a load
    /// request must stay inside the folder; `config.toml`, written by
    /// whoever runs the server, may name any file.
    pub fn file(&self, folder: &Path, key: &str, name: &str) -> Result<PathBuf, String> {
        if self.confined {
            inside(folder, key, name)
        } else {
            Ok(folder.join(name))
        }
    }

    /// Parses a configuration given as `config.toml`'s keys (a
    /// `config.pbtxt` read by `wirespeed-models`' `pbtxt.rs`).
    pub fn from_toml_table(table: toml::Table) -> Result<ModelConfig, String> {
        ModelConfig::from_table(table)
    }

    fn from_table(table: toml::Table) -> Result<ModelConfig, String> {
        let version_given = table.contains_key("version");
        let mut config: ModelConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        config.version_given = version_given;
        Ok(config)
    }
}

/// `folder` joined with `name`, which must be a relative path that does
/// not leave the folder; `key` names the setting in the error.
pub fn inside(folder: &Path, key: &str, name: &str) -> Result<PathBuf, String> {
    let stays = Path::new(name)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if stays && !name.is_empty() {
        Ok(folder.join(name))
    } else {
        Err(format!(
            "{key} '{name}' must be a file inside the model's folder"
        ))
    }
}

impl TensorConfig {
    /// The specs of `tensors` (a config's inputs or outputs), each checked
    /// as [`to_spec`](TensorConfig::to_spec) checks it.
    pub fn specs(tensors: &[TensorConfig]) -> Result<Vec<TensorSpec>, String> {
        tensors.iter().map(TensorConfig::to_spec).collect()
    }

    /// Checks the datatype and shape and returns the spec.
    pub fn to_spec(&self) -> Result<TensorSpec, String> {
        let name = &self.name;
        let datatype: DataType = self
            .datatype
            .parse()
            .map_err(|e| format!("tensor '{name}': {e}"))?;
        if let Some(bad) = self.shape.iter().find(|&&d| d < -1) {
            return Err(format!(
                "tensor '{name}' has dimension {bad}; use -1 for a variable dimension"
            ));
        }
        Ok(TensorSpec {
            name: name.clone(),
            datatype,
            shape: self.shape.clone(),
            optional: self.optional,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_titanic_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/titanic/config.toml");
        let config = ModelConfig::load(&path).unwrap();
        assert_eq!(config.backend, "xgboost");
        assert_eq!(config.inputs[0].to_spec().unwrap().shape, vec![-1, 12]);
        assert_eq!(
            config.outputs[1]
                .backend_keys
                .get("kind")
                .and_then(|k| k.as_str()),
            Some("margin")
        );
        assert!(config.backend_keys.contains_key("model_file"));
    }

    #[test]
    fn bad_specs_are_refused() {
        let t = TensorConfig {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![-2],
            labels: None,
            format: None,
            reshape: None,
            optional: false,
            backend_keys: toml::Table::new(),
        };
        assert!(t.to_spec().unwrap_err().contains("-2"));
        let t = TensorConfig {
            datatype: "FP31".into(),
            shape: vec![1],
            ..t
        };
        assert!(t.to_spec().unwrap_err().contains("FP31"));
    }
}
