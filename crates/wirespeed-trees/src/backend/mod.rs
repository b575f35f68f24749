//! The XGBoost and LightGBM backends: a [`TreeEnsemble`] behind the
//! [`Model`] trait, with the model's config checked against the ensemble at
//! load time.
//!
//! Their own keys of `config.toml`: `model_file`, `preprocess` (raw columns
//! turned into features), each output's `kind`, and `binding`
//! (`"first_input"`: the request's one input is the model's whatever its
//! name, as MLServer's and KServe's runtimes take it). An input declared
//! `[-1, -1]` takes the model's feature count.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{Column, Objective, Preprocessor, RawValue, Transform, TreeEnsemble};
use serde::Deserialize;
use wirespeed_core::{
    Binding, ClassScores, ClassificationHead, CpuPool, DataType, Error, Heads, Model,
    ModelMetadata, Tensor, TensorData, TensorSpec,
};

use wirespeed_backend::{Backend, ModelSource};

mod fil;
pub use fil::Fil;

/// Batches of at least this many rows are predicted on all of the pool's
/// threads.
const PARALLEL_ROWS: usize = 4096;

/// `backend = "xgboost"`: an XGBoost model saved as JSON or UBJSON.
pub struct Xgboost;

/// `backend = "lightgbm"`: a LightGBM model saved as text (`save_model`).
pub struct Lightgbm;

impl Backend for Xgboost {
    fn name(&self) -> &'static str {
        "xgboost"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        Ok(Arc::new(TreeModel::load(source, "xgboost_json")?))
    }
}

impl Backend for Lightgbm {
    fn name(&self) -> &'static str {
        "lightgbm"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        Ok(Arc::new(TreeModel::load(source, "lightgbm_text")?))
    }
}

/// The tree backends' own top-level keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeKeys {
    /// The model file, relative to the model's folder.
    model_file: String,
    /// Raw named columns turned into the feature vector, in feature order.
    #[serde(default)]
    preprocess: Vec<PreprocessConfig>,
    /// How requests bind: by name (the default) or `"first_input"`.
    #[serde(default)]
    binding: Option<String>,
}

/// A tree model output's own key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputKeys {
    kind: Option<OutputKind>,
}

/// One raw input column of a tree model and its transform.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreprocessConfig {
    /// The column: also the name of its input tensor.
    column: String,
    /// `identity`, `min_max`, `standard`, `quantile` (numbers), `ordinal`,
    /// `one_hot` (strings).
    transform: String,
    /// The input's datatype for numbers: `FP32` (default), `FP64` or `INT64`.
    #[serde(default)]
    datatype: Option<String>,
    /// The number a missing value (NaN) is read as.
    #[serde(default)]
    fill: Option<f64>,
    /// `min_max`: the value that maps to 0.
    #[serde(default)]
    min: Option<f64>,
    /// `min_max`: the value that maps to 1.
    #[serde(default)]
    max: Option<f64>,
    /// `standard`: the mean subtracted.
    #[serde(default)]
    mean: Option<f64>,
    /// `standard`: the standard deviation divided by.
    #[serde(default)]
    std: Option<f64>,
    /// `quantile`: sorted cut points.
    #[serde(default)]
    quantiles: Option<Vec<f64>>,
    /// `ordinal`: string to code.
    #[serde(default)]
    mapping: Option<BTreeMap<String, f64>>,
    /// `ordinal`: the code of an unknown string (0 unless set).
    #[serde(default)]
    default: Option<f64>,
    /// `one_hot`: the categories, in feature order.
    #[serde(default)]
    categories: Option<Vec<String>>,
    /// `one_hot`: whether unknown strings get a feature of their own.
    #[serde(default)]
    unknown_bucket: bool,
}

/// What a tree model output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutputKind {
    /// The objective's prediction: a probability, a regression value, or a class.
    Prediction,
    /// The raw margin: the sum of the trees before the objective's transform.
    Margin,
    /// A classifier's class index, INT64, as scikit-learn's `predict` of
    /// XGBoost's classifier gives it: 1 when a binary probability is over
    /// 0.5, else the first most probable class.
    Label,
    /// A classifier's class probabilities, as scikit-learn's
    /// `predict_proba` gives them: `[1 - p, p]` for a binary model.
    Probabilities,
}

/// A loaded tree ensemble served as a model.
pub struct TreeModel {
    metadata: ModelMetadata,
    ensemble: TreeEnsemble,
    /// Raw columns into features, when the config declares `preprocess`.
    preprocessor: Option<Preprocessor>,
    /// What each output in `metadata.outputs` holds.
    output_kinds: Vec<OutputKind>,
    /// Where large batches are split over threads.
    pool: CpuPool,
    /// How requests bind to the declared input and outputs.
    binding: Binding,
}

