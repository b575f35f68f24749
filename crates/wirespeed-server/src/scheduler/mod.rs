//! One scheduler per model: who computes now, who waits, in which order,
//! with whom a request is batched, and what a request that would be late
//! is answered.
//!
//! At most `max_concurrency` executions of the model run at once, each
//! holding a *slot*. A request that finds a slot free and nobody waiting
//! runs at once, alone, without a hop (the common, unloaded case costs two
//! atomic operations), unless the model has a latency objective or waits
//! for fuller batches (`max_queue_delay_us`). Otherwise it joins the
//! model's queue, owned by an actor (`actor.rs`): requests come in on a
//! channel, each with `oneshot`s for its answer and its turn, and its
//! tracing span. The actor orders them by priority level and queue policy
//! (`queue.rs`, Triton's semantics), forms batches of compatible requests
//! when the model batches, and hands each batch to one of its requests
//! (its *leader*), which runs it on its own I/O thread (`batch.rs`): the
//! inputs joined along dimension 0 once, one call to the model, and the
//! outputs cut back into each request's rows.
//!
//! A full queue (`max_queue`, or a level's `max_queue_size`) refuses at
//! once: 503 with `Retry-After`, or RESOURCE_EXHAUSTED, so under overload
//! accepted requests keep a bounded latency and memory stays bounded. A
//! request whose caller has gone is dropped from the queue without
//! computing.
//!
//! With a latency objective (`[slo]`), a request that would miss it is
//! answered with the model's default outputs, flagged: while queued, as
//! soon as the model's recent batch latency says it cannot make it (only
//! while every slot is busy; a free slot always tries); while computing,
//! at the objective itself. The actor keeps the clock for both, on a
//! thread of its own, because tokio's timers tick once a millisecond and
//! a batching delay or an objective is often a fraction of one.
//!
//! A slot is held until the model's compute really ends: a batch runs as
//! a task of its own, whichever of its callers leave. A model that awaits
//! (`Execution::Async`: a call to another server) is cancelled when every
//! caller in its batch has gone (the upstream sees the call reset), and
//! its slot comes back then.

mod actor;
mod batch;
mod queue;

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::{Instrument, Span};
use wirespeed_core::{
    CpuPool, Error, ErrorKind, Execution, InferCall, Model, Parameters, RequestedOutput, Tensor,
    TraceContext,
};
use wirespeed_models::Scheduling;

use crate::serve::timing::{timed, Stages};
use actor::Mailbox;
pub(crate) use actor::QueueThread;
use queue::{BatchKey, Entry};

/// The inputs to compute, the outputs to produce, and what a model that
/// awaits also gets.
struct Job {
    inputs: Vec<Tensor>,
    outputs: Vec<usize>,
    parameters: Parameters,
    deadline: Option<Instant>,
    /// The trace context to pass on.
    trace: Option<TraceContext>,
}

/// What a request brings to its scheduler besides inputs and outputs.
pub(crate) struct CallContext {
    /// The request's parameters the server does not act on itself.
    pub(crate) parameters: Parameters,
    /// When the client stops waiting.
    pub(crate) deadline: Option<Instant>,
    /// Triton's `priority` parameter: 1 is the highest level, 0 the
    /// model's default.
    pub(crate) priority: u64,
    /// Triton's `timeout` parameter: the longest it may wait in the queue.
    pub(crate) timeout: Option<Duration>,
    /// The request's trace context, for a model that calls another server.
    pub(crate) trace: Option<TraceContext>,
}

/// What a request gets back from its model.
pub(crate) struct Answer {
    pub(crate) outputs: Vec<Tensor>,
    /// The outputs are the model's defaults: it would have missed its
    /// latency objective.
    pub(crate) default: bool,
}

/// Why an answer is the default, in Clipper's words.
pub(crate) const DEFAULT_EXPLANATION: &str =
    "Failed to retrieve a prediction response within the specified latency SLO";

/// A batch handed to its leader: the requests in it, in queue order, and
/// its slot.
struct Lead {
    members: Vec<Member>,
    slot: Slot,
}

