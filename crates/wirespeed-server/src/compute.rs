//! Running a decoded request on a model, shared by every front end: check
//! the inputs against the model's metadata, resolve the requested outputs,
//! wait for a turn at the model's [`Gate`], and compute on the async worker
//! or the blocking pool by size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};
use wirespeed_core::{Error, ErrorKind, Model, RequestedOutput, Tensor};

use crate::timing::{timed, Stages};
use crate::AppState;

/// The admission queue in front of one model: at most `concurrency`
/// requests compute at once and at most `max_queue` wait; the next one is
/// refused at once (503 with `Retry-After` on REST, RESOURCE_EXHAUSTED on
/// gRPC), so under overload the accepted requests keep a bounded latency
/// and memory stays bounded, instead of a queue growing without end.
pub(crate) struct Gate {
    model: String,
    permits: Semaphore,
    concurrency: usize,
    waiting: AtomicUsize,
    max_queue: usize,
}

/// Counts a waiting request until it gets its turn or gives up.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    pub(crate) fn new(model: &str, concurrency: usize, max_queue: usize) -> Gate {
        Gate {
            model: model.to_owned(),
            permits: Semaphore::new(concurrency),
            concurrency,
            waiting: AtomicUsize::new(0),
            max_queue,
        }
    }

    /// A turn to compute, now, after waiting in the queue, or refused.
    pub(crate) async fn admit(&self) -> Result<SemaphorePermit<'_>, Error> {
        if let Ok(permit) = self.permits.try_acquire() {
            return Ok(permit);
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let waiting = Waiting(&self.waiting);
        if queued >= self.max_queue {
            return Err(Error::new(
                ErrorKind::Overloaded,
                format!(
                    "model '{}' is busy: {} requests computing and {} waiting, its limits; retry shortly",
                    self.model, self.concurrency, self.max_queue
                ),
            ));
        }
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::internal("the model's gate closed"))?;
        drop(waiting);
        Ok(permit)
    }
}

/// Checks `inputs`, runs `model`, and returns the `requested` outputs (all
/// of them when none are named), in request order. The wait for a turn and
/// the model's time go into `stages`.
pub(crate) async fn run(
    state: &AppState,
    model: &Arc<dyn Model>,
    inputs: Vec<Tensor>,
    requested: &[RequestedOutput],
    stages: &mut Stages,
) -> Result<Vec<Tensor>, Error> {
    let metadata = model.metadata();
    metadata.check_inputs(&inputs)?;
    let outputs = metadata.resolve_outputs(requested.iter().map(|o| o.name.as_str()))?;
    let gate = state
        .repository
        .gate(&metadata.name)
        .ok_or_else(|| Error::internal(format!("model '{}' has no gate", metadata.name)))?;
    let waited = Instant::now();
    let _turn = gate.admit().await?;
    stages.queue = waited.elapsed();
    let elements: usize = inputs.iter().map(|t| t.data.len()).sum();
    // A Titanic row takes well under a microsecond, far less than a hop to
    // another thread; a big batch or a slow model moves to the blocking pool
    // so it cannot stall other connections.
    if model.runs_inline(elements) {
        return timed(&mut stages.compute, || model.infer(&inputs, &outputs));
    }
    let model = Arc::clone(model);
    let (result, spent) = tokio::task::spawn_blocking(move || {
        let mut spent = Duration::ZERO;
        let result = timed(&mut spent, || model.infer(&inputs, &outputs));
        (result, spent)
    })
    .await
    .map_err(|e| Error::internal(format!("model task failed: {e}")))?;
    stages.compute = spent;
    result
}
