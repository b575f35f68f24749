//! One Python worker process: started with its socket and three segments
//! (its requests' inputs, their outputs, its calls of other models),
//! loaded, asked one message at a time (a request, or several in
//! `process/batch.rs`), stopped.
//!
//! Unsafe code: descriptor placement and signals between fork and exec, `kill` and `poll` (libc).

#![allow(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod answer;
mod batch;
mod names;
mod output;
mod start;
pub(crate) use answer::{model_error, outputs_from};
pub(crate) use batch::{BatchWindow, Calls, Place};

use wirespeed_core::{Error, Tensor, TensorSpec};

use super::segment::{aligned, CallSegment, InputSegment, OutputSegment};
use super::wire::{self, Infer, Reply};

/// The worker's program, sent on its socket before anything else.
const WORKER: &str = concat!(
    include_str!("channel.py"),
    "\n",
    include_str!("stub.py"),
    "\n",
    include_str!("peers.py"),
    "\n",
    include_str!("decoupled.py"),
    "\n",
    include_str!("worker.py")
);

/// What `python -c` runs: reads the worker's program from the socket and
/// runs it (so that `ps` shows a short command line, not the program).
const BOOTSTRAP: &str = "import os, struct
def read(n):
    b = b''
    while len(b) < n:
        c = os.read(3, n - len(b))
        if not c:
            raise SystemExit(0)
        b += c
    return b
exec(compile(read(struct.unpack('<I', read(4))[0]), 'wirespeed_worker.py', 'exec'))
";

/// How long a worker interrupted at a request's deadline has to answer
/// before it is killed and replaced.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How often a computing request's caller is looked at, to tell the model
/// it left.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// How long a message may take to cross the socket once begun (or to be
/// taken by the worker, when the server sends).
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping worker has to run its `finalize` and exit.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How to start a worker: the same for every instance of a model.
#[derive(Debug)]
pub(crate) struct Launch {
    /// The model, for messages.
    pub(crate) model: String,
    /// The interpreter: a command or a path.
    pub(crate) python: String,
    /// Environment variables set for the worker.
    pub(crate) env: Vec<(String, String)>,
    /// The `load` message, encoded once.
    pub(crate) load: serde_json::Value,
    /// How long loading may take.
    pub(crate) load_timeout: Duration,
    /// The declared outputs, by index.
    pub(crate) outputs: Vec<TensorSpec>,
    /// The model answers the outputs it produces (MLServer's and KServe's
    /// APIs): a request that asks for none gets them all, as the worker
    /// placed them.
    pub(crate) open: bool,
    /// An output's shape is the one the model produced, not checked
    /// against the declared one: Triton's Python backend checks none
    /// (a batched model may answer `[n]` for a declared `[-1, 1]`), nor
    /// does MLServer (its codecs answer `[1, 1]` for a declared `[1]`).
    pub(crate) shapes_as_produced: bool,
    /// A Triton model with dynamic batching: its keepers gather a batch's
    /// requests for one call of `execute`.
    pub(crate) batch: Option<BatchWindow>,
    /// The batches its keepers ran, when they gather them.
    pub(crate) executions: std::sync::Arc<wirespeed_core::Executions>,
    /// The server's caller, for the model's BLS calls.
    pub(crate) caller: wirespeed_backend::CallerSlot,
    /// How long a keeper looks for its next request, and for its worker's
    /// answer, before it sleeps ([`linger`]); the worker lingers as long
    /// for its next request.
    pub(crate) linger: Duration,
}

impl Launch {
    /// The `load` message of worker `instance`, with its name as Triton
    /// names a model's instances: `<group>_<n>`, the `n`th of its instance
    /// group (`<model>_<g>` when the configuration leaves the group
    /// unnamed, `<model>` for the group Triton adds to a configuration
    /// without one). A model's `initialize` reads it in
    /// `args["model_instance_name"]`, and its errors carry it.
    fn load_for(&self, instance: usize) -> serde_json::Value {
        let mut load = self.load.clone();
        if let Some(args) = load.get_mut("triton_args").and_then(|a| a.as_object_mut()) {
            let groups = args
                .get("model_config")
                .and_then(|c| c.as_str())
                .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
                .and_then(|c| c.get("instance_group").cloned());
            let name = names::instance_name(groups.as_ref(), &self.model, instance);
            args.insert("model_instance_name".into(), name.into());
        }
        load
    }
}

/// Why a worker did not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The model's code raised while loading: its traceback. Starting it
    /// again would raise again.
    Load(String),
    /// The interpreter could not be started at all (no such file): the
    /// config's mistake, when it happens at load.
    Spawn(String),
    /// The process died or hung while loading, or a resource for it could
    /// not be made.
    Process(String),
}

