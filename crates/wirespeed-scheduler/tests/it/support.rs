//! A gated model, a scheduler around it, and the scheduler's log events,
//! so that each test holds a model's computes where it wants them and
//! waits for the event it means (a compute started, a request queued), not
//! for a sleep.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};
use wirespeed_core::{
    CpuPool, DataType, Error, ErrorKind, Execution, InferCall, InferFuture, Model, ModelMetadata,
    Parameters, Tensor, TensorData, TensorSpec,
};
use wirespeed_scheduler::{CallContext, QueueThread, Scheduler, Scheduling, Spent};

/// How long a wait may take before the test fails: a safety net for a
/// broken scheduler, never a timing the test relies on.
pub(crate) const SAFETY: Duration = Duration::from_secs(30);

/// What the gated model's computes have done so far.
#[derive(Default, Debug)]
pub(crate) struct GateState {
    pub(crate) started: usize,
    pub(crate) finished: usize,
    pub(crate) running: usize,
    pub(crate) most_running: usize,
    /// Async computes dropped before they ended (every caller left).
    pub(crate) cancelled: usize,
    /// The first input's values of each compute, in the order they began.
    pub(crate) computed: Vec<Vec<f32>>,
    released: usize,
}

/// Shared by a test and its gated model.
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// For the async entry point: computes let go.
    released: tokio::sync::Semaphore,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            state: Mutex::default(),
            changed: Condvar::new(),
            released: tokio::sync::Semaphore::new(0),
        }
    }
}

impl Gate {
    /// Lets `n` computes finish.
    pub(crate) fn release(&self, n: usize) {
        self.state.lock().unwrap().released += n;
        self.released.add_permits(n);
        self.changed.notify_all();
    }

    /// Waits until `done` holds of the state, off the async workers.
    pub(crate) fn wait_until(&self, what: &str, done: impl Fn(&GateState) -> bool) {
        tokio::task::block_in_place(|| {
            let state = self.state.lock().unwrap();
            let (state, timeout) = self
                .changed
                .wait_timeout_while(state, SAFETY, |s| !done(s))
                .unwrap();
            assert!(!timeout.timed_out(), "waited for {what}: {state:?}");
        });
    }

    /// A snapshot.
    pub(crate) fn read<T>(&self, f: impl Fn(&GateState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    fn start(&self, inputs: &[Tensor]) -> usize {
        let mut s = self.state.lock().unwrap();
        if let Some(TensorData::Fp32(v)) = inputs.first().map(|t| &t.data) {
            s.computed.push(v.clone());
        }
        s.started += 1;
        s.running += 1;
        s.most_running = s.most_running.max(s.running);
        self.changed.notify_all();
        s.started
    }

    fn end(&self, cancelled: bool) {
        let mut s = self.state.lock().unwrap();
        s.running -= 1;
        if cancelled {
            s.cancelled += 1;
        } else {
            s.finished += 1;
        }
        self.changed.notify_all();
    }
}

/// An identity model (output `y` echoes input `x`, FP32, every dimension
/// variable) whose every compute counts itself and waits for the gate.
pub(crate) struct Gated {
    metadata: ModelMetadata,
    gate: Arc<Gate>,
    execution: Execution,
    /// Every compute fails with this message, once released.
    fail: Option<String>,
    /// Every compute panics, once released.
    panic: bool,
}

impl Gated {
    /// A model `name` of `rank` dimensions computing on `execution`.
    pub(crate) fn new(name: &str, rank: usize, execution: Execution, gate: &Arc<Gate>) -> Gated {
        let spec = |name: &str| TensorSpec {
            optional: false,
            name: name.into(),
            datatype: DataType::Fp32,
            shape: vec![-1; rank],
        };
        Gated {
            metadata: ModelMetadata {
                name: name.into(),
                versions: vec!["1".into()],
                platform: "gated".into(),
                inputs: vec![spec("x")],
                outputs: vec![spec("y")],
            },
            gate: Arc::clone(gate),
            execution,
            fail: None,
            panic: false,
        }
    }

    /// The same model, whose computes fail with `message`.
    pub(crate) fn failing(mut self, message: &str) -> Gated {
        self.fail = Some(message.into());
        self
    }

    /// The same model, whose computes panic.
    pub(crate) fn panicking(mut self) -> Gated {
        self.panic = true;
        self
    }

    fn echo(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        assert!(!self.panic, "the model's code panicked");
        if let Some(message) = &self.fail {
            return Err(Error::new(ErrorKind::BadGateway, message.clone()));
        }
        Ok(vec![Tensor {
            name: "y".into(),
            ..inputs[0].clone()
        }])
    }
}

/// Counts an async compute as cancelled if it is dropped before it ends.
struct Computing<'a> {
    gate: &'a Gate,
    ended: bool,
}

impl Drop for Computing<'_> {
    fn drop(&mut self) {
        self.gate.end(!self.ended);
    }
}

impl Model for Gated {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn execution(&self, _: usize) -> Execution {
        self.execution
    }

