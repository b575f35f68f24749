//! A decoupled model's worker, as its keeper serves it: requests go to the
//! worker one at a time (the next once `execute` has returned), while a
//! reader thread takes the worker's messages as they come — the
//! responses of every request still streaming (the model's threads may
//! send long after `execute` returned), `executed`, and BLS calls — and
//! hands each response to its request's stream.
//!
//! Backpressure: the reader sends into a request's bounded stream and
//! waits while it is full, so it stops reading the socket, the socket's
//! buffer fills, and the model's `send` waits: a slow client slows its
//! model, memory stays bounded. A client that leaves fails the next send:
//! the reader tells the worker (`cancel`, which `is_cancelled()` reads),
//! and drops the request's later responses.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;

use crossbeam_channel::RecvTimeoutError;
use std::sync::{Arc, Mutex};

use wirespeed_core::{Error, ResponseSender};

use super::keeper::{gather, Inbox, Job, HEALTH_CHECK};
use super::process::{ended, model_error, outputs_from, Launch, Process};
use super::wire::{self, Reply};

/// A request whose responses are still coming.
struct Open {
    sender: ResponseSender,
    /// The outputs it asked for, in order.
    wanted: Vec<usize>,
    /// Its client left; the worker was told.
    cancelled: bool,
}

/// What the reader tells the keeper.
enum Event {
    /// `execute` returned for request `id`, or raised.
    Executed(u64, Result<(), Error>),
    /// The worker is gone: why.
    Lost(String),
}

type Streams = Arc<Mutex<HashMap<u64, Open>>>;

/// Serves jobs from `queue` on `process` until the worker is lost (why)
/// or the model is dropped (`None`).
pub(crate) fn serve(launch: &Arc<Launch>, queue: &Inbox, process: &mut Process) -> Option<String> {
    let sockets = process.socket().and_then(|r| Ok((r, process.socket()?)));
    let (reading, writing) = match sockets {
        Ok(pair) => pair,
        Err(e) => return Some(format!("model '{}': its socket: {e}", launch.model)),
    };
    let writer = Arc::new(Mutex::new(writing));
    let streams: Streams = Arc::default();
    let (events, heard) = mpsc::channel();
    let reader = Reader {
        launch: Arc::clone(launch),
        socket: reading,
        writer: Arc::clone(&writer),
        streams: Arc::clone(&streams),
        events,
        pid: process.pid,
    };
    let spawned = std::thread::Builder::new()
        .name(format!("python-{}-reader", launch.model))
        .spawn(move || reader.run());
    if let Err(e) = spawned {
        return Some(format!("model '{}': a reader thread: {e}", launch.model));
    }
    let mut next_id = 0u64;
    // A job taken while gathering a batch it would overflow: the next
    // batch's first.
    let mut carried: Option<Job> = None;
    loop {
        let next = match carried.take() {
            Some(job) => Ok(job),
            None => queue.next(HEALTH_CHECK, std::time::Duration::ZERO),
        };
        let job = match next {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                if let Ok(Event::Lost(reason)) = heard.try_recv() {
                    return Some(reason);
                }
                tell_cancelled(&streams, &writer);
                if let Some(status) = process.exited() {
                    return Some(format!(
                        "model '{}': its Python worker (pid {}) {} while idle; it is being restarted",
                        launch.model,
                        process.pid,
                        ended(Some(status))
                    ));
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return None,
        };
        // Triton's dynamic batcher: the requests of a batch, for one call
        // of `execute`.
        let jobs = match &launch.batch {
            Some(window) => {
                let (batch, over) = gather(queue, job, window, true);
                carried = over;
                batch
            }
            None => vec![job],
        };
        let mut batch = Vec::with_capacity(jobs.len());
        for job in jobs {
            let Some(sender) = job.responses.clone() else {
                let _ = job.reply.send(Err(Error::internal(
                    "a decoupled model's request came without its stream",
                )));
                continue;
            };
            if job.reply.is_closed() || sender.is_closed() {
                continue; // the caller left while it waited
            }
            next_id += 1;
            streams.lock().unwrap_or_else(|e| e.into_inner()).insert(
                next_id,
                Open {
                    sender,
                    wanted: job.outputs.clone(),
                    cancelled: false,
                },
            );
            batch.push((next_id, job));
        }
        if batch.is_empty() {
            continue;
        }
        let started = std::time::Instant::now();
        let rows: usize = batch.iter().map(|(_, job)| super::keeper::rows(job)).sum();
        let sent = process.send_requests(launch, &mut batch, &writer);
        let used = match sent {
            Ok(used) => used,
            Err(error) => {
                let reason = error.message().to_owned();
                for (id, job) in batch {
                    streams
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                    let _ = job.reply.send(Err(error.clone()));
                }
                return Some(reason);
            }
        };
        // Until `execute` returns for each (their responses flow meanwhile).
        while !batch.is_empty() {
            match heard.recv_timeout(HEALTH_CHECK) {
                Ok(Event::Executed(done, result)) => {
                    if let Some(at) = batch.iter().position(|(id, _)| *id == done) {
                        let (_, job) = batch.swap_remove(at);
                        let _ = job.reply.send(result.map(|()| Vec::new()));
                    }
                }
                Ok(Event::Lost(reason)) => {
                    for (_, job) in batch {
                        let _ = job.reply.send(Err(Error::model_failed(reason.clone())));
                    }
                    return Some(reason);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => tell_cancelled(&streams, &writer),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Some(format!("model '{}': its reader thread ended", launch.model))
                }
            }
        }
        process.settle_inputs(used);
        if launch.batch.is_some() {
            launch.executions.count(rows, started.elapsed());
        }
    }
}

/// Tells the worker of each stream whose client has left (a cancelled
/// call, a closed connection) before a send failed on it: the model's
/// `is_cancelled()` turns true while it computes, as in Triton.
fn tell_cancelled(streams: &Streams, writer: &Mutex<UnixStream>) {
    let mut left = Vec::new();
    for (id, open) in streams.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
        if !open.cancelled && open.sender.is_closed() {
            open.cancelled = true;
            left.push(*id);
        }
    }
    for id in left {
        let mut socket = writer.lock().unwrap_or_else(|e| e.into_inner());
        let _ = wire::send(&mut socket, &serde_json::json!({"op": "cancel", "id": id}));
    }
}

