//! One scheduler per model: who computes now, who waits, who is refused.
//!
//! At most `max_concurrency` requests compute at once, each holding a
//! *slot*. A request that finds a slot free and nobody waiting computes at
//! once, without a hop: the common, unloaded case costs two atomic
//! operations. Otherwise it joins the model's queue, an actor (one task
//! that alone owns the queue: requests come in on an `mpsc` channel, each
//! with a `oneshot` for its turn and its tracing span), which hands each
//! slot that frees up to the longest-waiting request whose caller is still
//! there. A request whose caller has gone (a client that disconnected, a
//! gRPC deadline) is dropped from the queue without computing. When
//! `max_queue` requests already wait, the next is refused at once (503
//! with `Retry-After`, RESOURCE_EXHAUSTED), so under overload the accepted
//! requests keep a bounded latency and memory stays bounded.
//!
//! A slot is held until the model's compute really ends. Compute that runs
//! on the CPU pool owns its slot, so a caller that leaves mid-compute frees
//! nothing: `max_concurrency` holds exactly when the server is overloaded
//! and callers give up. A model that awaits (`Execution::Async`: a call to
//! another server) runs as a task of its own, which is aborted when its
//! caller leaves: what it awaits is cancelled (the upstream sees the call
//! reset), and its slot comes back then.
//!
//! The batching issue teaches the actor to take several waiting requests at
//! once; the queue is already where they meet.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::{Instrument, Span};
use wirespeed_core::{
    CpuPool, Error, ErrorKind, Execution, InferCall, Model, Parameters, RequestedOutput, Tensor,
};

use crate::timing::{timed, Stages};

/// The inputs to compute, the outputs to produce, and what a model that
/// awaits also gets.
struct Job {
    inputs: Vec<Tensor>,
    outputs: Vec<usize>,
    parameters: Parameters,
    deadline: Option<Instant>,
}

/// What a request brings to its model besides inputs and outputs.
pub(crate) struct CallContext {
    /// The request's parameters the server does not act on itself.
    pub(crate) parameters: Parameters,
    /// When the client stops waiting.
    pub(crate) deadline: Option<Instant>,
}

/// A request in the queue.
struct Waiting {
    job: Job,
    turn: oneshot::Sender<Turn>,
    /// The request's span, so the actor's log lines about it carry its id.
    span: Span,
}

/// A request's turn to compute: its slot, and its job back.
struct Turn {
    slot: OwnedSemaphorePermit,
    job: Job,
}

/// The admission, queue and compute of one model.
pub(crate) struct Scheduler {
    model: Arc<dyn Model>,
    pool: CpuPool,
    slots: Arc<Semaphore>,
    concurrency: usize,
    /// Requests waiting whose callers are still there.
    waiting: Arc<AtomicUsize>,
    max_queue: usize,
    arrivals: mpsc::UnboundedSender<Waiting>,
}

/// Counts a request as waiting until it gets its turn or its caller goes.
struct Seat<'a> {
    scheduler: &'a Scheduler,
    turned: bool,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        self.scheduler.waiting.fetch_sub(1, Ordering::AcqRel);
        if !self.turned {
            let model = &self.scheduler.model.metadata().name;
            tracing::debug!(%model, "the caller left while queued");
        }
    }
}

impl Scheduler {
    /// Starts the scheduler of `model`, and its queue's actor (so this must
    /// run inside the server's runtime).
    pub(crate) fn start(
        model: Arc<dyn Model>,
        concurrency: usize,
        max_queue: usize,
        pool: CpuPool,
    ) -> Scheduler {
        let slots = Arc::new(Semaphore::new(concurrency));
        let (arrivals, queue) = mpsc::unbounded_channel();
        let name = model.metadata().name.clone();
        tokio::spawn(actor(name, queue, Arc::clone(&slots), max_queue));
        Scheduler {
            model,
            pool,
            slots,
            concurrency,
            waiting: Arc::new(AtomicUsize::new(0)),
            max_queue,
            arrivals,
        }
    }

    /// Checks `inputs` against the model, waits for a turn, runs the model
    /// and returns the `requested` outputs (all of them when none are
    /// named), in request order. The wait and the compute go into `stages`.
    pub(crate) async fn run(
        &self,
        inputs: Vec<Tensor>,
        requested: &[RequestedOutput],
        context: CallContext,
        stages: &mut Stages,
    ) -> Result<Vec<Tensor>, Error> {
        let metadata = self.model.metadata();
        metadata.check_inputs(&inputs)?;
        let outputs = metadata.resolve_outputs(requested.iter().map(|o| o.name.as_str()))?;
        let job = Job {
            inputs,
            outputs,
            parameters: context.parameters,
            deadline: context.deadline,
        };
        let turn = match self.free_slot() {
            Some(slot) => Turn { slot, job },
            None => {
                let since = Instant::now();
                let turn = self
                    .wait(job)
                    .instrument(tracing::debug_span!("queue"))
                    .await?;
                stages.queue = since.elapsed();
                turn
            }
        };
        self.compute(turn, stages).await
    }