    fn infer(&self, inputs: &[Tensor], _: &[usize]) -> Result<Vec<Tensor>, Error> {
        let n = self.gate.start(inputs);
        let state = self.gate.state.lock().unwrap();
        let state = self
            .gate
            .changed
            .wait_while(state, |s| s.released < n)
            .unwrap();
        drop(state);
        self.gate.end(false);
        self.echo(inputs)
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        let inputs = call.inputs;
        Box::pin(async move {
            self.gate.start(&inputs);
            let mut computing = Computing {
                gate: &self.gate,
                ended: false,
            };
            let permit = self.gate.released.acquire().await;
            permit.expect("never closed").forget();
            computing.ended = true;
            drop(computing);
            self.echo(&inputs)
        })
    }
}

/// The scheduler of `model`, with `concurrency` slots and room for
/// `max_queue` waiting requests, on a queue thread and a CPU pool of its
/// own.
pub(crate) fn scheduler(
    model: Gated,
    concurrency: usize,
    max_queue: usize,
    scheduling: Scheduling,
) -> Arc<Scheduler> {
    events();
    let pool = CpuPool::new(4).expect("the pool's threads start");
    let queues = QueueThread::start().expect("the queue thread starts");
    Arc::new(Scheduler::start(
        Arc::new(model),
        concurrency,
        max_queue,
        scheduling,
        pool,
        &queues,
    ))
}

/// An FP32 input `x` of `shape` holding `values`.
pub(crate) fn input(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor {
        name: "x".into(),
        shape: shape.to_vec(),
        data: TensorData::Fp32(values.to_vec()),
        parameters: Vec::new(),
    }
}

/// A request's answer: its outputs' values, whether they are the defaults,
/// and where its time went; or the error.
pub(crate) type Outcome = (Result<(Vec<f32>, bool), Error>, Spent);

/// Sends `x` of `shape` with `context` to `scheduler`, as a task that
/// holds the request until its answer (or until the task is aborted: the
/// caller leaves).
pub(crate) fn send(
    scheduler: &Arc<Scheduler>,
    shape: &[usize],
    x: &[f32],
    context: CallContext,
) -> tokio::task::JoinHandle<Outcome> {
    let scheduler = Arc::clone(scheduler);
    let inputs = vec![input(shape, x)];
    tokio::spawn(async move {
        let mut spent = Spent::default();
        let answer = scheduler.run(inputs, &[], context, &mut spent).await;
        let answer = answer.map(|a| match &a.outputs[0].data {
            TensorData::Fp32(v) => (v.clone(), a.default),
            other => panic!("an FP32 answer, not {other:?}"),
        });
        (answer, spent)
    })
}

/// A request context with `parameters` set (what a batch must share).
pub(crate) fn with_parameters(parameters: Parameters) -> CallContext {
    CallContext {
        parameters,
        ..CallContext::now()
    }
}

/// Waits for a task's outcome.
pub(crate) async fn outcome(task: tokio::task::JoinHandle<Outcome>) -> Outcome {
    tokio::time::timeout(SAFETY, task)
        .await
        .expect("the request ends")
        .expect("the request's task does not panic")
}

/// The scheduler's log events, as lines of text, for every scheduler in
/// this test binary (each test names its own model).
pub(crate) struct Events {
    lines: Mutex<VecDeque<String>>,
    added: Condvar,
}

impl Events {
    /// Waits until `count` events hold every one of `parts`.
    pub(crate) fn wait_for_n(&self, parts: &[&str], count: usize) {
        tokio::task::block_in_place(|| {
            let lines = self.lines.lock().unwrap();
            let (lines, timeout) = self
                .added
                .wait_timeout_while(lines, SAFETY, |lines| {
                    lines
                        .iter()
                        .filter(|l| parts.iter().all(|p| l.contains(p)))
                        .count()
                        < count
                })
                .unwrap();
            assert!(
                !timeout.timed_out(),
                "no {count} events with {parts:?} in {lines:#?}"
            );
        });
    }

    /// Waits for an event with every one of `parts`.
    pub(crate) fn wait_for(&self, parts: &[&str]) {
        self.wait_for_n(parts, 1);
    }
}

/// Waits until `count` requests of model `name` have joined its queue.
pub(crate) fn wait_queued(name: &str, count: usize) {
    events().wait_for_n(&["queued", &format!("model={name} ")], count);
}

struct Capture(&'static Events);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("wirespeed_scheduler") {
            return;
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        // A space after the last field, so `model=a ` does not match `ab`.
        line.0.push(' ');
        let mut lines = self.0.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.push_back(line.0);
        self.0.added.notify_all();
    }
}

/// The events of every scheduler in this test binary.
pub(crate) fn events() -> &'static Events {
    static EVENTS: OnceLock<&'static Events> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let events: &'static Events = Box::leak(Box::new(Events {
            lines: Mutex::new(VecDeque::new()),
            added: Condvar::new(),
        }));
        let subscriber = Registry::default()
            .with(Capture(events).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        events
    })
}
