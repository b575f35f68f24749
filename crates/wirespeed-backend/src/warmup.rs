//! `[[warmup]]`, as written: Triton's `model_warmup` samples, which the
//! repository runs once a model is loaded and before it reports ready
//! (`wirespeed-models`' `warmup.rs` says how).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The most times one sample runs.
pub const MAX_COUNT: usize = 1000;

/// One warmup sample.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupConfig {
    /// Its name, for messages.
    pub name: String,
    /// Rows, for a model with Triton's batch dimension; 1 unless set.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// Times it runs; once unless set.
    #[serde(default)]
    pub count: Option<usize>,
    /// The inputs, by name.
    pub inputs: BTreeMap<String, WarmupInput>,
}

/// One input of a sample.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupInput {
    /// The datatype, as on the wire (`"FP32"`).
    pub datatype: String,
    /// Its dims (after the batch dimension, when there is one).
    pub dims: Vec<i64>,
    /// Zeros.
    #[serde(default)]
    pub zero_data: bool,
    /// Random values.
    #[serde(default)]
    pub random_data: bool,
    /// A file in the model's `warmup/` folder with the tensor's raw bytes.
    #[serde(default)]
    pub input_data_file: Option<String>,
}