/// How a request failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The model's code failed; the worker is fine.
    Model(Error),
    /// The worker is gone (it died, or was killed at a deadline): restart it.
    Lost(Error),
}

/// A running worker.
pub(crate) struct Process {
    child: Child,
    socket: UnixStream,
    inputs: InputSegment,
    outputs: OutputSegment,
    /// Where the model's calls of other models put their tensors.
    calls: CallSegment,
    pub(crate) pid: u32,
    /// The model answers with streams (`decoupled.rs` serves it).
    pub(crate) decoupled: bool,
    /// The metadata the model's own server answers, as JSON (an MLServer
    /// runtime's `metadata()`), as the worker said when it loaded.
    pub(crate) metadata: Option<String>,
    /// How long the keeper looks for the worker's next answer before it
    /// sleeps (`super::process::linger`): the keeper sets it per message.
    pub(crate) answer_linger: Duration,
    /// The worker mapped the shared heap: inputs there are not copied.
    pub(crate) heap: bool,
}

impl Process {
    /// Whether the process has ended, and how.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Runs one request: inputs into the input segment, the request to the
    /// worker, its answer read from the output segment. Past `deadline`
    /// the worker is interrupted, and replaced if it does not answer.
    pub(crate) fn infer(
        &mut self,
        launch: &Launch,
        inputs: &[Tensor],
        outputs: &[usize],
        parameters: serde_json::Map<String, serde_json::Value>,
        deadline: Option<Instant>,
        gone: wirespeed_backend::CallerGone<'_>,
    ) -> Result<Vec<Tensor>, CallError> {
        let lost = |process: &mut Process, what: String| process.lost(launch, what);
        let (placed, used) = self
            .write_inputs(inputs)
            .map_err(|e| CallError::Model(Error::internal(format!("shared memory: {e}"))))?;
        let message = self.message(launch, inputs, &placed, outputs, parameters, None);
        let reply = self.exchange(launch, &message, deadline, gone)?;
        self.inputs.settle(used);
        match reply {
            Reply::Done {
                outputs: placed,
                metrics,
            } => {
                super::metrics::apply(&launch.model, metrics);
                let read = self.read_outputs(launch, outputs, &placed);
                self.outputs.settle(wire::Placed::extent(&placed));
                read.map_err(CallError::Model)
            }
            Reply::Error {
                kind,
                error,
                metrics,
                ..
            } => {
                super::metrics::apply(&launch.model, metrics);
                Err(CallError::Model(model_error(&launch.model, &kind, error)))
            }
            other => {
                self.kill();
                Err(lost(
                    self,
                    format!("answered {other:?} to a request, and was killed"),
                ))
            }
        }
    }

