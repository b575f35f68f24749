//! The XGBoost and LightGBM backends: a [`TreeEnsemble`] behind the
//! [`Model`] trait, with the model's config checked against the ensemble at
//! load time.

use std::path::Path;

use wirespeed_core::{DataType, Error, Model, ModelMetadata, Tensor, TensorData, TensorSpec};
use wirespeed_trees::TreeEnsemble;

use crate::model_config::{Backend, ModelConfig, OutputKind};

/// A loaded tree ensemble served as a model.
pub struct TreeModel {
    metadata: ModelMetadata,
    ensemble: TreeEnsemble,
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
            _ => wirespeed_trees::load_xgboost_json(&path),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;

        let [input] = config.inputs.as_slice() else {
            return Err(format!(
                "a tree model takes exactly one input, the config declares {}",
                config.inputs.len()
            ));
        };
        let input = input.to_spec()?;
        let nf = ensemble.num_features() as i64;
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
                inputs: vec![input],
                outputs,
            },
            output_kinds,
            ensemble,
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
        let input = &inputs[0];
        let TensorData::Fp32(rows) = &input.data else {
            return Err(Error::internal(
                "tree model received a non-FP32 input after validation",
            ));
        };
        let n_rows = input.shape[0];
        let e = &self.ensemble;
        let kind = |index: usize| self.output_kinds[index];

        let mut margins = vec![0.0f32; n_rows * e.num_groups()];
        let predictions = if outputs.iter().any(|&i| kind(i) == OutputKind::Prediction) {
            let mut predictions = vec![0.0f32; n_rows * e.prediction_width()];
            e.predict_margins_and_predictions(rows, &mut margins, &mut predictions);
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
