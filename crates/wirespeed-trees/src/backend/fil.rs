//! `backend = "fil"`: tree models as Triton's FIL backend serves them, on
//! wirespeed's tree runtime, so that a FIL model folder loads unchanged:
//!
//! ```text
//! models/fraud/config.pbtxt      backend: "fil", max_batch_size: 8192,
//!                                input__0 [32] FP32, output__0 [2] FP32,
//!                                parameters model_type, is_classifier, predict_proba, threshold
//! models/fraud/1/xgboost.json
//! ```
//!
//! FIL's parameters (Triton's strings), read from `[parameters]`:
//! `model_type` picks the file format and its default file name
//! (`xgboost`: XGBoost's legacy binary `xgboost.model`; `xgboost_json`:
//! `xgboost.json`; `xgboost_ubj`: `xgboost.ubj`; `lightgbm`: `model.txt`;
//! `model_file` overrides, as `default_model_filename` does);
//! `is_classifier` (or the older `output_class`) and `predict_proba` shape
//! `output__0` as FIL does:
//!
//! | model | `predict_proba` | `output__0` per row |
//! |---|---|---|
//! | regressor | | the prediction (the objective's transform of the margin) |
//! | binary classifier | false | 1 if the probability is above `threshold` (0.5), else 0 |
//! | multi-class classifier | false | the index of the most probable class (the first on a tie) |
//! | binary classifier | true | `[1 - p, p]` with `dims: [2]`, `p` with `dims: [1]` |
//! | multi-class classifier | true | the classes' probabilities (softmax) |
//!
//! FIL's tuning parameters (`layout`, `chunk_size`, `transfer_threshold`,
//! `cpu_nthread`, ...) are accepted and have nothing to tune here.
//! Treelite checkpoints and FIL's SHAP output (`treeshap_output`) are
//! refused by name.

use std::sync::Arc;

use crate::{Objective, TreeEnsemble};
use serde::Deserialize;
use wirespeed_core::{
    ClassScores, ClassificationHead, CpuPool, DataType, Error, Heads, Model, ModelMetadata, Tensor,
    TensorData, TensorSpec,
};

use wirespeed_backend::{Backend, ModelSource};

/// Batches of at least this many rows are predicted on all of the pool's
/// threads (as the tree backends do).
const PARALLEL_ROWS: usize = 4096;

/// FIL's parameters that tune its GPU or thread layout: nothing to tune
/// on wirespeed's runtime, so accepted and logged.
const TUNING: &[&str] = &[
    "layout",
    "chunk_size",
    "transfer_threshold",
    "cpu_nthread",
    "use_experimental_optimizations",
    "xgboost_allow_unknown_field",
    "algo",
    "threads_per_tree",
    "storage_type",
    "blocks_per_sm",
];

/// `backend = "fil"`.
pub struct Fil;

impl Backend for Fil {
    fn name(&self) -> &'static str {
        "fil"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        Ok(Arc::new(FilModel::load(source)?))
    }
}

/// The FIL backend's keys: Triton's `parameters` and the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilKeys {
    /// The model file, when not FIL's default for `model_type`.
    #[serde(default)]
    model_file: Option<String>,
    #[serde(default)]
    parameters: toml::Table,
}

/// What `output__0` holds per row.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Head {
    /// The objective's prediction, as is.
    Prediction,
    /// A binary classifier's decision: 1 above the threshold, else 0.
    Decision { threshold: f32 },
    /// A multi-class classifier's most probable class.
    Class,
    /// A binary classifier's probabilities: `[1 - p, p]`, or `p` alone.
    BinaryProbabilities { both: bool },
    /// A multi-class classifier's probabilities.
    Probabilities,
}

/// A tree ensemble answering as FIL does.
pub(crate) struct FilModel {
    metadata: ModelMetadata,
    ensemble: TreeEnsemble,
    head: Head,
    /// Values per row of `output__0`.
    width: usize,
    /// Whether `output__0` has a dimension per row (`[-1, width]`) or is
    /// one value per row (`[-1]`).
    rank2: bool,
    pool: CpuPool,
}