    /// Sends `message` and waits for the worker's answer to it, answering
    /// the BLS calls the model makes meanwhile.
    fn exchange(
        &mut self,
        launch: &Launch,
        message: &impl serde::Serialize,
        deadline: Option<Instant>,
        mut gone: wirespeed_backend::CallerGone<'_>,
    ) -> Result<Reply, CallError> {
        let lost = |process: &mut Process, what: String| process.lost(launch, what);
        if wire::send(&mut self.socket, message).is_err() {
            self.kill();
            return Err(lost(
                self,
                "before it took this request (it did not read it), and was killed".into(),
            ));
        }
        let mut told = false;
        loop {
            self.await_answer(launch, deadline, &mut gone, &mut told)?;
            let (reply, payload) = match wire::receive(&mut self.socket) {
                Ok(frame) => frame,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(lost(self, "while computing this request".into()))
                }
                Err(e) => {
                    self.kill();
                    return Err(lost(
                        self,
                        format!("sent a bad answer ({e}), and was killed"),
                    ));
                }
            };
            // The model calls another (BLS), or uses its metrics: answer
            // it, and wait again.
            let sent = match reply {
                Reply::Bls(call) => {
                    // Once the caller left (its future is spent), the call
                    // is cancelled at once.
                    let mut left =
                        std::pin::pin!(std::future::poll_fn(|_| std::task::Poll::Ready(())));
                    let caller_gone: wirespeed_backend::CallerGone<'_> =
                        if told { left.as_mut() } else { gone.as_mut() };
                    let (answer, out) = super::bls::call_through(
                        launch,
                        call,
                        payload,
                        &mut self.calls,
                        deadline,
                        caller_gone,
                    );
                    wire::send_frame(&mut self.socket, &answer, &out.parts)
                }
                Reply::Metric {
                    metric,
                    pending,
                    call,
                } => wire::send(
                    &mut self.socket,
                    &super::metrics::answer(&launch.model, metric, pending, call),
                ),
                reply => return Ok(reply),
            };
            if sent.is_err() {
                self.kill();
                return Err(lost(
                    self,
                    "while it called the server (it did not read the answer), and was killed"
                        .into(),
                ));
            }
        }
    }

    /// Waits for the worker's answer to be readable. When the request's
    /// caller goes, the worker is told once (`cancel`; the model's
    /// `request.is_cancelled()` turns true, as in Triton). Past
    /// `deadline` the model's code is interrupted (SIGINT, a
    /// KeyboardInterrupt), and the worker killed if it does not answer
    /// within [`INTERRUPT_GRACE`].
    fn await_answer(
        &mut self,
        launch: &Launch,
        deadline: Option<Instant>,
        gone: &mut wirespeed_backend::CallerGone<'_>,
        told: &mut bool,
    ) -> Result<(), CallError> {
        if self.linger_for_answer(self.answer_linger) {
            return Ok(());
        }
        let readable = loop {
            let look = Instant::now() + CANCEL_CHECK;
            let until = if *told {
                deadline
            } else {
                Some(deadline.map_or(look, |d| d.min(look)))
            };
            match self.wait_readable(until) {
                Ok(false) if until != deadline => {
                    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
                    if gone.as_mut().poll(&mut context).is_ready() {
                        *told = true;
                        let cancel = serde_json::json!({"op": "cancel"});
                        if wire::send(&mut self.socket, &cancel).is_err() {
                            return Err(
                                self.lost(launch, "failed: it did not read a cancel".into())
                            );
                        }
                    }
                }
                other => break other,
            }
        };
        match readable {
            Ok(true) => {}
            Ok(false) => {
                // Past the deadline: interrupt the model's code.
                tracing::warn!(
                    model = %launch.model,
                    pid = self.pid,
                    "a request ran past its deadline: interrupting the model's Python code"
                );
                // SAFETY: signalling our own child.
                unsafe { libc::kill(self.pid as i32, libc::SIGINT) };
                if !matches!(
                    self.wait_readable(Some(Instant::now() + INTERRUPT_GRACE)),
                    Ok(true)
                ) {
                    self.kill();
                    return Err(self.lost(
                        launch,
                        format!(
                            "did not stop within {INTERRUPT_GRACE:?} of the request's deadline, and was killed"
                        ),
                    ));
                }
            }
            Err(e) => return Err(self.lost(launch, format!("failed: {e}"))),
        }
        Ok(())
    }

    /// The error for a worker lost while serving a request (`what` it
    /// did), after reaping it.
    fn lost(&mut self, launch: &Launch, what: String) -> CallError {
        let status = self.reap();
        CallError::Lost(Error::model_failed(format!(
            "model '{}': its Python worker (pid {}) {} {what}; it is being restarted",
            launch.model,
            self.pid,
            ended(status)
        )))
    }

    /// Sends a decoupled model's request `id` through `writer` (the
    /// socket, shared with the thread that reads the worker's answers):
    /// inputs into the input segment, which the worker copies out before
    /// its `executed`, when [`settle`](Self::settle_inputs) may reuse it.
    pub(crate) fn send_request(
        &mut self,
        launch: &Launch,
        id: u64,
        inputs: &[Tensor],
        outputs: &[usize],
        parameters: serde_json::Map<String, serde_json::Value>,
        writer: &std::sync::Mutex<UnixStream>,
    ) -> Result<usize, Error> {
        let (placed, used) = self
            .write_inputs(inputs)
            .map_err(|e| Error::internal(format!("shared memory: {e}")))?;
        let message = self.message(launch, inputs, &placed, outputs, parameters, Some(id));
        self.hand_over(launch, &message, writer)?;
        Ok(used)
    }

    /// Sends a decoupled model's `message` through `writer` (the socket,
    /// shared with the thread that reads the worker's answers).
    fn hand_over(
        &self,
        launch: &Launch,
        message: &impl serde::Serialize,
        writer: &std::sync::Mutex<UnixStream>,
    ) -> Result<(), Error> {
        let mut socket = writer.lock().unwrap_or_else(|e| e.into_inner());
        wire::send(&mut socket, message).map_err(|e| {
            Error::model_failed(format!(
                "model '{}': its Python worker (pid {}) did not take the request ({e})",
                launch.model, self.pid
            ))
        })
    }

    /// The `infer` message for `inputs`, placed in the input segment at
    /// `placed`; `id` numbers a decoupled model's request.
    fn message<'a>(
        &self,
        launch: &'a Launch,
        inputs: &'a [Tensor],
        placed: &[Place],
        outputs: &[usize],
        parameters: serde_json::Map<String, serde_json::Value>,
        id: Option<u64>,
    ) -> Infer<'a> {
        Infer {
            op: "infer",
            size: self.inputs.len(),
            inputs: inputs
                .iter()
                .zip(placed)
                .map(|(t, place)| {
                    (
                        t.name.as_str(),
                        t.datatype().as_str(),
                        &t.shape[..],
                        place.offset,
                        place.len,
                        place.heap,
                    )
                })
                .collect(),
            outputs: outputs
                .iter()
                .map(|&i| launch.outputs[i].name.as_str())
                .collect(),
            parameters,
            id,
            // A decoupled model's outputs come on the socket.
            out: match id {
                Some(_) => None,
                None => wire::OutputPlacement::of(self.outputs.place()),
            },
        }
    }

    /// The input segment's first `used` bytes are free again.
    pub(crate) fn settle_inputs(&mut self, used: usize) {
        self.inputs.settle(used);
    }

    /// Another handle on the worker's socket.
    pub(crate) fn socket(&self) -> io::Result<UnixStream> {
        self.socket.try_clone()
    }

    /// Copies the inputs into the segment, each at an aligned offset (but
    /// those in the shared heap); returns where each lies, and the
    /// segment's bytes used.
    fn write_inputs(&mut self, inputs: &[Tensor]) -> io::Result<(Vec<Place>, usize)> {
        let (mut placed, used) = self.write_groups(&[inputs])?;
        Ok((placed.pop().unwrap_or_default(), used))
    }

    /// The outputs the worker placed, checked against the declared ones,
    /// in the order `wanted` asks.
    fn read_outputs(
        &mut self,
        launch: &Launch,
        wanted: &[usize],
        placed: &[wire::Placed],
    ) -> Result<Vec<Tensor>, Error> {
        self.outputs
            .reach(wire::Placed::extent(placed))
            .map_err(|e| Error::model_failed(format!("model '{}': {e}", launch.model)))?;
        outputs_from(launch, wanted, placed, &self.outputs, false)
    }

    /// Waits until the worker has written something (true), or the
    /// deadline passed (false).
    fn wait_readable(&self, deadline: Option<Instant>) -> io::Result<bool> {
        wait_readable(&self.socket, deadline)
    }

    /// Looks for the worker's answer for up to `linger`, giving the core
    /// to whatever else is runnable between looks: whether it came.
    fn linger_for_answer(&self, linger: Duration) -> bool {
        self::linger(linger, || {
            matches!(self.wait_readable(Some(Instant::now())), Ok(true))
        })
    }

    /// Asks the worker to finalize and exit; kills it if it does not.
    pub(crate) fn stop(mut self) {
        if wire::send(&mut self.socket, &serde_json::json!({"op": "stop"})).is_ok() {
            let until = Instant::now() + STOP_GRACE;
            while Instant::now() < until {
                if self.exited().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
        self.reap();
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits for the process to end (it has, or was killed).
    fn reap(&mut self) -> Option<ExitStatus> {
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() > until {
                self.kill();
                return self.child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a process ended, for a message: "was killed by signal 9",
/// "exited with status 1", "died".
pub(crate) fn ended(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.signal(), s.code()) {
            (Some(signal), _) => format!("was killed by signal {signal}"),
            (_, Some(code)) => format!("exited with status {code}"),
            _ => "died".into(),
        },
        None => "died".into(),
    }
}

/// Looks for `came` for up to `linger` (a 2-core machine's wake-up of a
/// sleeping thread costs tens of microseconds, a request to a Python
/// model a hundred or two), yielding the core between looks so that the
/// server's other threads, the worker or a neighbour, run meanwhile:
/// whether it came.
pub(crate) fn linger(linger: Duration, mut came: impl FnMut() -> bool) -> bool {
    if linger.is_zero() {
        return false;
    }
    let until = Instant::now() + linger;
    loop {
        if came() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Waits until the worker has written something on `socket` (true), or
/// `deadline` passed (false); forever when there is none. The socket's
/// read timeout bounds a message once it has begun, not the wait for one.
pub(crate) fn wait_readable(socket: &UnixStream, deadline: Option<Instant>) -> io::Result<bool> {
    loop {
        let timeout = match deadline {
            None => -1,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    0 // one look
                } else {
                    left.as_millis().clamp(1, i32::MAX as u128) as i32
                }
            }
        };
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut poll, 1, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 {
            return Ok(true);
        }
        if timeout == 0 {
            return Ok(false);
        }
    }
}
