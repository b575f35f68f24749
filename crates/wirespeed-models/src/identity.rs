//! The identity backend: output `i` is a copy of input `i`. Like Triton's
//! identity backend, it exists to test and measure everything around a
//! model (protocols, codecs, limits) with the model's cost taken out.
//!
//! Its keys of its own: `delay_ms` makes every inference wait that long
//! before it answers, as a model behind a network call or on a GPU would
//! (a cost per call, whatever its size), and `row_delay_us` adds that
//! many microseconds per row (dimension 0 of the first input), a cost that
//! grows with the batch. Either makes it run through the async entry
//! point, holding no thread while it waits. Tests and benchmarks use it to
//! see what the server does with a slow model (overload, callers that
//! leave, draining, batching).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::{Error, Execution, InferCall, InferFuture, Model, ModelMetadata, Tensor};

use wirespeed_backend::config::TensorConfig;
use wirespeed_backend::{Backend, ModelSource};

/// `backend = "identity"`.
pub(crate) struct Identity;

impl Backend for Identity {
    fn name(&self) -> &'static str {
        "identity"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        Ok(Arc::new(IdentityModel::load(source)?))
    }
}

/// The identity backend's own key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityKeys {
    /// Milliseconds each inference waits before answering.
    #[serde(default)]
    delay_ms: Option<u64>,
    /// Microseconds each row adds to an inference's wait.
    #[serde(default)]
    row_delay_us: Option<u64>,
}

/// A model whose outputs echo its inputs, pairwise in declaration order.
pub struct IdentityModel {
    metadata: ModelMetadata,
    delay: Duration,
    row_delay: Duration,
}

impl IdentityModel {
    /// Checks that each declared output matches its input's datatype and shape.
    fn load(source: &ModelSource<'_>) -> Result<IdentityModel, String> {
        let config = source.config();
        let keys: IdentityKeys = source.keys()?;
        if config.inputs.is_empty() || config.inputs.len() != config.outputs.len() {
            return Err(format!(
                "an identity model needs one output per input; the config declares {} inputs and {} outputs",
                config.inputs.len(),
                config.outputs.len()
            ));
        }
        let inputs = TensorConfig::specs(&config.inputs)?;
        let outputs = TensorConfig::specs(&config.outputs)?;
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
                name: source.name().to_owned(),
                versions: vec![config.version.clone()],
                platform: "identity".to_owned(),
                inputs,
                outputs,
            },
            delay: Duration::from_millis(keys.delay_ms.unwrap_or(0)),
            row_delay: Duration::from_micros(keys.row_delay_us.unwrap_or(0)),
        })
    }
}

impl Model for IdentityModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn execution(&self, elements: usize) -> Execution {
        if !self.delay.is_zero() || !self.row_delay.is_zero() {
            Execution::Async
        } else if elements < 16 * 1024 {
            Execution::Inline
        } else {
            Execution::Pool
        }
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        Box::pin(async move {
            let rows = call
                .inputs
                .first()
                .and_then(|t| t.shape.first())
                .copied()
                .unwrap_or(1);
            let rows = u32::try_from(rows).unwrap_or(u32::MAX);
            let wait = self
                .delay
                .saturating_add(self.row_delay.saturating_mul(rows));
            tokio::time::sleep(wait).await;
            self.infer(&call.inputs, &call.outputs)
        })
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
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
                    parameters: Vec::new(),
                })
            })
            .collect()
    }
}