/// One request of a batch.
struct Member {
    job: Job,
    rows: usize,
    outcome: oneshot::Sender<Outcome>,
    queued: Duration,
    span: Span,
}

/// How a request ends, as the actor or its batch tells it.
enum Outcome {
    Computed {
        outputs: Vec<Tensor>,
        /// The rows of the batch it ran in.
        batch: usize,
        queued: Duration,
        compute: Duration,
    },
    /// It would miss the objective: answer the defaults.
    Late,
    Failed(Error),
}

/// What the actor hears.
enum Event {
    Arrive(Box<Entry>),
    /// A batch of `rows` ran in `took`.
    Ran {
        rows: usize,
        took: Duration,
    },
    /// A slot came back while requests wait.
    Freed,
    /// A model's actor joins the queue thread.
    Start(Box<actor::Actor>),
    Stop,
}

/// A compute slot. Giving it back tells the actor, when requests wait.
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    events: Mailbox,
    waiting: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        // Pairs with the fence before the actor's `try_acquire`: either it
        // sees this slot free, or this sees its request waiting.
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _ = self.events.send(Event::Freed);
        }
    }
}

/// The counts a scheduler keeps for the statistics: executions and batch
/// sizes (of a model that batches; the others' are its requests'),
/// defaults, timeouts, and the adaptive batch size.
#[derive(Default)]
pub(crate) struct Counters {
    /// Whether executions are counted here: the model batches.
    batching: bool,
    pub(crate) executions: AtomicU64,
    pub(crate) defaults: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    /// The adaptive batcher's size now.
    pub(crate) batch_size: AtomicUsize,
    /// Per batch size (rows): executions and their stage times.
    pub(crate) batches: Mutex<std::collections::BTreeMap<usize, BatchTally>>,
}

/// The executions of one batch size.
#[derive(Default, Clone, Copy)]
pub(crate) struct BatchTally {
    pub(crate) count: u64,
    /// Joining the inputs.
    pub(crate) input_ns: u64,
    pub(crate) infer_ns: u64,
    /// Cutting the outputs.
    pub(crate) output_ns: u64,
}

impl Counters {
    /// Counts an execution of `rows` rows, if the model batches.
    fn executed(&self, rows: usize, input: Duration, infer: Duration, output: Duration) {
        if !self.batching {
            return;
        }
        self.executions.fetch_add(1, Ordering::Relaxed);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        let tally = batches.entry(rows).or_default();
        tally.count += 1;
        tally.input_ns += ns(input);
        tally.infer_ns += ns(infer);
        tally.output_ns += ns(output);
    }
}

/// The admission, queue, batching and compute of one model.
pub(crate) struct Scheduler {
    model: Arc<dyn Model>,
    pool: CpuPool,
    slots: Arc<Semaphore>,
    concurrency: usize,
    /// Requests in the queue (or on their way to it).
    waiting: Arc<AtomicUsize>,
    max_queue: usize,
    events: Mailbox,
    scheduling: Arc<Scheduling>,
    /// Whether a request may run at once, alone, when a slot is free.
    fast: bool,
    counters: Arc<Counters>,
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Stop);
    }
}

impl Scheduler {
    /// Starts the scheduler of `model`, its queue's actor on `queues`.
    pub(crate) fn start(
        model: Arc<dyn Model>,
        concurrency: usize,
        max_queue: usize,
        scheduling: Scheduling,
        pool: CpuPool,
        queues: &QueueThread,
    ) -> Scheduler {
        let slots = Arc::new(Semaphore::new(concurrency));
        let waiting = Arc::new(AtomicUsize::new(0));
        let counters = Arc::new(Counters {
            batching: scheduling.batching.is_some(),
            ..Counters::default()
        });
        let scheduling = Arc::new(scheduling);
        let fast = scheduling.slo.is_none()
            && scheduling
                .batching
                .as_ref()
                .is_none_or(|b| b.max_queue_delay.is_zero());
        let events = queues.add(actor::Actor::new(
            model.metadata().name.clone(),
            Arc::clone(&scheduling),
            Arc::clone(&slots),
            Arc::clone(&waiting),
            Arc::clone(&counters),
        ));
        Scheduler {
            model,
            pool,
            slots,
            concurrency,
            waiting,
            max_queue,
            events,
            scheduling,
            fast,
            counters,
        }
    }

