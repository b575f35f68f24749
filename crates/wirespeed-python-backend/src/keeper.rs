//! The keepers of a Python model's workers: one thread per instance, which
//! starts its worker, hands it the model's queued requests (the first one
//! alone when the worker is idle, the ones that queued meanwhile in one
//! message when it was busy, or a batch when the model batches), and
//! restarts it with growing waits when it dies.
//!
//! Threads, not tasks of the server's runtime: a keeper blocks on its
//! worker's socket while the model computes, and owns the process from
//! start to end (the worker dies with the thread that started it,
//! `PR_SET_PDEATHSIG`). The queue is a crossbeam channel that every keeper
//! takes from, so a request goes to whichever worker is free first; a
//! request of a sequence goes to its own worker's queue instead (chosen
//! by its correlation id), so a sequence always reaches the same worker.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvError, RecvTimeoutError};
use tokio::sync::oneshot;
use wirespeed_core::{Error, ErrorKind, Tensor};

use super::process::{ended, CallError, Calls, Launch, Process, StartError};

/// How often an idle keeper checks that its worker is alive.
pub(crate) const HEALTH_CHECK: Duration = Duration::from_millis(200);

/// The first wait before a restart, doubled after each quick death.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A worker that ran this long before dying is restarted at once again.
const STABLE: Duration = Duration::from_secs(60);

/// One request for a worker.
pub(crate) struct Job {
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<usize>,
    pub(crate) parameters: serde_json::Map<String, serde_json::Value>,
    pub(crate) deadline: Option<Instant>,
    /// A decoupled model's stream: `reply` then answers no outputs once
    /// `execute` has returned.
    pub(crate) responses: Option<wirespeed_core::ResponseSender>,
    pub(crate) reply: oneshot::Sender<Result<Vec<Tensor>, Error>>,
}

/// Where a worker is in its life.
#[derive(Debug, Clone)]
pub(crate) enum State {
    Starting,
    Ready,
    Restarting(String),
    Failed(String),
    /// Its instance was removed (or the model unloaded): it finalized.
    Removed,
}

/// What the keepers share with the model.
pub(crate) struct Shared {
    pub(crate) model: String,
    pub(crate) ready: AtomicUsize,
    /// Keepers waiting for a request: while one is, another takes no
    /// request but its first (`queued_behind`).
    pub(crate) idle: AtomicUsize,
    /// Set when the model is dropped: keepers stop their workers and end.
    pub(crate) closed: AtomicBool,
    /// The model's instances now: a busy keeper takes its share of the
    /// queue (`queued_behind`).
    pub(crate) instances: AtomicUsize,
    /// Each instance's state, by instance number (removed ones stay, as
    /// `Removed`).
    pub(crate) states: Mutex<Vec<State>>,
    pub(crate) changed: Condvar,
}

impl Shared {
    pub(crate) fn set(&self, instance: usize, state: State) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if states.len() <= instance {
            states.resize(instance + 1, State::Starting);
        }
        let was_ready = matches!(states[instance], State::Ready);
        let is_ready = matches!(state, State::Ready);
        states[instance] = state;
        if is_ready && !was_ready {
            self.ready.fetch_add(1, Ordering::AcqRel);
        } else if was_ready && !is_ready {
            self.ready.fetch_sub(1, Ordering::AcqRel);
        }
        self.changed.notify_all();
    }
}

/// A keeper's two queues: its worker's own (sequences pinned to it), and
/// the one every keeper takes from.
pub(crate) struct Inbox {
    pub(crate) own: Receiver<Job>,
    pub(crate) shared: Receiver<Job>,
}