impl FilModel {
    fn load(source: &ModelSource<'_>) -> Result<FilModel, String> {
        let keys: FilKeys = source.keys()?;
        let params = Parameters(&keys.parameters);
        for key in keys.parameters.keys() {
            let known = [
                "model_type",
                "is_classifier",
                "output_class",
                "predict_proba",
                "threshold",
            ];
            if TUNING.contains(&key.as_str()) {
                tracing::info!(model = %source.name(), parameter = %key, "FIL's tuning parameter: accepted, nothing to tune here");
            } else if !known.contains(&key.as_str()) {
                tracing::warn!(model = %source.name(), parameter = %key, "not a parameter of FIL's; ignored, as FIL ignores it");
            }
        }
        let model_type = params
            .string("model_type")?
            .unwrap_or_else(|| "xgboost".to_owned());
        let (default_file, load): (&str, fn(&std::path::Path) -> _) = match model_type.as_str() {
            "xgboost" => ("xgboost.model", |p| crate::load_xgboost_legacy(p)),
            "xgboost_json" => ("xgboost.json", |p| crate::load_xgboost_json(p)),
            "xgboost_ubj" => ("xgboost.ubj", |p| crate::load_xgboost_ubjson(p)),
            "lightgbm" => ("model.txt", |p| crate::load_lightgbm(p)),
            "treelite_checkpoint" => {
                return Err(
                    "model_type 'treelite_checkpoint' is not read by wirespeed: save the \
                            model as XGBoost JSON or UBJSON, or LightGBM text, and set model_type \
                            to xgboost_json, xgboost_ubj or lightgbm"
                        .to_owned(),
                )
            }
            other => {
                return Err(format!(
                    "parameter model_type is '{other}'; FIL's are xgboost, xgboost_json, \
                     xgboost_ubj, lightgbm and treelite_checkpoint"
                ))
            }
        };
        let file = keys.model_file.as_deref().unwrap_or(default_file);
        let path = source.file("model_file", file)?;
        let ensemble =
            load(&path).map_err(|e| format!("{} ({model_type}): {e}", path.display()))?;

        let is_classifier = match (params.flag("is_classifier")?, params.flag("output_class")?) {
            (Some(c), _) => c,
            (None, Some(c)) => {
                tracing::warn!(model = %source.name(), "FIL's output_class is is_classifier since 25.09; read as it");
                c
            }
            (None, None) => {
                return Err(
                    "parameter is_classifier is required, as FIL requires it: \"true\" for a \
                            classifier, \"false\" for a regressor"
                        .to_owned(),
                )
            }
        };
        let predict_proba = params.flag("predict_proba")?.unwrap_or(false);
        let threshold = match params.string("threshold")? {
            None => 0.5,
            Some(t) => t
                .trim()
                .parse::<f32>()
                .map_err(|_| format!("parameter threshold is '{t}', not a number"))?,
        };
        let classes = ensemble.num_groups();
        let binary = classes == 1;
        if is_classifier
            && matches!(
                ensemble.objective(),
                Objective::LgbRegression | Objective::RegSquaredError
            )
        {
            return Err(format!(
                "is_classifier is true, but the model's objective is {}, a regression",
                ensemble.objective().name()
            ));
        }

        let config = source.config();
        let nf = ensemble.num_features() as i64;
        let [input] = config.inputs.as_slice() else {
            return Err(format!(
                "a FIL model takes one input, input__0; the config declares {}",
                config.inputs.len()
            ));
        };
        let input = input.to_spec()?;
        if input.name != "input__0" {
            return Err(format!(
                "FIL's input is named input__0; the config names it '{}'",
                input.name
            ));
        }
        if input.datatype != DataType::Fp32 || input.shape.len() != 2 || input.shape[1] != nf {
            return Err(format!(
                "input__0 must be TYPE_FP32 with dims [ {nf} ] for this model ({nf} features), \
                 the config says {} {}",
                input.datatype,
                input.shape_display()
            ));
        }
        let mut output = None;
        for o in &config.outputs {
            let spec = o.to_spec()?;
            match spec.name.as_str() {
                "output__0" => output = Some(spec),
                "treeshap_output" => {
                    return Err(
                        "output treeshap_output (FIL's SHAP values) is not computed by \
                                wirespeed; remove it from the config"
                            .to_owned(),
                    )
                }
                other => {
                    return Err(format!(
                        "FIL's output is named output__0; the config declares '{other}'"
                    ))
                }
            }
        }
        let output = output.ok_or("the config declares no output; FIL's is output__0")?;

        let declared = match output.shape.as_slice() {
            [_] => 1,
            [_, w] if *w > 0 => *w as usize,
            _ => 0,
        };
        let (head, allowed): (Head, Vec<usize>) = if !is_classifier {
            (Head::Prediction, vec![ensemble.prediction_width()])
        } else if !predict_proba {
            match binary {
                true => (Head::Decision { threshold }, vec![1]),
                false => (Head::Class, vec![1]),
            }
        } else if binary {
            (
                Head::BinaryProbabilities {
                    both: declared == 2,
                },
                vec![1, 2],
            )
        } else {
            (Head::Probabilities, vec![classes])
        };
        if output.datatype != DataType::Fp32 || !allowed.contains(&declared) {
            let dims = allowed
                .iter()
                .map(|w| format!("[ {w} ]"))
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(format!(
                "output__0 must be TYPE_FP32 with dims {dims} for this model ({}, {}{}), the \
                 config says {} {}",
                ensemble.objective().name(),
                if is_classifier {
                    "a classifier"
                } else {
                    "a regressor"
                },
                if predict_proba { ", predict_proba" } else { "" },
                output.datatype,
                output.shape_display()
            ));
        }
        tracing::info!(
            model = %source.name(),
            %model_type,
            objective = ensemble.objective().name(),
            trees = ensemble.num_trees(),
            ?head,
            "loaded FIL model"
        );
        Ok(FilModel {
            metadata: ModelMetadata {
                name: source.name().to_owned(),
                versions: vec![config.version.clone()],
                platform: "fil".to_owned(),
                inputs: vec![input],
                outputs: vec![TensorSpec {
                    shape: output.shape.clone(),
                    ..output.clone()
                }],
            },
            rank2: output.shape.len() == 2,
            width: declared,
            head,
            ensemble,
            pool: source.pool().clone(),
        })
    }
}

