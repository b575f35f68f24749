//! The queues' owner: one actor per model, which alone holds the model's
//! waiting requests, hands each free slot a batch (or a request) in
//! priority order, and keeps the clock: batching delays, queue timeouts,
//! and the latency objective of queued and computing requests. Every
//! model's actor lives on one thread, the queue thread, which a model's
//! events reach through its `Mailbox`.
//!
//! A thread, not a tokio task: tokio's timers tick once a millisecond,
//! and a `max_queue_delay_us` or an objective is often a fraction of one.
//! The thread sleeps in `recv_timeout` until the next event or the next
//! thing that falls due, which the kernel's high-resolution timers wake
//! within tens of microseconds. One thread for every model, so the
//! process's threads do not grow with its models; an actor's work per
//! event is a few queue operations. It never computes: a batch goes to
//! one of its requests' own I/O threads (`batch.rs`).
//!
//! In adaptive mode it also runs Clipper's AIMD: after a full batch
//! within the objective the size grows by `step` rows; after a batch over
//! it, it shrinks by `backoff`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::policy::Scheduling;
use tokio::sync::{oneshot, Semaphore};
use wirespeed_core::{Error, ErrorKind};

use crate::queue::{Entry, Formed, Leaving, Queue};
use crate::{Counters, Event, Lead, Member, Outcome, Slot};

/// Weight of the newest batch in the estimate of a batch's latency.
const ESTIMATE_WEIGHT: f64 = 0.2;

/// Events handled between two looks at the whole queue's clock, at most:
/// callers that left are let go at least this often.
const SWEEP_EVERY: u32 = 1024;

/// The state of one model's queue.
pub(super) struct Actor {
    name: String,
    scheduling: Arc<Scheduling>,
    queue: Queue,
    slots: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    counters: Arc<Counters>,
    /// The batch size in adaptive mode, else the maximum.
    size: usize,
    /// Recent batch latency (an exponentially weighted mean).
    estimate: Duration,
    /// Computing requests' objectives, soonest first.
    computing: BinaryHeap<Reverse<Objective>>,
    /// When something in the queue next falls due.
    due: Option<Instant>,
    since_sweep: u32,
    mailbox: Option<Mailbox>,
}

/// A model's address on the queue thread.
#[derive(Clone)]
pub(super) struct Mailbox {
    id: u64,
    thread: mpsc::Sender<(u64, Event)>,
}

impl Mailbox {
    /// Tells the model's actor; fails only when the queue thread is gone.
    pub(super) fn send(&self, event: Event) -> Result<(), ()> {
        self.thread.send((self.id, event)).map_err(|_| ())
    }
}

/// The thread that keeps every model's queue.
#[derive(Clone)]
pub struct QueueThread {
    thread: mpsc::Sender<(u64, Event)>,
    next: Arc<AtomicU64>,
}