impl Inbox {
    /// The next job, its own queue's first, looked for `linger` before
    /// the keeper sleeps; `Timeout` after `wait`.
    pub(crate) fn next(&self, wait: Duration, linger: Duration) -> Result<Job, RecvTimeoutError> {
        // An instance removed takes no more requests once its own are
        // answered.
        match self.own.try_recv() {
            Ok(job) => return Ok(job),
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                return Err(RecvTimeoutError::Disconnected)
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
        let mut taken = None;
        super::process::linger(linger, || {
            taken = self.ready();
            taken.is_some()
        });
        if let Some(job) = taken.or_else(|| self.ready()) {
            return Ok(job);
        }
        crossbeam_channel::select! {
            recv(self.own) -> job => job.map_err(|_| RecvTimeoutError::Disconnected),
            recv(self.shared) -> job => job.map_err(|_| RecvTimeoutError::Disconnected),
            default(wait) => Err(RecvTimeoutError::Timeout),
        }
    }

    /// The next job already queued, its own queue's first.
    fn ready(&self) -> Option<Job> {
        self.own.try_recv().or_else(|_| self.shared.try_recv()).ok()
    }

    /// How many jobs are queued for this keeper (the shared queue's for
    /// every keeper).
    fn queued(&self) -> usize {
        self.own.len() + self.shared.len()
    }

    /// The next job, waiting as long as it takes.
    fn wait(&self) -> Result<Job, RecvError> {
        crossbeam_channel::select! {
            recv(self.own) -> job => job,
            recv(self.shared) -> job => job,
        }
    }
}

/// `job`, unless its caller left while it waited (it is dropped) or it
/// does not suit the model (refused): `streams`, the model is decoupled
/// and each request comes with its stream; one without is refused, as one
/// with a stream is from a model that is not.
fn runnable(job: Job, streams: bool) -> Option<Job> {
    if job.responses.is_some() != streams {
        let _ = job.reply.send(Err(Error::internal(if streams {
            "a decoupled model's request came without its stream"
        } else {
            "a stream was asked of a model that is not decoupled"
        })));
        return None;
    }
    if job.reply.is_closed() {
        return None; // the caller left while it waited
    }
    Some(job)
}

/// Triton's dynamic batcher: `first` and the requests that come while the
/// batch is short of `window`'s rows, until a preferred size is reached or
/// the window's delay has passed. A request that would take the batch past
/// its rows is given back for the next. `streams`: the model is decoupled,
/// and each request comes with its stream (one without is refused, as one
/// with a stream is from a model that is not).
pub(crate) fn gather(
    queue: &Inbox,
    first: Job,
    window: &super::process::BatchWindow,
    streams: bool,
) -> (Vec<Job>, Option<Job>) {
    let until = Instant::now() + window.delay;
    let mut rows = self::rows(&first);
    let mut batch = vec![first];
    while rows < window.max_rows && !window.preferred.contains(&rows) {
        let wait = until.saturating_duration_since(Instant::now());
        let Ok(job) = queue.next(wait, Duration::ZERO) else {
            break;
        };
        let Some(job) = runnable(job, streams) else {
            continue;
        };
        if rows + self::rows(&job) > window.max_rows {
            return (batch, Some(job));
        }
        rows += self::rows(&job);
        batch.push(job);
    }
    (batch, None)
}

/// Requests one message carries to a worker at most, when they queued
/// while it was busy ([`queued_behind`]).
const QUEUED_REQUESTS: usize = 32;

/// How much later than the first's a request's deadline may be for it to
/// go in the same message: the model's code is interrupted at the
/// message's last deadline, so at most this long after a request's own.
const DEADLINE_SPREAD: Duration = Duration::from_secs(1);

/// Input bytes one message carries at most, past its first request's.
const QUEUED_BYTES: usize = 8 << 20;

/// `first` and up to `share` of the requests already queued behind it,
/// for one message to the worker that runs each on its own
/// (`Calls::Each`): under load the worker takes them in one wake-up, where
/// a message each would cost more in the hand-over between the processes
/// than the model's own work. Of several workers, one takes no more than
/// its share of the queue, and none past its first while another is idle,
/// so that requests spread over the workers as they would one at a time
/// (two requests that wait for each other meet). The message's deadline is its last
/// request's, so a request joins only if its deadline lies within
/// [`DEADLINE_SPREAD`] after the first's (the same request timeout gives
/// deadlines in the order the requests came); one that does not (a
/// client's shorter or longer timeout) is given back as the next one's
/// first.
pub(crate) fn queued_behind(queue: &Inbox, first: Job, share: usize) -> (Vec<Job>, Option<Job>) {
    let earliest = first.deadline;
    let joins = |job: &Job| match (earliest, job.deadline) {
        (None, None) => true,
        (Some(first), Some(deadline)) => {
            deadline >= first && deadline.duration_since(first) <= DEADLINE_SPREAD
        }
        _ => false,
    };
    let most = (1 + share).min(QUEUED_REQUESTS);
    let mut bytes = 0usize;
    let mut batch = vec![first];
    while batch.len() < most {
        let Some(job) = queue.ready() else {
            break;
        };
        let Some(job) = runnable(job, false) else {
            continue;
        };
        let size: usize = job
            .inputs
            .iter()
            .map(|t| wirespeed_core::raw::raw_len(&t.data))
            .sum();
        if !joins(&job) || bytes + size > QUEUED_BYTES {
            return (batch, Some(job));
        }
        bytes += size;
        batch.push(job);
    }
    (batch, None)
}

/// A request's rows: its first input's first dimension (1 without inputs).
pub(crate) fn rows(job: &Job) -> usize {
    job.inputs
        .first()
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(1)
        .max(1)
}

/// What a keeper's first worker said when it loaded the model.
pub(crate) struct Started {
    pub(crate) decoupled: bool,
    pub(crate) metadata: Option<String>,
}

/// One instance's keeper. It ends, and its worker finalizes, when the
/// model goes or its own queue's sender is dropped (the instance removed:
/// `workers.rs`).
pub(crate) struct Keeper {
    pub(crate) launch: Arc<Launch>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) queue: Inbox,
    pub(crate) instance: usize,
}