impl TreeModel {
    /// Loads the config's `model_file` and checks that the config's inputs
    /// and outputs fit the ensemble.
    fn load(source: &ModelSource<'_>, platform: &str) -> Result<TreeModel, String> {
        let config = source.config();
        let keys: TreeKeys = source.keys()?;
        let binding = match keys.binding.as_deref() {
            None | Some("declared") => Binding::Declared,
            Some("first_input") => Binding::FirstInput,
            Some(other) => {
                return Err(format!(
                    "binding '{other}' is not one: give \"declared\" or \"first_input\""
                ))
            }
        };
        if keys.model_file.is_empty() {
            return Err("the config's model_file is empty".to_owned());
        }
        let path = source.file("model_file", &keys.model_file)?;
        let ensemble = match platform {
            "lightgbm_text" => crate::load_lightgbm(&path),
            // JSON or UBJSON, told apart by the file's first bytes.
            _ => crate::load(&path),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;

        let nf = ensemble.num_features() as i64;
        let (preprocessor, inputs) = if keys.preprocess.is_empty() {
            let [input] = config.inputs.as_slice() else {
                return Err(format!(
                    "a tree model takes exactly one input, the config declares {}",
                    config.inputs.len()
                ));
            };
            let mut spec = input.to_spec()?;
            // `[-1, -1]`: as many features as the model takes.
            if spec.shape == [-1, -1] {
                spec.shape[1] = nf;
            }
            (None, vec![spec])
        } else {
            if !config.inputs.is_empty() {
                return Err(
                    "a model with 'preprocess' takes one input per column; declare no [[inputs]]"
                        .to_owned(),
                );
            }
            let (pre, specs) = preprocessor(&keys.preprocess)?;
            if pre.width() as i64 != nf {
                return Err(format!(
                    "the preprocess columns make {} features, but the model takes {nf}",
                    pre.width()
                ));
            }
            (Some(pre), specs)
        };
        // The batch dimension of outputs: the features' first dimension.
        let input = match &preprocessor {
            Some(_) => TensorSpec {
                optional: false,
                name: String::new(),
                datatype: DataType::Fp32,
                shape: vec![-1, nf],
            },
            None => inputs[0].clone(),
        };
        if input.datatype != DataType::Fp32 || input.shape.len() != 2 || input.shape[1] != nf {
            return Err(format!(
                "input '{}' must be FP32 [-1, {nf}] for this model ({nf} features), the config says {} {}",
                input.name,
                input.datatype,
                input.shape_display()
            ));
        }
        if config.outputs.is_empty() {
            return Err("the config declares no outputs".to_owned());
        }
        let mut outputs = Vec::new();
        let mut output_kinds = Vec::new();
        for output in &config.outputs {
            let mut spec = output.to_spec()?;
            let keys: OutputKeys = source.tensor_keys(output)?;
            let kind = keys.kind.ok_or_else(|| {
                format!(
                    "output '{}' needs a kind: \"prediction\" or \"margin\"",
                    spec.name
                )
            })?;
            output_kinds.push(kind);
            let classifier =
                ensemble.objective().has_logistic_link() || ensemble.objective().is_multiclass();
            if matches!(kind, OutputKind::Label | OutputKind::Probabilities) && !classifier {
                return Err(format!(
                    "output '{}' is a classifier's {kind:?}, and this model ({}) is not a classifier",
                    spec.name,
                    ensemble.objective().name()
                ));
            }
            let width = kind.width(&ensemble);
            // `[-1, -1]`: a column per value, as many as the model makes.
            if spec.shape == [-1, -1] {
                spec.shape[1] = width as i64;
            }
            let expected: Vec<i64> = if width == 1 {
                vec![input.shape[0]]
            } else {
                vec![input.shape[0], width as i64]
            };
            // A width of one may be a column of its own, as MLServer's
            // numpy codec shapes `[n]` (`[n, 1]`).
            let column = width == 1 && spec.shape == [input.shape[0], 1];
            let datatype = kind.datatype();
            // FP64 too, as LightGBM's Python package answers (the tree
            // runtime's FP32, widened).
            let widened = datatype == DataType::Fp32 && spec.datatype == DataType::Fp64;
            if (spec.datatype != datatype && !widened) || (spec.shape != expected && !column) {
                return Err(format!(
                    "output '{}' ({:?}) must be {datatype} {} for this model ({}), the config says {} {}",
                    spec.name,
                    kind,
                    wirespeed_core::format_shape(&expected),
                    ensemble.objective().name(),
                    spec.datatype,
                    spec.shape_display()
                ));
            }
            if outputs.iter().any(|o: &TensorSpec| o.name == spec.name) {
                return Err(format!("output '{}' is declared twice", spec.name));
            }
            outputs.push(spec);
        }

        tracing::info!(
            model = %source.name(),
            objective = ensemble.objective().name(),
            trees = ensemble.num_trees(),
            features = ensemble.num_features(),
            "loaded tree ensemble"
        );
        Ok(TreeModel {
            metadata: ModelMetadata {
                name: source.name().to_owned(),
                versions: vec![config.version.clone()],
                platform: platform.to_owned(),
                inputs,
                outputs,
            },
            output_kinds,
            ensemble,
            preprocessor,
            pool: source.pool().clone(),
            binding,
        })
    }

    /// The ensemble.
    pub fn ensemble(&self) -> &TreeEnsemble {
        &self.ensemble
    }

    /// Loads the tree model of `folder` from its `config.toml` (backend
    /// `xgboost` or `lightgbm`), outside a server: what a library user
    /// calls to get the same model, preprocessing included.
    pub fn load_folder(folder: &std::path::Path, pool: &CpuPool) -> Result<TreeModel, String> {
        let config = wirespeed_backend::ModelConfig::load(&folder.join("config.toml"))?;
        let name = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let source = ModelSource::new(&name, folder, &config, pool);
        let platform = match config.backend.as_str() {
            "xgboost" => "xgboost_json",
            "lightgbm" => "lightgbm_text",
            other => {
                return Err(format!(
                    "backend '{other}' is not a tree ensemble (xgboost or lightgbm)"
                ))
            }
        };
        TreeModel::load(&source, platform)
    }

    /// The raw columns a model with `preprocess` takes, in order, or none.
    pub fn columns(&self) -> &[Column] {
        self.preprocessor.as_ref().map_or(&[], |p| p.columns())
    }

    /// The feature rows of a batch of raw columns (one tensor per column,
    /// by name, each one element per row): `(rows, features)`. An error
    /// when the model has no `preprocess`.
    pub fn features(&self, columns: &[Tensor]) -> Result<(usize, Vec<f32>), Error> {
        let pre = self.preprocessor.as_ref().ok_or_else(|| {
            Error::invalid_input("the model has no 'preprocess' columns; give it feature rows")
        })?;
        for c in pre.columns() {
            if !columns.iter().any(|t| t.name == c.name) {
                return Err(Error::invalid_input(format!(
                    "column '{}' is missing; the model takes {}",
                    c.name,
                    pre.columns()
                        .iter()
                        .map(|c| format!("'{}'", c.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        features(pre, columns)
    }
}

impl Model for TreeModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// From the objective, through the first output declared as the
    /// prediction: class probabilities classify (and a binary one
    /// regresses too, as TF's binary heads do); a regression value or a
    /// raw margin regresses.
    fn heads(&self) -> Heads {
        let Some(output) = self
            .output_kinds
            .iter()
            .position(|&k| k == OutputKind::Prediction)
        else {
            return Heads::default();
        };
        let classification = |scores| ClassificationHead { output, scores };
        match self.ensemble.objective() {
            Objective::BinaryLogistic | Objective::LgbBinary => Heads {
                classification: Some(classification(ClassScores::Positive)),
                regression: Some(output),
            },
            Objective::MultiSoftprob | Objective::LgbMulticlass => Heads {
                classification: Some(classification(ClassScores::Probabilities {
                    classes: self.ensemble.num_groups(),
                })),
                regression: None,
            },
            Objective::MultiSoftmax => Heads {
                classification: Some(classification(ClassScores::Index)),
                regression: None,
            },
            Objective::RegSquaredError
            | Objective::RegLogistic
            | Objective::LgbRegression
            | Objective::BinaryLogitRaw => Heads {
                classification: None,
                regression: Some(output),
            },
        }
    }

    fn binding(&self) -> Binding {
        self.binding
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        let computed;
        let (n_rows, rows) = match &self.preprocessor {
            Some(pre) => {
                computed = features(pre, inputs)?;
                (computed.0, computed.1.as_slice())
            }
            None => {
                let input = &inputs[0];
                let TensorData::Fp32(rows) = &input.data else {
                    return Err(Error::internal(
                        "tree model received a non-FP32 input after validation",
                    ));
                };
                (input.shape[0], rows.as_slice())
            }
        };
        let e = &self.ensemble;
        let kind = |index: usize| self.output_kinds[index];

        let mut margins = vec![0.0f32; n_rows * e.num_groups()];
        let predictions = if outputs.iter().any(|&i| kind(i) != OutputKind::Margin) {
            let mut predictions = vec![0.0f32; n_rows * e.prediction_width()];
            // A large batch is split over the pool's threads by rows
            // (bit-identical to one thread); it already runs on the pool.
            if n_rows >= PARALLEL_ROWS {
                e.predict_parallel(rows, &mut margins, &mut predictions, &self.pool);
            } else {
                e.predict_margins_and_predictions(rows, &mut margins, &mut predictions);
            }
            Some(predictions)
        } else {
            e.predict_margins(rows, &mut margins);
            None
        };

        // A classifier's labels and probabilities, from the predictions
        // (and multi:softmax's margins), before those move out.
        let mut derived: Vec<Option<TensorData>> = outputs
            .iter()
            .map(|&index| match (kind(index), &predictions) {
                (OutputKind::Label, Some(p)) => Some(TensorData::Int64(labels(e, p))),
                (OutputKind::Probabilities, Some(p)) => {
                    Some(TensorData::Fp32(probabilities(e, p, &margins)))
                }
                _ => None,
            })
            .collect();
        // Each buffer moves into the last output that uses it; only a kind
        // declared under two names is copied.
        let mut buffers = [
            (OutputKind::Margin, Some(margins)),
            (OutputKind::Prediction, predictions),
        ];
        let mut result = Vec::with_capacity(outputs.len());
        for (n, &index) in outputs.iter().enumerate() {
            let data = match derived[n].take() {
                Some(data) => data,
                None => {
                    let (_, slot) = buffers
                        .iter_mut()
                        .find(|(k, _)| *k == kind(index))
                        .ok_or_else(|| Error::internal("tree model output of no kind"))?;
                    let used_later = outputs[n + 1..]
                        .iter()
                        .any(|&later| kind(later) == kind(index));
                    let data = if used_later {
                        slot.clone()
                    } else {
                        slot.take()
                    };
                    TensorData::Fp32(
                        data.ok_or_else(|| Error::internal("tree model output computed twice"))?,
                    )
                }
            };
            let spec = &self.metadata.outputs[index];
            let data = match data {
                TensorData::Fp32(v) if spec.datatype == DataType::Fp64 => {
                    TensorData::Fp64(v.into_iter().map(f64::from).collect())
                }
                data => data,
            };
            let width = kind(index).width(e);
            result.push(Tensor {
                name: spec.name.clone(),
                shape: if width == 1 && spec.shape.len() == 1 {
                    vec![n_rows]
                } else {
                    vec![n_rows, width]
                },
                data,
                parameters: Vec::new(),
            });
        }
        Ok(result)
    }
}

impl OutputKind {
    /// The values per row.
    fn width(self, e: &TreeEnsemble) -> usize {
        match self {
            OutputKind::Prediction => e.prediction_width(),
            OutputKind::Margin => e.num_groups(),
            OutputKind::Label => 1,
            OutputKind::Probabilities => e.num_groups().max(2),
        }
    }

    fn datatype(self) -> DataType {
        match self {
            OutputKind::Label => DataType::Int64,
            _ => DataType::Fp32,
        }
    }
}

/// Each row's class, as XGBoost's scikit-learn classifier predicts it: a
/// binary probability over 0.5 is class 1; of several classes, the first
/// most probable (multi:softmax predicts the class itself).
fn labels(e: &TreeEnsemble, predictions: &[f32]) -> Vec<i64> {
    let groups = e.num_groups();
    if groups == 1 || e.objective() == Objective::MultiSoftmax {
        if e.objective() == Objective::MultiSoftmax {
            return predictions.iter().map(|&p| p as i64).collect();
        }
        return predictions.iter().map(|&p| i64::from(p > 0.5)).collect();
    }
    predictions
        .chunks_exact(groups)
        .map(|row| {
            let mut best = 0;
            for (k, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = k;
                }
            }
            best as i64
        })
        .collect()
}

/// Each row's class probabilities: `[1 - p, p]` for a binary model, the
/// softmax of the margins for multi:softmax, else the predictions.
fn probabilities(e: &TreeEnsemble, predictions: &[f32], margins: &[f32]) -> Vec<f32> {
    let groups = e.num_groups();
    if groups == 1 {
        return predictions.iter().flat_map(|&p| [1.0 - p, p]).collect();
    }
    if e.objective() == Objective::MultiSoftmax {
        let mut out = vec![0.0f32; margins.len()];
        for (row, o) in margins
            .chunks_exact(groups)
            .zip(out.chunks_exact_mut(groups))
        {
            Objective::MultiSoftprob.transform_row(row, o);
        }
        return out;
    }
    predictions.to_vec()
}

/// The feature pipeline a config declares, with each column's input spec.
fn preprocessor(
    preprocess: &[PreprocessConfig],
) -> Result<(Preprocessor, Vec<TensorSpec>), String> {
    let mut columns = Vec::new();
    let mut specs = Vec::new();
    for p in preprocess {
        let need = |value: Option<f64>, key: &str| {
            value.ok_or_else(|| format!("column '{}': {} needs '{key}'", p.column, p.transform))
        };
        let transform = match p.transform.as_str() {
            "identity" => Transform::Identity,
            "min_max" => Transform::MinMax {
                min: need(p.min, "min")?,
                max: need(p.max, "max")?,
            },
            "standard" => Transform::Standard {
                mean: need(p.mean, "mean")?,
                std: need(p.std, "std")?,
            },
            "quantile" => Transform::Quantile {
                quantiles: p.quantiles.clone().ok_or_else(|| {
                    format!("column '{}': quantile needs 'quantiles'", p.column)
                })?,
            },
            "ordinal" => Transform::Ordinal {
                mapping: p
                    .mapping
                    .clone()
                    .ok_or_else(|| format!("column '{}': ordinal needs 'mapping'", p.column))?
                    .into_iter()
                    .collect(),
                default: p.default.unwrap_or(0.0),
            },
            "one_hot" => Transform::OneHot {
                categories: p.categories.clone().ok_or_else(|| {
                    format!("column '{}': one_hot needs 'categories'", p.column)
                })?,
                unknown_bucket: p.unknown_bucket,
            },
            other => {
                return Err(format!(
                    "column '{}': unknown transform '{other}'; use identity, min_max, standard, quantile, ordinal or one_hot",
                    p.column
                ))
            }
        };
        let text = matches!(
            transform,
            Transform::Ordinal { .. } | Transform::OneHot { .. }
        );
        let datatype = match (&p.datatype, text) {
            (None, true) => DataType::Bytes,
            (None, false) => DataType::Fp32,
            (Some(d), _) => d
                .parse()
                .map_err(|e| format!("column '{}': {e}", p.column))?,
        };
        let fits = if text {
            datatype == DataType::Bytes
        } else {
            matches!(datatype, DataType::Fp32 | DataType::Fp64 | DataType::Int64)
        };
        if !fits {
            return Err(format!(
                "column '{}': a {} column cannot be {datatype}",
                p.column, p.transform
            ));
        }
        let column = if text {
            Column::text(&p.column, transform)
        } else {
            let c = Column::number(&p.column, transform);
            match p.fill {
                Some(v) => c.fill(v),
                None => c,
            }
        };
        columns.push(column);
        specs.push(TensorSpec {
            optional: false,
            name: p.column.clone(),
            datatype,
            shape: vec![-1],
        });
    }
    let pre = Preprocessor::new(columns)?;
    Ok((pre, specs))
}

/// The feature rows of a batch of raw columns.
fn features(pre: &Preprocessor, inputs: &[Tensor]) -> Result<(usize, Vec<f32>), Error> {
    let columns = pre.columns();
    let by_column: Vec<&Tensor> = columns
        .iter()
        .map(|c| {
            inputs
                .iter()
                .find(|t| t.name == c.name)
                .ok_or_else(|| Error::internal(format!("column '{}' went missing", c.name)))
        })
        .collect::<Result<_, _>>()?;
    let rows = by_column.first().map_or(0, |t| t.data.len());
    if let Some(t) = by_column.iter().find(|t| t.data.len() != rows) {
        return Err(Error::invalid_input(format!(
            "every column needs the same number of rows: '{}' has {}, '{}' has {rows}",
            t.name,
            t.data.len(),
            by_column[0].name
        )));
    }
    let width = pre.width();
    let mut out = vec![0f32; rows * width];
    let mut record = Vec::with_capacity(columns.len());
    for (r, row) in out.chunks_exact_mut(width).enumerate() {
        record.clear();
        for t in &by_column {
            record.push(match &t.data {
                TensorData::Fp32(v) => RawValue::Number(f64::from(v[r])),
                TensorData::Fp64(v) => RawValue::Number(v[r]),
                TensorData::Int64(v) => RawValue::Number(v[r] as f64),
                TensorData::Bytes(v) => match std::str::from_utf8(&v[r]) {
                    Ok(text) => RawValue::Text(text),
                    Err(_) => RawValue::Missing,
                },
                _ => RawValue::Missing,
            });
        }
        pre.transform_row(&record, row);
    }
    Ok((rows, out))
}
