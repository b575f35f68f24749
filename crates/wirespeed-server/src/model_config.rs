//! A model's `config.toml`: which backend serves it, from which file, with
//! which inputs and outputs. See `docs/model-repository.md`.

use std::path::Path;

use serde::Deserialize;
use wirespeed_core::{DataType, TensorSpec};

/// The parsed `config.toml` of one model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The runtime that serves the model.
    pub backend: Backend,
    /// The model file, relative to the model's folder (none for `identity`).
    #[serde(default)]
    pub model_file: String,
    /// The version served; `"1"` unless set.
    #[serde(default = "default_version")]
    pub version: String,
    /// The inputs, as clients must send them (tree models with
    /// `preprocess` take one input per column instead, and declare none).
    #[serde(default)]
    pub inputs: Vec<TensorConfig>,
    /// Tree models: raw named columns turned into the feature vector, in
    /// feature order. See `docs/model-repository.md`.
    #[serde(default)]
    pub preprocess: Vec<PreprocessConfig>,
    /// The outputs clients may ask for.
    pub outputs: Vec<OutputConfig>,
    /// Requests computed at once; the server's cores unless set.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// Requests that may wait for a turn; more are refused at once with
    /// 503 (REST) or RESOURCE_EXHAUSTED (gRPC). 64 per unit of concurrency
    /// unless set.
    #[serde(default)]
    pub max_queue: Option<usize>,
    /// Identity models only: milliseconds each inference takes, to test and
    /// measure what the server does when a model is slow (overload,
    /// draining).
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

/// The runtimes a model can be served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// An XGBoost model saved as JSON, run by `wirespeed-trees`.
    Xgboost,
    /// A LightGBM model saved as text (`save_model`), run by `wirespeed-trees`.
    Lightgbm,
    /// Outputs that echo the inputs, for testing and measuring the server.
    Identity,
}

impl Backend {
    /// The `platform` string model metadata reports.
    pub fn platform(self) -> &'static str {
        match self {
            Backend::Xgboost => "xgboost_json",
            Backend::Lightgbm => "lightgbm_text",
            Backend::Identity => "identity",
        }
    }
}

/// An input's name, datatype and shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorConfig {
    /// The name.
    pub name: String,
    /// The datatype, spelled as on the wire (`"FP32"`).
    pub datatype: String,
    /// The shape; `-1` for a variable dimension.
    pub shape: Vec<i64>,
}

/// An output: a tensor and what it holds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// The name.
    pub name: String,
    /// The datatype, spelled as on the wire.
    pub datatype: String,
    /// The shape; `-1` for a variable dimension.
    pub shape: Vec<i64>,
    /// What the output holds (tree models only).
    #[serde(default)]
    pub kind: Option<OutputKind>,
}

/// One raw input column of a tree model and its transform.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreprocessConfig {
    /// The column: also the name of its input tensor.
    pub column: String,
    /// `identity`, `min_max`, `standard`, `quantile` (numbers), `ordinal`,
    /// `one_hot` (strings).
    pub transform: String,
    /// The input's datatype for numbers: `FP32` (default), `FP64` or `INT64`.
    #[serde(default)]
    pub datatype: Option<String>,
    /// The number a missing value (NaN) is read as.
    #[serde(default)]
    pub fill: Option<f64>,
    /// `min_max`: the value that maps to 0.
    #[serde(default)]
    pub min: Option<f64>,
    /// `min_max`: the value that maps to 1.
    #[serde(default)]
    pub max: Option<f64>,
    /// `standard`: the mean subtracted.
    #[serde(default)]
    pub mean: Option<f64>,
    /// `standard`: the standard deviation divided by.
    #[serde(default)]
    pub std: Option<f64>,
    /// `quantile`: sorted cut points.
    #[serde(default)]
    pub quantiles: Option<Vec<f64>>,
    /// `ordinal`: string to code.
    #[serde(default)]
    pub mapping: Option<std::collections::BTreeMap<String, f64>>,
    /// `ordinal`: the code of an unknown string (0 unless set).
    #[serde(default)]
    pub default: Option<f64>,
    /// `one_hot`: the categories, in feature order.
    #[serde(default)]
    pub categories: Option<Vec<String>>,
    /// `one_hot`: whether unknown strings get a feature of their own.
    #[serde(default)]
    pub unknown_bucket: bool,
}

/// What a tree model output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// The objective's prediction: a probability, a regression value, or a class.
    Prediction,
    /// The raw margin: the sum of the trees before the objective's transform.
    Margin,
}

fn default_version() -> String {
    "1".to_owned()
}

impl ModelConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ModelConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("invalid {}: {e}", path.display()))
    }
}

impl TensorConfig {
    /// Checks the datatype and shape and returns the spec.
    pub fn to_spec(&self) -> Result<TensorSpec, String> {
        to_spec(&self.name, &self.datatype, &self.shape)
    }
}

impl OutputConfig {
    /// Checks the datatype and shape and returns the spec.
    pub fn to_spec(&self) -> Result<TensorSpec, String> {
        to_spec(&self.name, &self.datatype, &self.shape)
    }
}

fn to_spec(name: &str, datatype: &str, shape: &[i64]) -> Result<TensorSpec, String> {
    let datatype: DataType = datatype
        .parse()
        .map_err(|e| format!("tensor '{name}': {e}"))?;
    if let Some(bad) = shape.iter().find(|&&d| d < -1) {
        return Err(format!(
            "tensor '{name}' has dimension {bad}; use -1 for a variable dimension"
        ));
    }
    Ok(TensorSpec {
        name: name.to_owned(),
        datatype,
        shape: shape.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_titanic_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/titanic/config.toml");
        let config = ModelConfig::load(&path).unwrap();
        assert_eq!(config.backend, Backend::Xgboost);
        assert_eq!(config.inputs[0].to_spec().unwrap().shape, vec![-1, 12]);
        assert_eq!(config.outputs[1].kind, Some(OutputKind::Margin));
    }

    #[test]
    fn unknown_keys_and_bad_specs_are_refused() {
        let e = toml::from_str::<ModelConfig>(
            "backend='xgboost'\nmodel_file='m.json'\ninputs=[]\noutputs=[]\nbatch=3\n",
        );
        assert!(e.unwrap_err().to_string().contains("batch"));
        let t = TensorConfig {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![-2],
        };
        assert!(t.to_spec().unwrap_err().contains("-2"));
    }
}
