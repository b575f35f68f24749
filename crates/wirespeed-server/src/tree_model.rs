//! The XGBoost and LightGBM backends: a [`TreeEnsemble`] behind the
//! [`Model`] trait, with the model's config checked against the ensemble at
//! load time.

use std::path::Path;

use wirespeed_core::{DataType, Error, Model, ModelMetadata, Tensor, TensorData, TensorSpec};
use wirespeed_trees::{Column, Preprocessor, RawValue, Transform, TreeEnsemble};

use crate::model_config::{Backend, ModelConfig, OutputKind};

/// Batches of at least this many rows are predicted on all cores.
const PARALLEL_ROWS: usize = 4096;

/// A loaded tree ensemble served as a model.
pub struct TreeModel {
    metadata: ModelMetadata,
    ensemble: TreeEnsemble,
    /// Raw columns into features, when the config declares `preprocess`.
    preprocessor: Option<Preprocessor>,
    /// What each output in `metadata.outputs` holds.
    output_kinds: Vec<OutputKind>,
}

impl TreeModel {
    /// Loads `config.model_file` from `dir` and checks that the config's
    /// input and outputs fit the ensemble.
    pub fn load(name: &str, dir: &Path, config: &ModelConfig) -> Result<TreeModel, String> {
        let path = dir.join(&config.model_file);
        let ensemble = match config.backend {
            Backend::Lightgbm => wirespeed_trees::load_lightgbm(&path),
            // JSON or UBJSON, told apart by the file's first bytes.
            _ => wirespeed_trees::load(&path),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;

        let nf = ensemble.num_features() as i64;
        let (preprocessor, inputs) = if config.preprocess.is_empty() {
            let [input] = config.inputs.as_slice() else {
                return Err(format!(
                    "a tree model takes exactly one input, the config declares {}",
                    config.inputs.len()
                ));
            };
            (None, vec![input.to_spec()?])
        } else {
            if !config.inputs.is_empty() {
                return Err(
                    "a model with 'preprocess' takes one input per column; declare no [[inputs]]"
                        .to_owned(),
                );
            }
            let (pre, specs) = preprocessor(config)?;
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

        if config.model_file.is_empty() {
            return Err("the config has no model_file".to_owned());
        }
        let mut outputs = Vec::new();
        let mut output_kinds = Vec::new();
        for output in &config.outputs {
            let spec = output.to_spec()?;
            let kind = output.kind.ok_or_else(|| {
                format!(
                    "output '{}' needs a kind: \"prediction\" or \"margin\"",
                    spec.name
                )
            })?;
            output_kinds.push(kind);
            let width = match kind {
                OutputKind::Prediction => ensemble.prediction_width(),
                OutputKind::Margin => ensemble.num_groups(),
            };
            let expected: Vec<i64> = if width == 1 {
                vec![input.shape[0]]
            } else {
                vec![input.shape[0], width as i64]
            };
            if spec.datatype != DataType::Fp32 || spec.shape != expected {
                return Err(format!(
                    "output '{}' ({:?}) must be FP32 {} for this model ({}), the config says {} {}",
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

        Ok(TreeModel {
            metadata: ModelMetadata {
                name: name.to_owned(),
                versions: vec![config.version.clone()],
                platform: config.backend.platform().to_owned(),
                inputs,
                outputs,
            },
            output_kinds,
            ensemble,
            preprocessor,
        })
    }

    /// The ensemble.
    pub fn ensemble(&self) -> &TreeEnsemble {
        &self.ensemble
    }
}

impl Model for TreeModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
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
        let predictions = if outputs.iter().any(|&i| kind(i) == OutputKind::Prediction) {
            let mut predictions = vec![0.0f32; n_rows * e.prediction_width()];
            // A large batch is split over the cores by rows (bit-identical
            // to one thread); it already runs on the blocking pool.
            let threads = if n_rows >= PARALLEL_ROWS {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            } else {
                1
            };
            e.predict_parallel(rows, &mut margins, &mut predictions, threads);
            Some(predictions)
        } else {
            e.predict_margins(rows, &mut margins);
            None
        };

        // Each buffer moves into the last output that uses it; only a kind
        // declared under two names is copied.
        let mut buffers = [
            (OutputKind::Margin, e.num_groups(), Some(margins)),
            (OutputKind::Prediction, e.prediction_width(), predictions),
        ];
        let mut result = Vec::with_capacity(outputs.len());
        for (n, &index) in outputs.iter().enumerate() {
            let (_, width, slot) = buffers
                .iter_mut()
                .find(|(k, _, _)| *k == kind(index))
                .expect("both kinds have a slot");
            let used_later = outputs[n + 1..]
                .iter()
                .any(|&later| kind(later) == kind(index));
            let data = if used_later {
                slot.clone()
            } else {
                slot.take()
            };
            result.push(Tensor {
                name: self.metadata.outputs[index].name.clone(),
                shape: if *width == 1 {
                    vec![n_rows]
                } else {
                    vec![n_rows, *width]
                },
                data: TensorData::Fp32(
                    data.ok_or_else(|| Error::internal("tree model output computed twice"))?,
                ),
            });
        }
        Ok(result)
    }
}

/// The feature pipeline a config declares, with each column's input spec.
fn preprocessor(config: &ModelConfig) -> Result<(Preprocessor, Vec<TensorSpec>), String> {
    let mut columns = Vec::new();
    let mut specs = Vec::new();
    for p in &config.preprocess {
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