    /// The scheduling the model was configured with.
    pub(crate) fn scheduling(&self) -> &Scheduling {
        &self.scheduling
    }

    /// The executions, batch sizes and defaults counted so far.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The requests waiting for a turn now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Checks `inputs` against the model, waits for a turn (alone or in a
    /// batch), runs the model and returns the `requested` outputs (all of
    /// them when none are named), in request order; or the defaults, if it
    /// would miss the objective. The wait, the compute and the batch size
    /// go into `stages`.
    pub(crate) async fn run(
        &self,
        mut inputs: Vec<Tensor>,
        requested: &[RequestedOutput],
        context: CallContext,
        stages: &mut Stages,
    ) -> Result<Answer, Error> {
        let metadata = self.model.metadata();
        metadata.check_inputs(&inputs)?;
        let outputs = metadata.resolve_outputs(requested.iter().map(|o| o.name.as_str()))?;
        let rows = wirespeed_core::batch::rows(&inputs);
        let level = self.scheduling.queue.level(context.priority);
        let timeout = self.scheduling.queue.levels[level].timeout(context.timeout);
        if self.fast {
            if let Some(slot) = self.free_slot() {
                let job = Job {
                    inputs,
                    outputs,
                    parameters: context.parameters,
                    deadline: context.deadline,
                    trace: context.trace,
                };
                return self.alone(job, slot, rows, stages).await;
            }
        }
        let key = self.batch_key(&mut inputs, &outputs, &context.parameters, rows);
        let wanted = if self.scheduling.slo.is_some() {
            outputs.clone()
        } else {
            Vec::new()
        };
        let job = Job {
            inputs,
            outputs,
            parameters: context.parameters,
            deadline: context.deadline,
            trace: context.trace,
        };
        self.queued(job, wanted, key, rows, level, timeout, stages)
            .await
    }