impl Keeper {
    pub(crate) fn run(self, first: std::sync::mpsc::Sender<Result<Started, StartError>>) {
        let mut first = Some(first);
        let mut backoff = FIRST_BACKOFF;
        loop {
            let started = Instant::now();
            let mut process = match Process::start(&self.launch, self.instance) {
                Ok(process) => process,
                Err(StartError::Load(traceback)) => {
                    let reason = traceback.trim_end().lines().last().unwrap_or("").to_owned();
                    tracing::error!(
                        model = %self.launch.model,
                        instance = self.instance,
                        "the model's Python code failed to load:\n{}",
                        traceback.trim_end()
                    );
                    self.shared
                        .set(self.instance, State::Failed(reason.clone()));
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(StartError::Load(reason)));
                    }
                    return self.refuse_all();
                }
                Err(StartError::Spawn(message)) if first.is_some() => {
                    // At load: the config names an interpreter that is not there.
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(StartError::Spawn(message)));
                    }
                    return;
                }
                Err(StartError::Spawn(message) | StartError::Process(message)) => {
                    tracing::error!(model = %self.launch.model, instance = self.instance, "{message}");
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(StartError::Process(message.clone())));
                    }
                    self.shared.set(self.instance, State::Restarting(message));
                    if !self.pause(&mut backoff) {
                        return;
                    }
                    continue;
                }
            };
            self.shared.set(self.instance, State::Ready);
            if let Some(first) = first.take() {
                let _ = first.send(Ok(Started {
                    decoupled: process.decoupled,
                    metadata: process.metadata.clone(),
                }));
            }
            let served = if process.decoupled {
                super::decoupled::serve(&self.launch, &self.queue, &mut process)
            } else {
                self.serve(&mut process)
            };
            let reason = match served {
                Some(reason) => reason,
                None => {
                    // The model is gone, or this instance removed: let the
                    // worker finalize.
                    self.shared.set(self.instance, State::Removed);
                    process.stop();
                    return;
                }
            };
            tracing::error!(model = %self.launch.model, instance = self.instance, "{reason}");
            drop(process);
            self.shared.set(self.instance, State::Restarting(reason));
            if started.elapsed() > STABLE {
                backoff = FIRST_BACKOFF;
            }
            if !self.pause(&mut backoff) {
                return;
            }
        }
    }

    /// Serves requests until the worker is lost (why) or the model is
    /// dropped (`None`).
    fn serve(&self, process: &mut Process) -> Option<String> {
        // A job taken while gathering a batch it would overflow: the next
        // batch's first.
        let mut carried: Option<Job> = None;
        // The worker's last message carried one request, and none was
        // waiting behind it: light load, where the keeper lingers for the
        // answer and the next request rather than sleep (under load it
        // would take the core from the server's threads, and the queue
        // is seldom empty).
        let mut alone = true;
        loop {
            let linger = if alone {
                self.launch.linger
            } else {
                Duration::ZERO
            };
            let next = match carried.take() {
                Some(job) => Ok(job),
                None => {
                    self.shared.idle.fetch_add(1, Ordering::AcqRel);
                    let next = self.queue.next(HEALTH_CHECK, linger);
                    self.shared.idle.fetch_sub(1, Ordering::AcqRel);
                    next
                }
            };
            match next {
                Ok(job) => {
                    let Some(job) = runnable(job, false) else {
                        continue;
                    };
                    let (mut jobs, over, calls) = match &self.launch.batch {
                        Some(window) => {
                            let (batch, over) = gather(&self.queue, job, window, false);
                            (batch, over, Calls::Together)
                        }
                        None => {
                            let share = if self.shared.idle.load(Ordering::Acquire) > 0 {
                                0 // an idle worker takes the next one
                            } else {
                                self.queue
                                    .queued()
                                    .div_ceil(self.shared.instances.load(Ordering::Acquire).max(1))
                            };
                            let (queued, over) = queued_behind(&self.queue, job, share);
                            (queued, over, Calls::Each)
                        }
                    };
                    alone = jobs.len() == 1 && over.is_none() && self.queue.queued() == 0;
                    carried = over;
                    process.answer_linger = if alone {
                        self.launch.linger
                    } else {
                        Duration::ZERO
                    };
                    let lost = match calls {
                        Calls::Together => self.run_batch(process, jobs),
                        Calls::Each => self.run_gathered(process, &mut jobs, Calls::Each),
                    };
                    if lost.is_some() {
                        if let Some(job) = carried.take() {
                            let _ = job.reply.send(Err(Error::model_failed(format!(
                                "model '{}': its Python worker was lost before this request ran; \
                                 it is being restarted",
                                self.launch.model
                            ))));
                        }
                        return lost;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(status) = process.exited() {
                        return Some(format!(
                            "model '{}': its Python worker (pid {}) {} while idle; it is being restarted",
                            self.launch.model,
                            process.pid,
                            ended(Some(status))
                        ));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// One request, answered; why the worker was lost, if it was.
    fn run_one(&self, process: &mut Process, mut job: Job) -> Option<String> {
        let result = {
            // A BLS call the model makes is cancelled when this request's
            // caller goes.
            let gone = std::pin::pin!(job.reply.closed());
            process.infer(
                &self.launch,
                &job.inputs,
                &job.outputs,
                std::mem::take(&mut job.parameters),
                job.deadline,
                gone,
            )
        };
        match result {
            Ok(outputs) => {
                let _ = job.reply.send(Ok(outputs));
                None
            }
            Err(CallError::Model(error)) => {
                let _ = job.reply.send(Err(error));
                None
            }
            Err(CallError::Lost(error)) => {
                let reason = error.message().to_owned();
                let _ = job.reply.send(Err(error));
                Some(reason)
            }
        }
    }

    /// A batch's requests, in one call of the model; each answered. Why
    /// the worker was lost, if it was.
    fn run_batch(&self, process: &mut Process, mut batch: Vec<Job>) -> Option<String> {
        let started = Instant::now();
        let rows: usize = batch.iter().map(rows).sum();
        let lost = self.run_gathered(process, &mut batch, Calls::Together);
        self.launch.executions.count(rows, started.elapsed());
        lost
    }

    /// Several requests in one message, the model called as `calls`
    /// says; each answered. Why the worker was lost, if it was.
    fn run_gathered(
        &self,
        process: &mut Process,
        batch: &mut Vec<Job>,
        calls: Calls,
    ) -> Option<String> {
        if batch.len() == 1 {
            return self.run_one(process, batch.pop().expect("one"));
        }
        let deadline = batch
            .iter()
            .map(|j| j.deadline)
            .try_fold(None, |latest: Option<Instant>, d| {
                d.map(|d| Some(latest.map_or(d, |l| l.max(d))))
            });
        let requests = batch
            .iter_mut()
            .map(|job| {
                (
                    &job.inputs[..],
                    &job.outputs[..],
                    std::mem::take(&mut job.parameters),
                )
            })
            .collect();
        match process.infer_batch(&self.launch, requests, deadline.flatten(), calls) {
            Ok(answers) => {
                for (job, answer) in batch.drain(..).zip(answers) {
                    let _ = job.reply.send(answer);
                }
                None
            }
            Err(CallError::Model(error)) => {
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(error.clone()));
                }
                None
            }
            Err(CallError::Lost(error)) => {
                let reason = error.message().to_owned();
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(error.clone()));
                }
                Some(reason)
            }
        }
    }

    /// Waits before a restart, doubling the next wait; false when the model
    /// was dropped meanwhile. Requests meanwhile stay queued for the other
    /// workers, or for this one once it is back (the model is not ready
    /// while none is, so new ones are refused with 503 first).
    fn pause(&self, backoff: &mut Duration) -> bool {
        let until = Instant::now() + *backoff;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        while Instant::now() < until {
            if self.shared.closed.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(HEALTH_CHECK),
            );
        }
        !self.shared.closed.load(Ordering::Acquire)
    }

    /// After a failed load: answers every request until the model goes.
    fn refuse_all(&self) {
        while let Ok(job) = self.queue.wait() {
            let _ = job.reply.send(Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "model '{}' failed to load in its Python worker",
                    self.launch.model
                ),
            )));
        }
    }
}