/// Triton's string parameters (TOML's booleans and numbers taken too).
struct Parameters<'a>(&'a toml::Table);

impl Parameters<'_> {
    fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.0.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) if other.is_bool() || other.is_integer() || other.is_float() => {
                Ok(Some(other.to_string()))
            }
            Some(other) => Err(format!(
                "parameter {key} is {other}; Triton's parameters are strings"
            )),
        }
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, String> {
        match self.string(key)? {
            None => Ok(None),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Some(true)),
                "false" | "0" => Ok(Some(false)),
                _ => Err(format!(
                    "parameter {key} is '{v}'; give \"true\" or \"false\""
                )),
            },
        }
    }
}

impl Model for FilModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn heads(&self) -> Heads {
        let classification = |scores| Some(ClassificationHead { output: 0, scores });
        match self.head {
            Head::Prediction => Heads {
                classification: None,
                regression: Some(0),
            },
            Head::Decision { .. } | Head::Class => Heads {
                classification: classification(ClassScores::Index),
                regression: None,
            },
            Head::BinaryProbabilities { both: false } => Heads {
                classification: classification(ClassScores::Positive),
                regression: Some(0),
            },
            Head::BinaryProbabilities { both: true } => Heads {
                classification: classification(ClassScores::Probabilities { classes: 2 }),
                regression: None,
            },
            Head::Probabilities => Heads {
                classification: classification(ClassScores::Probabilities {
                    classes: self.width,
                }),
                regression: None,
            },
        }
    }

    fn infer(&self, inputs: &[Tensor], _outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        let input = &inputs[0];
        let TensorData::Fp32(rows) = &input.data else {
            return Err(Error::internal(
                "FIL model received a non-FP32 input after validation",
            ));
        };
        let n = input.shape[0];
        let e = &self.ensemble;
        let groups = e.num_groups();
        let mut margins = vec![0.0f32; n * groups];
        let mut predictions = vec![0.0f32; n * e.prediction_width()];
        if n >= PARALLEL_ROWS {
            e.predict_parallel(rows, &mut margins, &mut predictions, &self.pool);
        } else {
            e.predict_margins_and_predictions(rows, &mut margins, &mut predictions);
        }
        let values = match self.head {
            Head::Prediction | Head::BinaryProbabilities { both: false } => predictions,
            Head::Decision { threshold } => predictions
                .iter()
                .map(|&p| if p > threshold { 1.0 } else { 0.0 })
                .collect(),
            Head::BinaryProbabilities { both: true } => {
                predictions.iter().flat_map(|&p| [1.0 - p, p]).collect()
            }
            // multi:softmax predicts the class itself; the others'
            // probabilities are argmaxed, the first maximum winning.
            Head::Class if e.objective() == Objective::MultiSoftmax => predictions,
            Head::Class => predictions
                .chunks_exact(groups)
                .map(|row| first_max(row) as f32)
                .collect(),
            // multi:softmax's probabilities are its margins' softmax.
            Head::Probabilities if e.objective() == Objective::MultiSoftmax => {
                let mut out = vec![0.0f32; n * groups];
                for (row, o) in margins
                    .chunks_exact(groups)
                    .zip(out.chunks_exact_mut(groups))
                {
                    Objective::MultiSoftprob.transform_row(row, o);
                }
                out
            }
            Head::Probabilities => predictions,
        };
        Ok(vec![Tensor {
            name: self.metadata.outputs[0].name.clone(),
            shape: if self.rank2 {
                vec![n, self.width]
            } else {
                vec![n]
            },
            data: TensorData::Fp32(values),
            parameters: Vec::new(),
        }])
    }
}

/// The index of the first maximum of `row`.
fn first_max(row: &[f32]) -> usize {
    let mut best = 0;
    for (k, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = k;
        }
    }
    best
}