    /// A slot, if one is free and nobody is waiting for it.
    fn free_slot(&self) -> Option<Slot> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        let permit = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        Some(self.slot(permit))
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit: Some(permit),
            events: self.events.clone(),
            waiting: Arc::clone(&self.waiting),
        }
    }

    /// What a request must share with others to join their batch; `None`
    /// when it runs alone: the model does not batch, its tensors have no
    /// variable first dimension, or the request alone fills a batch. Puts
    /// the inputs in the model's order, as the batch joins them.
    fn batch_key(
        &self,
        inputs: &mut [Tensor],
        outputs: &[usize],
        parameters: &Parameters,
        rows: Option<usize>,
    ) -> Option<BatchKey> {
        let batching = self.scheduling.batching.as_ref()?;
        rows.filter(|&r| r >= 1 && r < batching.max_batch_size)?;
        let metadata = self.model.metadata();
        // A model whose metadata came later (an upstream) is checked here.
        let specs = metadata.inputs.iter().chain(&metadata.outputs);
        if !specs.into_iter().all(|s| s.shape.first() == Some(&-1)) {
            return None;
        }
        inputs.sort_by_key(|t| metadata.inputs.iter().position(|s| s.name == t.name));
        let shapes = inputs
            .iter()
            .map(|t| (t.datatype(), t.shape[1..].to_vec()))
            .collect();
        Some(BatchKey::new(shapes, outputs.to_vec(), parameters.clone()))
    }

    /// Queues `job` and waits for its answer: computed in a batch (which
    /// it may lead), refused, or the defaults.
    #[allow(clippy::too_many_arguments)]
    async fn queued(
        &self,
        job: Job,
        wanted: Vec<usize>,
        key: Option<BatchKey>,
        rows: Option<usize>,
        level: usize,
        timeout: Option<Duration>,
        stages: &mut Stages,
    ) -> Result<Answer, Error> {
        let name = &self.model.metadata().name;
        let ahead = self.waiting.fetch_add(1, Ordering::SeqCst);
        if ahead >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::new(
                ErrorKind::Overloaded,
                format!(
                    "model '{name}' is busy: {} executions running and {} requests waiting, its limits; retry shortly",
                    self.concurrency, self.max_queue
                ),
            ));
        }
        let arrived = Instant::now();
        let slo = self.scheduling.slo.as_ref();
        let (lead, led) = oneshot::channel();
        // Declared before the other receivers, so dropped after them: a
        // caller that leaves is logged once the actor can see it gone.
        let mut turn = Turn {
            scheduler: self,
            led: Some(led),
            settled: false,
        };
        let (outcome, mut answered) = oneshot::channel();
        let (expired, mut late) = match slo {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let entry = Entry {
            job,
            rows: rows.unwrap_or(1),
            key,
            arrived,
            level,
            timeout_at: timeout.map(|t| arrived + t),
            slo_at: slo.map(|s| stages.started() + s.latency),
            lead,
            outcome,
            expired,
            span: Span::current(),
        };
        let stopped = || Error::internal(format!("the scheduler of model '{name}' has stopped"));
        if self.events.send(Event::Arrive(Box::new(entry))).is_err() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            turn.settled = true;
            return Err(stopped());
        }
        tracing::debug!(model = %name, ahead, "queued");
        let outcome = loop {
            tokio::select! {
                biased;
                outcome = &mut answered => break outcome.map_err(|_| self.crashed())?,
                missed = async { late.as_mut().expect("guarded").await }, if late.is_some() => {
                    // The actor sends this only when the objective is
                    // missed; it drops it unsent when the request left the
                    // queue otherwise, and the answer is on its way.
                    match missed {
                        Ok(()) => break Outcome::Late,
                        Err(_) => late = None,
                    }
                }
                lead = async { turn.led.as_mut().expect("guarded").await }, if turn.led.is_some() => {
                    turn.led = None;
                    turn.settled = true;
                    if let Ok(lead) = lead {
                        self.lead(lead);
                    }
                }
            }
        };
        turn.settled = true;
        match outcome {
            Outcome::Computed {
                outputs,
                batch,
                queued,
                compute,
            } => {
                stages.queue = queued;
                stages.compute = compute;
                if self.scheduling.batching.is_some() {
                    stages.batch = batch;
                }
                Ok(Answer {
                    outputs,
                    default: false,
                })
            }
            Outcome::Late => {
                stages.queue = arrived.elapsed();
                self.counters.defaults.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(model = %name, "past the latency objective; answered the default");
                Ok(Answer {
                    outputs: self.defaults(&wanted, rows.unwrap_or(1))?,
                    default: true,
                })
            }
            Outcome::Failed(error) => Err(error),
        }
    }

    /// Runs `job` at once, alone, in the slot it took, where the model
    /// says; holding the slot until the compute ends: on the CPU pool,
    /// whether or not the caller is still there; as a task, until the
    /// caller goes.
    async fn alone(
        &self,
        job: Job,
        slot: Slot,
        rows: Option<usize>,
        stages: &mut Stages,
    ) -> Result<Answer, Error> {
        let elements: usize = job.inputs.iter().map(|t| t.data.len()).sum();
        let span = tracing::debug_span!("compute");
        span.in_scope(|| tracing::debug!(model = %self.model.metadata().name, "computing"));
        let result = match self.model.execution(elements) {
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
                    trace: job.trace,
                };
                // A task of its own, so that a model that panics fails
                // one request; aborted if the caller goes. The slot is
                // shared with the guard, which frees it at once when the
                // caller goes, before the task is aborted.
                let slot = Arc::new(std::sync::Mutex::new(Some(slot)));
                let held = Arc::clone(&slot);
                let task = tokio::spawn(
                    async move {
                        let started = Instant::now();
                        let result = Arc::clone(&model).infer_async(call).await;
                        let spent = started.elapsed();
                        if let Some(slot) = take(&held) {
                            freed(slot, model.as_ref());
                        }
                        (result, spent)
                    }
                    .instrument(span),
                );
                let _guard = AbortOnDrop {
                    task: task.abort_handle(),
                    model: Arc::clone(&self.model),
                    slot,
                };
                let (result, spent) = task.await.map_err(|_| self.crashed())?;
                stages.compute = spent;
                result
            }
        };
        if self.scheduling.batching.is_some() {
            let rows = rows.unwrap_or(1);
            self.counters
                .executed(rows, Duration::ZERO, stages.compute, Duration::ZERO);
            stages.batch = rows;
        }
        result.map(|outputs| Answer {
            outputs,
            default: false,
        })
    }

    fn crashed(&self) -> Error {
        Error::internal(format!(
            "model '{}' failed while computing (it panicked; see the message above)",
            self.model.metadata().name
        ))
    }
}

