//! The identity backend: output `i` is a copy of input `i`. Like Triton's
//! identity backend, it exists to test and measure everything around a
//! model (protocols, codecs, limits) with the model's cost taken out.

use wirespeed_core::{Error, Model, ModelMetadata, Tensor, TensorSpec};

use crate::model_config::ModelConfig;

/// A model whose outputs echo its inputs, pairwise in declaration order.
pub struct IdentityModel {
    metadata: ModelMetadata,
    delay: std::time::Duration,
}

impl IdentityModel {
    /// Checks that each declared output matches its input's datatype and shape.
    pub fn load(name: &str, config: &ModelConfig) -> Result<IdentityModel, String> {
        if config.inputs.is_empty() || config.inputs.len() != config.outputs.len() {
            return Err(format!(
                "an identity model needs one output per input; the config declares {} inputs and {} outputs",
                config.inputs.len(),
                config.outputs.len()
            ));
        }
        let inputs = config
            .inputs
            .iter()
            .map(|t| t.to_spec())
            .collect::<Result<Vec<TensorSpec>, _>>()?;
        let outputs = config
            .outputs
            .iter()
            .map(|t| t.to_spec())
            .collect::<Result<Vec<TensorSpec>, _>>()?;
        for (input, output) in inputs.iter().zip(&outputs) {
            if input.datatype != output.datatype || input.shape != output.shape {
                return Err(format!(
                    "output '{}' ({} {}) must have the datatype and shape of input '{}' ({} {})",
                    output.name,
                    output.datatype,
                    output.shape_display(),
                    input.name,
                    input.datatype,
                    input.shape_display()
                ));
            }
        }
        Ok(IdentityModel {
            metadata: ModelMetadata {
                name: name.to_owned(),
                versions: vec![config.version.clone()],
                platform: config.backend.platform().to_owned(),
                inputs,
                outputs,
            },
            delay: std::time::Duration::from_millis(config.delay_ms.unwrap_or(0)),
        })
    }
}

impl Model for IdentityModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn runs_inline(&self, elements: usize) -> bool {
        self.delay.is_zero() && elements < 16 * 1024
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        outputs
            .iter()
            .map(|&index| {
                let source = &self.metadata.inputs[index].name;
                let input = inputs.iter().find(|t| &t.name == source).ok_or_else(|| {
                    Error::internal(format!("identity model lost input '{source}'"))
                })?;
                Ok(Tensor {
                    name: self.metadata.outputs[index].name.clone(),
                    shape: input.shape.clone(),
                    data: input.data.clone(),
                })
            })
            .collect()
    }
}
