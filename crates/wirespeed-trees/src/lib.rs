//! The tree-ensemble runtime of wirespeed: XGBoost (JSON and UBJSON) and
//! LightGBM (text) models loaded and predicted in-process, in pure Rust, with no
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
//!
//! The embedded path: load a model file (any supported format), then
//! predict one row without allocating, or a batch.
//!
//! ```
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/titanic/model.json");
//! let model = wirespeed_trees::load(path).unwrap();
//! // Passenger 904 of the Titanic test set, as 12 features.
//! let row = [1.0, 0.0, 1.0, 0.2875, 0.33333334, 0.0, 0.322667, 0.0, 1.0, 0.0, 0.0, 0.0];
//! let mut probability = [0.0f32];
//! model.predict_row(&row, &mut probability);
//! assert!((probability[0] - 0.4540421).abs() < 1e-6);
//! let batch = model.predict_batch(&[row, row].concat());
//! assert_eq!(batch, [probability[0], probability[0]]);
//! ```
//!
//! The same ensembles as wirespeed's tree backends (`backend/`):
//! [`TreeModel`] behind the `Model` trait with a model folder's config
//! checked against it, and the [`Xgboost`], [`Lightgbm`] and [`Fil`]
//! (Triton's FIL backend) backends the repository registers. This crate
//! is all the Python wheel and `wirespeed bench` link of the backends.

mod backend;
mod error;
mod forest;
mod legacy;
mod lightgbm;
mod objective;
pub mod onnx;
mod preprocess;
mod ubjson;
mod xgboost;

pub use backend::{Fil, Lightgbm, TreeModel, Xgboost};
pub use error::LoadError;
pub use forest::TreeEnsemble;
pub use legacy::{load_xgboost_legacy, parse_xgboost_legacy};
pub use lightgbm::{load_lightgbm, parse_lightgbm};
pub use objective::Objective;
pub use preprocess::{Column, ColumnKind, Preprocessor, RawValue, Transform};
pub use xgboost::{
    load_xgboost_json, load_xgboost_ubjson, parse_xgboost_json, parse_xgboost_ubjson,
    xgboost_estimator_type,
};

/// Loads a model file of any supported format, told apart by its first
/// bytes: XGBoost's UBJSON (`{` and a length marker), XGBoost's JSON (`{`),
/// XGBoost's legacy binary (`binf`), LightGBM's text (a `tree` header).
pub fn load(path: impl AsRef<std::path::Path>) -> Result<TreeEnsemble, LoadError> {
    let bytes = std::fs::read(path)?;
    if legacy::looks_like(&bytes) {
        return parse_xgboost_legacy(&bytes);
    }
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    match bytes.get(start) {
        Some(b'{') if ubjson::looks_like(&bytes[start..]) => parse_xgboost_ubjson(&bytes),
        Some(b'{') => parse_xgboost_json(&bytes),
        _ if bytes[start..].starts_with(b"tree") => {
            let text = std::str::from_utf8(&bytes)
                .map_err(|e| LoadError::LightGbm(format!("not UTF-8 text: {e}")))?;
            parse_lightgbm(text)
        }
        _ => Err(LoadError::Unsupported(
            "not an XGBoost JSON, UBJSON or binary model nor a LightGBM text model".to_owned(),
        )),
    }
}
