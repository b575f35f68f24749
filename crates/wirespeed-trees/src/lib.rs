//! The tree-ensemble runtime of wirespeed: XGBoost (JSON) and LightGBM
//! (text) models loaded and predicted in-process, in pure Rust, with no
//! libxgboost, no lib_lightgbm and no Python.
//!
//! Predictions reproduce XGBoost's own float arithmetic: splits compare
//! `f32` feature values with `x < threshold`, NaN is missing and follows
//! `default_left`, each row's margin starts at the objective's transform of
//! `base_score` and adds the trees in model order.
//!
//! ```
//! let model = r#"{"learner": {
//!     "learner_model_param": {"base_score": "5E-1", "num_class": "0", "num_feature": "1"},
//!     "objective": {"name": "binary:logistic"},
//!     "gradient_booster": {"name": "gbtree", "model": {"tree_info": [0], "trees": [{
//!         "left_children": [1, -1, -1], "right_children": [2, -1, -1],
//!         "split_indices": [0, 0, 0], "split_conditions": [0.5, -1.0, 1.0],
//!         "default_left": [1, 0, 0], "tree_param": {"num_nodes": "3"}}]}}}}"#;
//! let ensemble = wirespeed_trees::parse_xgboost_json(model.as_bytes()).unwrap();
//! let p = ensemble.predict(&[0.0, 1.0, f32::NAN]);
//! assert!(p[0] < 0.5 && p[1] > 0.5 && p[2] == p[0]);
//! ```

mod ensemble;
mod error;
mod lightgbm;
mod objective;
mod preprocess;
mod xgboost;

pub use ensemble::TreeEnsemble;
pub use error::LoadError;
pub use lightgbm::{load_lightgbm, parse_lightgbm};
pub use objective::Objective;
pub use preprocess::{Column, ColumnKind, Preprocessor, RawValue, Transform};
pub use xgboost::{load_xgboost_json, parse_xgboost_json};

/// Loads a model file of either format, told apart by its first bytes: a
/// JSON object is XGBoost's, a `tree` header is LightGBM's.
pub fn load(path: impl AsRef<std::path::Path>) -> Result<TreeEnsemble, LoadError> {
    let bytes = std::fs::read(path)?;
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    match bytes.get(start) {
        Some(b'{') => parse_xgboost_json(&bytes),
        _ if bytes[start..].starts_with(b"tree") => {
            let text = std::str::from_utf8(&bytes)
                .map_err(|e| LoadError::LightGbm(format!("not UTF-8 text: {e}")))?;
            parse_lightgbm(text)
        }
        _ => Err(LoadError::Unsupported(
            "not an XGBoost JSON model nor a LightGBM text model (UBJSON and binary formats are not read)"
                .to_owned(),
        )),
    }
}
