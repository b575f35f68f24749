//! [`Scheduler`]: one model's admission, queue, batching and compute (the
//! crate's documentation says how).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::{Instrument, Span};
use wirespeed_core::{
    CpuPool, Error, ErrorKind, Execution, InferCall, Model, Parameters, RequestedOutput, Tensor,
};

use crate::actor::{self, Mailbox, QueueThread};
use crate::batch;
use crate::queue::{BatchKey, Entry};
use crate::{Answer, CallContext, Counters, Event, Job, Lead, Outcome, Scheduling, Slot, Spent};

/// The admission, queue, batching and compute of one model.
pub struct Scheduler {
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
    pub fn start(
        model: Arc<dyn Model>,
        concurrency: usize,
        max_queue: usize,
        scheduling: Scheduling,
        pool: CpuPool,
        queues: &QueueThread,
    ) -> Scheduler {
        let mut scheduling = scheduling;
        if model.batches_itself() {
            // Its requests go to it one by one; it gathers its batches.
            scheduling.batching = None;
        }
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
    pub fn scheduling(&self) -> &Scheduling {
        &self.scheduling
    }

    /// The executions, batch sizes and defaults counted so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The executions holding a compute slot now.
    pub fn running(&self) -> usize {
        self.concurrency
            .saturating_sub(self.slots.available_permits())
    }

    /// The requests waiting for a turn now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Checks `inputs` against the model, waits for a turn (alone or in a
    /// batch), runs the model and returns the `requested` outputs (all of
    /// them when none are named), in request order; or the defaults, if it
    /// would miss the objective. The wait, the compute and the batch size
    /// go into `spent`, whether or not it is answered.
    pub async fn run(
        &self,
        mut inputs: Vec<Tensor>,
        requested: &[RequestedOutput],
        context: CallContext,
        spent: &mut Spent,
    ) -> Result<Answer, Error> {
        let metadata = self.model.metadata();
        let binding = self.model.binding();
        let names: Vec<&str> = requested.iter().map(|o| o.name.as_str()).collect();
        let outputs = metadata.bind(binding, &mut inputs, &names)?;
        let mut answer = self.admit(inputs, outputs, context, spent).await?;
        // A model that streams answers on its stream, not here.
        if !self.model.decoupled() {
            answer.outputs = binding.pick(&metadata.name, answer.outputs, &names)?;
        }
        Ok(answer)
    }

    /// Runs bound inputs: at once when a slot is free and nobody waits,
    /// else through the queue (alone or in a batch).
    async fn admit(
        &self,
        mut inputs: Vec<Tensor>,
        outputs: Vec<usize>,
        context: CallContext,
        spent: &mut Spent,
    ) -> Result<Answer, Error> {
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
                    responses: context.responses,
                    input_parameters: context.input_parameters,
                };
                return self.alone(job, slot, rows, spent).await;
            }
        }
        let key = match context.responses {
            // A stream of its own: never batched.
            Some(_) => None,
            None => self.batch_key(&mut inputs, &outputs, &context.parameters, rows),
        };
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
            responses: context.responses,
            input_parameters: context.input_parameters,
        };
        self.queued(
            job,
            wanted,
            key,
            rows,
            level,
            timeout,
            context.started,
            spent,
        )
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
        // A request without all of the model's inputs (some are optional)
        // runs alone: a batch joins its requests' inputs by position.
        if inputs.len() != metadata.inputs.len() {
            return None;
        }
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
        started: Instant,
        spent: &mut Spent,
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
            slo_at: slo.map(|s| started + s.latency),
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
                spent.queue = queued;
                spent.compute = compute;
                if self.scheduling.batching.is_some() {
                    spent.batch = batch;
                }
                Ok(Answer {
                    outputs,
                    default: false,
                })
            }
            Outcome::Late => {
                spent.queue = arrived.elapsed();
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
        spent: &mut Spent,
    ) -> Result<Answer, Error> {
        let elements: usize = job.inputs.iter().map(|t| t.data.len()).sum();
        let span = tracing::debug_span!("compute");
        span.in_scope(|| tracing::debug!(model = %self.model.metadata().name, "computing"));
        let result = match self.model.execution(elements) {
            Execution::Inline => {
                let _entered = span.enter();
                let began = Instant::now();
                // A model that panics fails this request, not the
                // connection it came on.
                let result =
                    crate::batch::infer_caught(self.model.as_ref(), &job.inputs, &job.outputs);
                spent.compute = began.elapsed();
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
                let (result, took) = result.await.map_err(|_| self.crashed())?;
                spent.compute = took;
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
                    responses: job.responses,
                    input_parameters: job.input_parameters,
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
                let (result, took) = task.await.map_err(|_| self.crashed())?;
                spent.compute = took;
                result
            }
        };
        if self.scheduling.batching.is_some() {
            let rows = rows.unwrap_or(1);
            self.counters
                .executed(rows, Duration::ZERO, spent.compute, Duration::ZERO);
            spent.batch = rows;
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