#[cfg(test)]
mod queued_requests {
    use super::*;
    use crossbeam_channel::Sender;
    use wirespeed_core::TensorData;

    fn job(
        floats: usize,
        deadline: Option<Instant>,
    ) -> (Job, oneshot::Receiver<Result<Vec<Tensor>, Error>>) {
        let (reply, answer) = oneshot::channel();
        let x = Tensor::new("x", vec![floats], TensorData::Fp32(vec![0.0; floats]));
        let job = Job {
            inputs: vec![x],
            outputs: vec![0],
            parameters: serde_json::Map::new(),
            deadline,
            responses: None,
            reply,
        };
        (job, answer)
    }

    fn inbox() -> (Sender<Job>, Inbox) {
        // No sequence's own queue: its sender is gone, so it reads empty.
        let (_, own) = crossbeam_channel::unbounded();
        let (shared_tx, shared) = crossbeam_channel::unbounded();
        (shared_tx, Inbox { own, shared })
    }

    /// Sizes of the jobs `queued_behind` took, and of the one it gave back.
    fn sizes(taken: &(Vec<Job>, Option<Job>)) -> (Vec<usize>, Option<usize>) {
        let size = |j: &Job| j.inputs[0].shape[0];
        (
            taken.0.iter().map(size).collect(),
            taken.1.as_ref().map(size),
        )
    }