impl Scheduler {
    /// The model's defaults for the `wanted` outputs (indices into the
    /// metadata's), for a request of `rows` rows.
    fn defaults(&self, wanted: &[usize], rows: usize) -> Result<Vec<Tensor>, Error> {
        let slo = self.scheduling.slo.as_ref().ok_or_else(|| {
            Error::internal("a default answer for a model with no latency objective")
        })?;
        let metadata = self.model.metadata();
        wanted
            .iter()
            .map(|&i| {
                let name = &metadata.outputs[i].name;
                let default = slo
                    .defaults
                    .iter()
                    .find(|d| &d.name == name)
                    .ok_or_else(|| {
                        Error::internal(format!(
                            "model '{}' has no default for output '{name}'",
                            metadata.name
                        ))
                    })?;
                Ok(default.tensor(rows))
            })
            .collect()
    }
}

impl Scheduler {
    /// Runs a batch this request was handed to lead, as a task of its own
    /// on this thread.
    fn lead(&self, lead: Lead) {
        let task = batch::run(
            lead,
            Arc::clone(&self.model),
            self.pool.clone(),
            self.events.clone(),
            Arc::clone(&self.counters),
        )
        .instrument(tracing::debug_span!("batch"));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(task)),
            Err(_) => tracing::error!(
                model = %self.model.metadata().name,
                "a batch was handed to a request outside the server's runtime; its requests fail"
            ),
        }
    }
}

/// A queued request's claim on its turn to lead a batch. A caller that
/// leaves just as the actor hands it a batch still runs the batch, for
/// the others in it.
struct Turn<'a> {
    scheduler: &'a Scheduler,
    led: Option<oneshot::Receiver<Lead>>,
    settled: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(mut led) = self.led.take() {
            // Closed first, so no batch can arrive after the look.
            led.close();
            if let Ok(lead) = led.try_recv() {
                self.scheduler.lead(lead);
            }
        }
        if !self.settled {
            let model = &self.scheduler.model.metadata().name;
            tracing::debug!(%model, "the caller left while queued");
        }
    }
}

/// Aborts a model's task if its caller goes before it ends, freeing its
/// slot first: the slot is free once the caller has gone, not once the
/// runtime gets to drop the aborted task.
struct AbortOnDrop {
    task: tokio::task::AbortHandle,
    model: Arc<dyn Model>,
    slot: Arc<std::sync::Mutex<Option<Slot>>>,
}

/// The slot, if nobody has freed it yet.
fn take(slot: &std::sync::Mutex<Option<Slot>>) -> Option<Slot> {
    slot.lock().ok().and_then(|mut s| s.take())
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.task.is_finished() {
            drop(take(&self.slot));
            self.task.abort();
            let model = &self.model.metadata().name;
            tracing::debug!(%model, "the caller left mid-compute; the model's call is cancelled and its slot freed");
        }
    }
}

/// Gives a slot back once its compute has ended, whether or not its
/// caller is still there to take the answer.
fn freed(slot: Slot, model: &dyn Model) {
    drop(slot);
    tracing::debug!(model = %model.metadata().name, "compute ended; slot freed");
}
