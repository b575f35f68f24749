//! Running a decoded request on a model, shared by every front end: check
//! the inputs against the model's metadata, resolve the requested outputs,
//! and compute on the async worker or the blocking pool by size.

use std::sync::Arc;

use wirespeed_core::{Error, Model, RequestedOutput, Tensor};

/// Requests with fewer input elements than this run on the async worker that
/// read them: a Titanic row takes well under a microsecond, far less than a
/// hop to another thread. Larger ones move to the blocking pool so one big
/// batch cannot stall other connections.
const INLINE_COMPUTE_ELEMENTS: usize = 16 * 1024;

/// Checks `inputs`, runs `model`, and returns the `requested` outputs (all
/// of them when none are named), in request order.
pub(crate) async fn run(
    model: &Arc<dyn Model>,
    inputs: Vec<Tensor>,
    requested: &[RequestedOutput],
) -> Result<Vec<Tensor>, Error> {
    let metadata = model.metadata();
    metadata.check_inputs(&inputs)?;
    let outputs = metadata.resolve_outputs(requested.iter().map(|o| o.name.as_str()))?;
    let elements: usize = inputs.iter().map(|t| t.data.len()).sum();
    if elements < INLINE_COMPUTE_ELEMENTS {
        return model.infer(&inputs, &outputs);
    }
    let model = Arc::clone(model);
    tokio::task::spawn_blocking(move || model.infer(&inputs, &outputs))
        .await
        .map_err(|e| Error::internal(format!("model task failed: {e}")))?
}