    /// A slot, if one is free and nobody is waiting for it.
    fn free_slot(&self) -> Option<OwnedSemaphorePermit> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Queues `job` and waits for its turn, or refuses it when the queue is
    /// full.
    async fn wait(&self, job: Job) -> Result<Turn, Error> {
        let ahead = self.waiting.fetch_add(1, Ordering::AcqRel);
        let mut seat = Seat {
            scheduler: self,
            // Refused is not left.
            turned: ahead >= self.max_queue,
        };
        if ahead >= self.max_queue {
            return Err(Error::new(
                ErrorKind::Overloaded,
                format!(
                    "model '{}' is busy: {} requests computing and {} waiting, its limits; retry shortly",
                    self.model.metadata().name,
                    self.concurrency,
                    self.max_queue
                ),
            ));
        }
        let (turn, given) = oneshot::channel();
        let stopped = || Error::internal("the model's scheduler has stopped");
        self.arrivals
            .send(Waiting {
                job,
                turn,
                span: Span::current(),
            })
            .map_err(|_| stopped())?;
        tracing::debug!(model = %self.model.metadata().name, ahead, "queued");
        let turn = given.await;
        seat.turned = true;
        turn.map_err(|_| stopped())
    }

    /// Runs a job where the model says it runs, holding its slot until the
    /// compute ends: on the CPU pool, whether or not the caller is still
    /// there; as a task, until the caller goes.
    async fn compute(&self, turn: Turn, stages: &mut Stages) -> Result<Vec<Tensor>, Error> {
        let Turn { slot, job } = turn;
        let elements: usize = job.inputs.iter().map(|t| t.data.len()).sum();
        let span = tracing::debug_span!("compute");
        span.in_scope(|| tracing::debug!(model = %self.model.metadata().name, "computing"));
        match self.model.execution(elements) {
            Execution::Inline => {
                let _entered = span.enter();
                let result = timed(&mut stages.compute, || {
                    self.model.infer(&job.inputs, &job.outputs)
                });
                drop(slot);
                result
            }
            Execution::Pool => {
                let (done, result) = oneshot::channel();
                let model = Arc::clone(&self.model);
                self.pool.spawn(move || {
                    let _entered = span.enter();
                    let started = Instant::now();
                    let result = model.infer(&job.inputs, &job.outputs);
                    let spent = started.elapsed();
                    freed(slot, model.as_ref());
                    let _ = done.send((result, spent));
                });
                let (result, spent) = result.await.map_err(|_| self.crashed())?;
                stages.compute = spent;
                result
            }
            Execution::Async => {
                let model = Arc::clone(&self.model);
                let call = InferCall {
                    inputs: job.inputs,
                    outputs: job.outputs,
                    parameters: job.parameters,
                    deadline: job.deadline,
                };
                // A task of its own, so that a model that panics fails
                // one request; aborted if the caller goes.
                let task = tokio::spawn(
                    async move {
                        let started = Instant::now();
                        let result = Arc::clone(&model).infer_async(call).await;
                        let spent = started.elapsed();
                        freed(slot, model.as_ref());
                        (result, spent)
                    }
                    .instrument(span),
                );
                let _guard = AbortOnDrop {
                    task: task.abort_handle(),
                    model: Arc::clone(&self.model),
                };
                let (result, spent) = task.await.map_err(|_| self.crashed())?;
                stages.compute = spent;
                result
            }
        }
    }

    fn crashed(&self) -> Error {
        Error::internal(format!(
            "model '{}' failed while computing (it panicked; see the message above)",
            self.model.metadata().name
        ))
    }
}

/// Aborts a model's task if its caller goes before it ends.
struct AbortOnDrop {
    task: tokio::task::AbortHandle,
    model: Arc<dyn Model>,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.task.is_finished() {
            self.task.abort();
            let model = &self.model.metadata().name;
            tracing::debug!(%model, "the caller left mid-compute; the model's call is cancelled and its slot freed");
        }
    }
}

/// Gives a slot back once its compute has ended, whether or not its
/// caller is still there to take the answer.
fn freed(slot: OwnedSemaphorePermit, model: &dyn Model) {
    drop(slot);
    tracing::debug!(model = %model.metadata().name, "compute ended; slot freed");
}

/// The queue's owner: hands each slot that frees up to the longest-waiting
/// request whose caller is still there. Ends when the scheduler is dropped.
async fn actor(
    model: String,
    mut arrivals: mpsc::UnboundedReceiver<Waiting>,
    slots: Arc<Semaphore>,
    max_queue: usize,
) {
    let mut queue: VecDeque<Waiting> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match arrivals.recv().await {
                Some(waiting) => queue.push_back(waiting),
                None => return,
            }
            continue;
        }
        tokio::select! {
            biased;
            arrived = arrivals.recv() => match arrived {
                Some(waiting) => {
                    queue.push_back(waiting);
                    // More than the queue holds means some callers left;
                    // their inputs are let go now, not when their turn comes.
                    if queue.len() > max_queue {
                        queue.retain(|w| !gone(&model, w));
                    }
                }
                None => return,
            },
            slot = Arc::clone(&slots).acquire_owned() => {
                let Ok(mut slot) = slot else { return };
                while let Some(waiting) = queue.pop_front() {
                    let span = waiting.span.clone();
                    match waiting.turn.send(Turn { slot, job: waiting.job }) {
                        Ok(()) => break,
                        Err(Turn { slot: back, .. }) => {
                            slot = back;
                            span.in_scope(|| dropped(&model));
                        }
                    }
                }
            }
        }
    }
}

/// Whether the caller of a queued request has gone.
fn gone(model: &str, waiting: &Waiting) -> bool {
    let gone = waiting.turn.is_closed();
    if gone {
        waiting.span.in_scope(|| dropped(model));
    }
    gone
}

fn dropped(model: &str) {
    tracing::debug!(
        model,
        "the caller left while queued; dropped without computing"
    );
}
