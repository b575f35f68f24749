//! One scheduler per model: who computes now, who waits, in which order,
//! with whom a request is batched, and what a request that would be late
//! is answered.
//!
//! ```
//! use std::time::Duration;
//! use wirespeed_scheduler::{LevelPolicy, QueuePolicy};
//!
//! // Triton's priority levels: 1 is the highest, and a request that gives no
//! // priority (0) or one past the levels waits at the default level.
//! let policy = QueuePolicy {
//!     levels: vec![LevelPolicy::default(), LevelPolicy::default(), LevelPolicy::default()],
//!     default_level: 2,
//! };
//! assert_eq!(policy.level(1), 0);
//! assert_eq!(policy.level(0), 2);
//! assert_eq!(policy.level(9), 2);
//!
//! // A request's own timeout may only shorten the level's.
//! let level = LevelPolicy { default_timeout: Some(Duration::from_millis(50)), ..LevelPolicy::default() };
//! assert_eq!(level.timeout(Some(Duration::from_millis(10))), Some(Duration::from_millis(10)));
//! assert_eq!(level.timeout(Some(Duration::from_secs(1))), Some(Duration::from_millis(50)));
//! ```
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
mod policy;
mod queue;
mod scheduler;

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actor::Mailbox;
pub use actor::QueueThread;
pub use policy::{
    Adaptive, Batching, DefaultOutput, LevelPolicy, QueuePolicy, Scheduling, Slo, TimeoutAction,
};
use queue::Entry;
pub use scheduler::Scheduler;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tracing::Span;
use wirespeed_core::{Error, Parameters, ResponseSender, Tensor, TraceContext};

/// The inputs to compute, the outputs to produce, and what a model that
/// awaits also gets.
struct Job {
    inputs: Vec<Tensor>,
    outputs: Vec<usize>,
    parameters: Parameters,
    deadline: Option<Instant>,
    /// The trace context to pass on.
    trace: Option<TraceContext>,
    /// Where a model that streams sends its responses.
    responses: Option<ResponseSender>,
    /// The inputs' own parameters, by input name.
    input_parameters: Vec<(String, Parameters)>,
}

/// What a request brings to its scheduler besides inputs and outputs.
#[derive(Debug)]
pub struct CallContext {
    /// When the request started: its latency objective counts from here.
    pub started: Instant,
    /// The request's parameters the server does not act on itself.
    pub parameters: Parameters,
    /// When the client stops waiting.
    pub deadline: Option<Instant>,
    /// Triton's `priority` parameter: 1 is the highest level, 0 the
    /// model's default.
    pub priority: u64,
    /// Triton's `timeout` parameter: the longest it may wait in the queue.
    pub timeout: Option<Duration>,
    /// The request's trace context, for a model that calls another server.
    pub trace: Option<TraceContext>,
    /// Where a model that streams (`Model::decoupled`) sends this
    /// request's responses. Such a request runs alone, never batched:
    /// each request has a stream of its own.
    pub responses: Option<ResponseSender>,
    /// The inputs' own parameters (a content type), by input name: given
    /// to a model that runs alone (a batch's requests may differ).
    pub input_parameters: Vec<(String, Parameters)>,
}

impl CallContext {
    /// A request that started now, with no parameters, deadline, priority,
    /// queue timeout or trace.
    pub fn now() -> CallContext {
        CallContext {
            started: Instant::now(),
            parameters: Parameters::new(),
            deadline: None,
            priority: 0,
            timeout: None,
            trace: None,
            responses: None,
            input_parameters: Vec::new(),
        }
    }

    /// The call a model makes to another for this request (an ensemble's
    /// step, a graph's step, an application's candidate): the request's
    /// parameters, deadline, priority and trace, on a clock of its own; no
    /// stream, no inputs' parameters.
    pub fn onward(&self) -> CallContext {
        CallContext {
            started: Instant::now(),
            parameters: self.parameters.clone(),
            deadline: self.deadline,
            priority: self.priority,
            timeout: self.timeout,
            trace: self.trace.clone(),
            responses: None,
            input_parameters: Vec::new(),
        }
    }
}

/// What a request gets back from its model.
#[derive(Debug)]
pub struct Answer {
    /// The outputs asked for, in the request's order.
    pub outputs: Vec<Tensor>,
    /// The outputs are the model's defaults: it would have missed its
    /// latency objective.
    pub default: bool,
}

/// Where a request's time went in its scheduler, whether it was answered
/// or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Waiting for a slot (or a batch).
    pub queue: Duration,
    /// The model's compute.
    pub compute: Duration,
    /// The rows of the batch the request ran in; 0 when the model does not
    /// batch.
    pub batch: usize,
}

/// Why an answer is the default, in Clipper's words.
pub const DEFAULT_EXPLANATION: &str =
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
pub struct Counters {
    /// Whether executions are counted here: the model batches.
    batching: bool,
    /// Executions of the model (counted when it batches).
    pub executions: AtomicU64,
    /// Requests answered with the model's defaults.
    pub defaults: AtomicU64,
    /// Requests whose queue timeout passed.
    pub timeouts: AtomicU64,
    /// The adaptive batcher's size now.
    pub batch_size: AtomicUsize,
    /// Per batch size (rows): executions and their stage times.
    pub batches: Mutex<std::collections::BTreeMap<usize, BatchTally>>,
}

/// The executions of one batch size.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchTally {
    /// Executions of this size.
    pub count: u64,
    /// Joining the inputs.
    pub input_ns: u64,
    /// The model's compute.
    pub infer_ns: u64,
    /// Cutting the outputs.
    pub output_ns: u64,
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