/// The worker's next message. An idle worker sends nothing for as long as
/// no request comes, so the wait for a message is unbounded (the worker's
/// end is seen as EOF); the socket's read timeout bounds a message once it
/// has begun.
fn next_message(socket: &mut UnixStream) -> std::io::Result<(Reply, Vec<u8>)> {
    super::process::wait_readable(socket, None)?;
    wire::receive(socket)
}

/// The thread that reads a decoupled worker's messages.
struct Reader {
    launch: Arc<Launch>,
    socket: UnixStream,
    writer: Arc<Mutex<UnixStream>>,
    streams: Streams,
    events: mpsc::Sender<Event>,
    pid: u32,
}

impl Reader {
    fn run(mut self) {
        let reason = loop {
            if let Err(reason) = self.next() {
                break reason;
            }
        };
        // Every open stream ends with the worker's error, when it has
        // room for it; the stream ends either way.
        let error = Error::model_failed(reason.clone());
        for (_, open) in self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = open.sender.try_send(Err(error.clone()), true);
        }
        let _ = self.events.send(Event::Lost(reason));
    }

    /// Reads and handles one message; why the worker is lost when it is.
    fn next(&mut self) -> Result<(), String> {
        let model = &self.launch.model;
        let lost = |what: String| {
            format!(
                "model '{model}': its Python worker (pid {}) {what}; it is being restarted",
                self.pid
            )
        };
        let (reply, payload) = match next_message(&mut self.socket) {
            Ok(frame) => frame,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(lost("died".into()))
            }
            Err(e) => return Err(lost(format!("sent a bad message ({e})"))),
        };
        match reply {
            Reply::Response {
                id,
                last,
                outputs,
                error,
                kind,
                empty,
                metrics,
            } => {
                super::metrics::apply(model, metrics);
                self.respond(
                    id,
                    last,
                    empty,
                    error.map(|e| (kind, e)),
                    &outputs,
                    &payload,
                );
            }
            Reply::Executed { id, metrics } => {
                super::metrics::apply(model, metrics);
                let _ = self.events.send(Event::Executed(id, Ok(())));
            }
            Reply::Error {
                kind,
                error,
                metrics,
                id: Some(id),
            } => {
                // `execute` raised: the request's error, and its stream ends.
                super::metrics::apply(model, metrics);
                self.streams
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                let error = model_error(model, &kind, error);
                let _ = self.events.send(Event::Executed(id, Err(error)));
            }
            Reply::Metric {
                metric,
                pending,
                call,
            } => {
                let answer = super::metrics::answer(model, metric, pending, call);
                let mut socket = self.writer.lock().unwrap_or_else(|e| e.into_inner());
                // A worker that does not read it is seen as lost by this
                // reader.
                let _ = wire::send(&mut socket, &answer);
            }
            Reply::Bls(call) => {
                // On a thread of its own, so this reader goes on with the
                // streams' responses and the model's other calls run at
                // once (a coroutine `execute` awaiting several). Which
                // request's code calls is not known here: the call ends
                // at its own timeout, or with the callee.
                let (launch, writer) = (Arc::clone(&self.launch), Arc::clone(&self.writer));
                let run = move || {
                    let number = call.call;
                    let (mut answer, out) = super::bls::call(
                        &launch,
                        call,
                        super::bls::Carried::Frame(payload),
                        None,
                        std::pin::pin!(std::future::pending()),
                    );
                    answer.call = number;
                    let mut socket = writer.lock().unwrap_or_else(|e| e.into_inner());
                    // A worker that does not read it is seen as lost by
                    // this reader.
                    let _ = wire::send_frame(&mut socket, &answer, &out.parts);
                };
                std::thread::Builder::new()
                    .name(format!("python-{model}-bls"))
                    .spawn(run)
                    .map_err(|e| lost(format!("could not be given a BLS thread ({e})")))?;
            }
            other => return Err(lost(format!("sent {other:?}"))),
        }
        Ok(())
    }

    /// Hands one response to its request's stream.
    fn respond(
        &mut self,
        id: u64,
        last: bool,
        empty: bool,
        error: Option<(Option<String>, String)>,
        placed: &[wire::Placed],
        bytes: &[u8],
    ) {
        let model = &self.launch.model;
        let (sender, result) = {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            let Some(open) = streams.get(&id) else {
                return; // a stream already ended
            };
            if open.cancelled || empty {
                if last {
                    streams.remove(&id);
                }
                return;
            }
            let result = match error {
                Some((kind, error)) => {
                    Err(model_error(model, kind.as_deref().unwrap_or(""), error))
                }
                None => outputs_from(&self.launch, &open.wanted, placed, bytes, true),
            };
            let sender = if last {
                streams.remove(&id).map(|open| open.sender)
            } else {
                Some(open.sender.clone())
            };
            (sender, result)
        };
        let Some(sender) = sender else { return };
        // Waits while the client reads slower than the model sends.
        if sender.send_blocking(result, last).is_err() && !last {
            if let Some(open) = self
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&id)
            {
                open.cancelled = true;
            }
            tracing::debug!(model = %model, request = id, "the client left a stream; the model is told");
            let mut socket = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            let _ = wire::send(&mut socket, &serde_json::json!({"op": "cancel", "id": id}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A decoupled worker is idle between requests for as long as no
    /// client asks: its reader must not take the socket's read timeout,
    /// which bounds one message, for a worker gone wrong.
    #[test]
    fn an_idle_worker_is_waited_for_past_the_read_timeout() {
        let (mut ours, mut worker) = UnixStream::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let sender = std::thread::spawn(move || {
            // Idle for many read timeouts, then one message.
            std::thread::sleep(Duration::from_millis(300));
            wire::send(&mut worker, &serde_json::json!({"op": "executed", "id": 7})).unwrap();
            worker
        });
        match next_message(&mut ours).unwrap().0 {
            Reply::Executed { id, .. } => assert_eq!(id, 7),
            other => panic!("expected the executed message, got {other:?}"),
        }
        // The worker's end is still seen, as EOF.
        drop(sender.join().unwrap());
        let gone = next_message(&mut ours).unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    /// A message that stops half-way is still bounded by the read timeout.
    #[test]
    fn a_message_that_stops_half_way_times_out() {
        use std::io::Write;
        let (mut ours, mut worker) = UnixStream::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        worker.write_all(&100u32.to_le_bytes()).unwrap();
        worker.write_all(b"{\"op\":").unwrap();
        let stuck = next_message(&mut ours).unwrap_err();
        assert!(matches!(
            stuck.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));
        drop(worker);
    }
}