    #[test]
    fn a_busy_workers_queue_goes_in_one_message_up_to_its_share_and_the_cap() {
        let (queue, inbox) = inbox();
        let mut answers = Vec::new();
        for n in 1..=40 {
            let (j, a) = job(n, None);
            queue.send(j).unwrap();
            answers.push(a);
        }
        let (first, _a) = job(100, None);
        // All of it for the one worker, but no more than the cap.
        let taken = queued_behind(&inbox, first, 40);
        assert_eq!(
            sizes(&taken),
            (
                std::iter::once(100).chain(1..QUEUED_REQUESTS).collect(),
                None
            )
        );
        // Its share only, of several workers.
        let (first, _a) = job(100, None);
        assert_eq!(
            sizes(&queued_behind(&inbox, first, 2)),
            (vec![100, 32, 33], None)
        );
        // None past the first while another worker is idle.
        let (first, _a) = job(100, None);
        assert_eq!(sizes(&queued_behind(&inbox, first, 0)), (vec![100], None));
    }

    #[test]
    fn a_request_that_left_is_skipped_and_one_with_another_deadline_is_given_back() {
        let (queue, inbox) = inbox();
        let now = Instant::now();
        let (left, answer) = job(1, Some(now));
        drop(answer);
        queue.send(left).unwrap();
        let (near, _a) = job(2, Some(now + Duration::from_millis(5)));
        queue.send(near).unwrap();
        let (far, _b) = job(3, Some(now + DEADLINE_SPREAD + Duration::from_secs(1)));
        queue.send(far).unwrap();
        let (after, _c) = job(4, Some(now));
        queue.send(after).unwrap();
        let (first, _d) = job(100, Some(now));
        assert_eq!(
            sizes(&queued_behind(&inbox, first, 10)),
            (vec![100, 2], Some(3))
        );
        // A sooner deadline than the first's is given back too.
        let (first, _e) = job(100, Some(now + Duration::from_millis(10)));
        assert_eq!(
            sizes(&queued_behind(&inbox, first, 10)),
            (vec![100], Some(4))
        );
    }

    #[test]
    fn a_message_carries_no_more_than_its_bytes() {
        let (queue, inbox) = inbox();
        let mut answers = Vec::new();
        for _ in 0..3 {
            let (j, a) = job(QUEUED_BYTES / 4 / 2, None); // half the bytes each
            queue.send(j).unwrap();
            answers.push(a);
        }
        let (first, _a) = job(1, None);
        let taken = queued_behind(&inbox, first, 10);
        assert_eq!(taken.0.len(), 3);
        assert!(taken.1.is_some());
    }
}