impl QueueThread {
    /// Starts the thread, `wirespeed-queues`.
    pub fn start() -> std::io::Result<QueueThread> {
        let (thread, inbox) = mpsc::channel();
        std::thread::Builder::new()
            .name("wirespeed-queues".into())
            .spawn(move || serve(inbox))?;
        Ok(QueueThread {
            thread,
            next: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Gives `actor` its place on the thread; returns its address.
    pub(super) fn add(&self, mut actor: Actor) -> Mailbox {
        let mailbox = Mailbox {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            thread: self.thread.clone(),
        };
        actor.mailbox = Some(mailbox.clone());
        let _ = mailbox.send(Event::Start(Box::new(actor)));
        mailbox
    }
}

/// The queue thread's loop: each event to its model's actor, then each
/// actor that heard something or fell due takes a step.
fn serve(inbox: mpsc::Receiver<(u64, Event)>) {
    let mut actors: HashMap<u64, (Actor, Option<Instant>)> = HashMap::new();
    let mut touched: Vec<u64> = Vec::new();
    let mut slack = Slack::default();
    loop {
        let planned = actors
            .values()
            .filter_map(|(_, at)| *at)
            .min()
            .map(|at| at.checked_sub(slack.0).unwrap_or(at));
        let first = match planned {
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => {
                let sleep = at.saturating_duration_since(Instant::now());
                let first = inbox.recv_timeout(sleep);
                if matches!(first, Err(RecvTimeoutError::Timeout)) && !sleep.is_zero() {
                    slack.observe(at, Instant::now());
                }
                first
            }
        };
        let first = match first {
            Ok(event) => Some(event),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                for (_, (actor, _)) in actors.drain() {
                    actor.stop();
                }
                return;
            }
        };
        touched.clear();
        for (id, event) in first
            .into_iter()
            .chain(std::iter::from_fn(|| inbox.try_recv().ok()))
        {
            match event {
                Event::Start(actor) => {
                    actors.insert(id, (*actor, None));
                }
                Event::Stop => {
                    if let Some((actor, _)) = actors.remove(&id) {
                        actor.stop();
                    }
                    continue;
                }
                event => match actors.get_mut(&id) {
                    Some((actor, _)) => actor.apply(event),
                    None => continue,
                },
            }
            touched.push(id);
        }
        let now = Instant::now();
        let horizon = now + slack.0;
        for (id, (actor, at)) in actors.iter_mut() {
            if at.is_some_and(|t| t <= horizon) || touched.contains(id) {
                *at = actor.step(now, horizon);
            }
        }
    }
}

/// How late the kernel wakes the queue thread from a timed sleep: tens of
/// microseconds on an idle machine, a millisecond or more when every core
/// is busy, as the scheduler lets the running thread use its slice. The
/// thread sleeps that much less and does what falls due by then: an
/// objective is answered (a delay ends, a timeout fires) up to this much
/// early rather than that much late.
#[derive(Default)]
struct Slack(Duration);

impl Slack {
    /// The most the thread wakes early.
    const MAX: Duration = Duration::from_millis(2);

    /// A sleep planned to end at `planned` ended at `woke`.
    fn observe(&mut self, planned: Instant, woke: Instant) {
        let late = woke.saturating_duration_since(planned).min(Slack::MAX);
        // Quick to rise, slow to fall: one late wake-up says the machine
        // is busy, and the next objective should not pay to learn it again.
        self.0 = if late > self.0 {
            late
        } else {
            self.0 - (self.0 - late) / 8
        };
    }
}

/// A computing request's objective, and the way to tell its caller.
struct Objective {
    at: Instant,
    expired: oneshot::Sender<()>,
}

impl PartialEq for Objective {
    fn eq(&self, other: &Objective) -> bool {
        self.at == other.at
    }
}
impl Eq for Objective {}
impl PartialOrd for Objective {
    fn partial_cmp(&self, other: &Objective) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Objective {
    fn cmp(&self, other: &Objective) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl Actor {
    pub(super) fn new(
        name: String,
        scheduling: Arc<Scheduling>,
        slots: Arc<Semaphore>,
        waiting: Arc<AtomicUsize>,
        counters: Arc<Counters>,
    ) -> Actor {
        let size = match &scheduling.batching {
            Some(b) if b.adaptive.is_some() => 1,
            Some(b) => b.max_batch_size,
            None => 1,
        };
        counters.batch_size.store(size, Ordering::Relaxed);
        Actor {
            name,
            queue: Queue::new(&scheduling.queue.levels),
            scheduling,
            slots,
            waiting,
            counters,
            size,
            estimate: Duration::ZERO,
            computing: BinaryHeap::new(),
            due: None,
            since_sweep: 0,
            mailbox: None,
        }
    }
}

impl Actor {
    /// Takes in one event.
    fn apply(&mut self, event: Event) {
        match event {
            Event::Arrive(entry) => self.arrive(*entry),
            Event::Ran { rows, took } => self.ran(rows, took),
            Event::Freed | Event::Start(_) | Event::Stop => {}
        }
        self.since_sweep += 1;
    }

    fn arrive(&mut self, entry: Entry) {
        for t in [
            entry.timeout_at,
            entry
                .slo_at
                .map(|at| at.checked_sub(self.estimate).unwrap_or(at)),
        ]
        .into_iter()
        .flatten()
        {
            self.due = Some(self.due.map_or(t, |d| d.min(t)));
        }
        let level = entry.level;
        if let Some(entry) = self.queue.push(entry) {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            let limit = self.queue.policy(level).max_queue_size;
            let error = Error::new(
                ErrorKind::Overloaded,
                format!(
                    "model '{}' is busy: priority level {} holds {limit} waiting requests, its max_queue_size; retry shortly",
                    self.name,
                    level + 1
                ),
            );
            let _ = entry.outcome.send(Outcome::Failed(error));
        }
    }

    /// A batch of `rows` took `took`: the estimate follows, and in adaptive
    /// mode the batch size.
    fn ran(&mut self, rows: usize, took: Duration) {
        self.estimate = if self.estimate.is_zero() {
            took
        } else {
            self.estimate.mul_f64(1.0 - ESTIMATE_WEIGHT) + took.mul_f64(ESTIMATE_WEIGHT)
        };
        let Some(batching) = &self.scheduling.batching else {
            return;
        };
        let Some(adaptive) = &batching.adaptive else {
            return;
        };
        let before = self.size;
        if took > adaptive.objective {
            self.size = ((self.size as f64) * (1.0 - adaptive.backoff))
                .floor()
                .max(1.0) as usize;
        } else if rows >= self.size {
            self.size = (self.size + adaptive.step).min(batching.max_batch_size);
        }
        if self.size != before {
            self.counters.batch_size.store(self.size, Ordering::Relaxed);
            tracing::debug!(model = %self.name, from = before, to = self.size, took_us = took.as_micros() as u64, "adaptive batch size");
        }
    }

    /// Applies the clock and fills free slots; returns when to look again.
    /// What falls due by `horizon` (`now` plus the thread's wake-up
    /// slack) is done now: a little early rather than late.
    fn step(&mut self, now: Instant, horizon: Instant) -> Option<Instant> {
        while self.computing.peek().is_some_and(|o| o.0.at <= horizon) {
            if let Some(Reverse(objective)) = self.computing.pop() {
                let _ = objective.expired.send(());
            }
        }
        // Only while every slot is busy is a request judged unable to make
        // its objective: a free slot always tries.
        let busy = self.slots.available_permits() == 0;
        let estimate = if busy { self.estimate } else { Duration::ZERO };
        if self.due.is_some_and(|d| d <= horizon) || self.since_sweep >= SWEEP_EVERY {
            self.since_sweep = 0;
            let (name, waiting, counters) = (&self.name, &self.waiting, &self.counters);
            self.due = self
                .queue
                .expire(now, horizon, estimate, self.estimate, |entry, why| {
                    waiting.fetch_sub(1, Ordering::SeqCst);
                    leave(name, counters, entry, why);
                });
        }
        let mut wait = None;
        while self.queue.len() > 0 {
            fence(Ordering::SeqCst);
            let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
                break;
            };
            match self
                .queue
                .form(self.scheduling.batching.as_ref(), self.size, horizon)
            {
                Formed::Batch(entries) => {
                    let slot = Slot {
                        permit: Some(permit),
                        events: self.mailbox.clone().expect("set when added"),
                        waiting: Arc::clone(&self.waiting),
                    };
                    self.dispatch(entries, slot, now);
                }
                Formed::Wait(until) => {
                    wait = Some(until);
                    break;
                }
                Formed::Empty => break,
            }
        }
        if !busy && self.queue.len() > 0 && self.slots.available_permits() == 0 {
            // Every slot just filled: those still queued are judged again,
            // now with the batch latency they will wait behind.
            self.due = Some(now);
        }
        [wait, self.due, self.computing.peek().map(|o| o.0.at)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Hands `entries` to one of them, to run as one batch in `slot`.
    fn dispatch(&mut self, entries: Vec<Entry>, slot: Slot, now: Instant) {
        self.waiting.fetch_sub(entries.len(), Ordering::SeqCst);
        let mut members = Vec::with_capacity(entries.len());
        let mut leads = Vec::with_capacity(entries.len());
        for entry in entries {
            if entry.gone() {
                leave(&self.name, &self.counters, entry, Leaving::Gone);
                continue;
            }
            if let (Some(at), Some(expired)) = (entry.slo_at, entry.expired) {
                self.computing.push(Reverse(Objective { at, expired }));
            }
            leads.push(entry.lead);
            members.push(Member {
                job: entry.job,
                rows: entry.rows,
                outcome: entry.outcome,
                queued: now.saturating_duration_since(entry.arrived),
                span: entry.span,
            });
        }
        let mut lead = Lead { members, slot };
        if lead.members.is_empty() {
            return;
        }
        for leader in leads {
            match leader.send(lead) {
                Ok(()) => return,
                Err(back) => lead = back,
            }
        }
        // Every caller left between the check and now: the batch is
        // dropped, and its slot with it.
        for member in &lead.members {
            member.span.in_scope(|| {
                tracing::debug!(model = %self.name, "the caller left while queued; dropped without computing");
            });
        }
    }

    /// The scheduler is gone: every waiting request is told so.
    fn stop(mut self) {
        tracing::debug!(model = %self.name, "the model's queue stops");
        for entry in self.queue.drain() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            let error = Error::new(
                ErrorKind::Unavailable,
                format!("model '{}' is no longer served", self.name),
            );
            let _ = entry.outcome.send(Outcome::Failed(error));
        }
    }
}

/// Answers a request that leaves the queue without computing.
fn leave(name: &str, counters: &Counters, entry: Entry, why: Leaving) {
    let span = entry.span.clone();
    let _entered = span.enter();
    match why {
        Leaving::Gone => {
            tracing::debug!(
                model = name,
                "the caller left while queued; dropped without computing"
            );
        }
        Leaving::Late => {
            let _ = entry.outcome.send(Outcome::Late);
        }
        Leaving::TimedOut(waited) => {
            counters.timeouts.fetch_add(1, Ordering::Relaxed);
            let error = Error::new(
                ErrorKind::Unavailable,
                format!(
                    "request timeout expired: the request waited {} us in model '{name}''s queue, past its queue timeout",
                    waited.as_micros()
                ),
            );
            let _ = entry.outcome.send(Outcome::Failed(error));
        }
    }
}
