//! An upstream: one or more replicas of a server, with calls balanced over
//! them and failing replicas set aside.
//!
//! - **Balancing**: each call goes to the admitted replica with the fewest
//!   calls outstanding (counted over every thread), ties taken in turn.
//! - **Passive health**: a replica whose calls fail `eject_after` times in
//!   a row (it cannot be reached, its connection breaks, or it says
//!   UNAVAILABLE) is ejected: no call goes to it, and a probe task asks it
//!   whether it is live, with growing jittered waits (100 ms up to 5 s),
//!   until it answers and is admitted again. While no replica is admitted,
//!   calls fail at once with UNAVAILABLE, and the upstream's
//!   [`status`](Upstream::status) says why.
//! - **Retries**: only when nothing reached the replica (connection
//!   refused, or closed before the request went out), at most `retries`
//!   times, on another replica when there is one, after a short jittered
//!   wait, and never past the deadline. Anything sent is never sent again.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::HeaderMap;
use wirespeed_core::TraceContext;

use crate::address::{Address, Protocol};
use crate::body::{CallBody, Chunks};
use crate::channel::{Channel, ChannelOptions};
use crate::connect::tls_connector;
use crate::error::CallError;
use crate::grpc::{self, Call, OpenCall, OpenRequest};
use crate::rest::{Answer, Http1Channel, Opened};

/// How an upstream is called.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// Connections and keep-alive.
    pub channel: ChannelOptions,
    /// Failures in a row that eject a replica.
    pub eject_after: u32,
    /// Retries of a call that reached nothing.
    pub retries: u32,
    /// The largest answer accepted, in bytes.
    pub max_message_bytes: usize,
    /// Headers sent with every call (a token, say).
    pub headers: HeaderMap,
    /// The CA certificates that sign a TLS upstream's certificate; the
    /// system's when `None`.
    pub ca_file: Option<std::path::PathBuf>,
    /// How an ejected replica is asked whether it is live.
    pub probe: Probe,
}

/// How an ejected replica is asked whether it is live again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Probe {
    /// The Open Inference Protocol's `ServerLive` (over REST,
    /// `/v2/health/live`): an inference server's own word.
    #[default]
    ServerLive,
    /// gRPC's standard health check (`grpc.health.v1.Health/Check`, the
    /// whole server): NOT_SERVING keeps it out; any other answer, even
    /// UNIMPLEMENTED from a server without the health service, shows it is
    /// up. For any gRPC service (the transcoding proxy's upstreams).
    GrpcHealth,
    /// An OpenAI API's `GET {base}/models` answering 200 (vLLM, llama.cpp's
    /// server, TGI and OpenAI itself all serve it).
    OpenAiModels,
}

impl Default for UpstreamOptions {
    fn default() -> UpstreamOptions {
        UpstreamOptions {
            channel: ChannelOptions::default(),
            eject_after: 3,
            retries: 2,
            max_message_bytes: 256 << 20,
            headers: HeaderMap::new(),
            ca_file: None,
            probe: Probe::ServerLive,
        }
    }
}

/// A failed call, and the replica it went to.
#[derive(Debug, Clone)]
pub struct UpstreamError {
    /// The replica's address, or every replica's when none was tried.
    pub upstream: String,
    /// What went wrong.
    pub error: CallError,
}

impl UpstreamError {
    /// The error wirespeed's client sees.
    pub fn to_error(&self) -> wirespeed_core::Error {
        self.error.to_error(&self.upstream)
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "upstream {} {}", self.upstream, self.error)
    }
}

/// How a replica is reached: HTTP/2 for gRPC, HTTP/1.1 for REST.
pub(crate) enum Link {
    Grpc(Channel),
    Http(Http1Channel),
}

impl Link {
    pub(crate) fn address(&self) -> &Address {
        match self {
            Link::Grpc(c) => c.address(),
            Link::Http(c) => c.address(),
        }
    }
}

/// One replica and its health.
pub(crate) struct Replica {
    pub(crate) channel: Link,
    outstanding: AtomicUsize,
    failures: AtomicU32,
    ejected: AtomicBool,
    last_error: Mutex<String>,
}

/// Counts a call as outstanding on its replica until it ends, however it
/// ends (a cancelled call too).
struct Outstanding<'a>(&'a Replica);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a call as outstanding on its replica for as long as it is
/// held: a stream's answer, read after the call has returned.
pub(crate) struct Held(Arc<Replica>);

impl Held {
    fn new(replica: Arc<Replica>) -> Held {
        replica.outstanding.fetch_add(1, Ordering::Relaxed);
        Held(replica)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The replicas of one upstream server.
pub struct Upstream {
    describe: String,
    protocol: Protocol,
    replicas: Vec<Arc<Replica>>,
    options: UpstreamOptions,
    turn: AtomicUsize,
}

impl Upstream {
    /// An upstream of `addresses`, all speaking the same protocol. Nothing
    /// is connected until the first call.
    pub fn new(addresses: Vec<Address>, options: UpstreamOptions) -> Result<Arc<Upstream>, String> {
        let Some(first) = addresses.first() else {
            return Err("an upstream needs at least one URL".to_owned());
        };
        let protocol = first.protocol;
        if let Some(other) = addresses.iter().find(|a| a.protocol != protocol) {
            return Err(format!(
                "the replicas {first} and {other} speak different protocols; give replicas of one server"
            ));
        }
        let tls = if addresses.iter().any(|a| a.tls) {
            Some(tls_connector(options.ca_file.as_deref(), protocol)?)
        } else {
            None
        };
        let describe = addresses
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let replicas = addresses
            .into_iter()
            .map(|address| {
                let link = match protocol {
                    Protocol::Grpc => {
                        Link::Grpc(Channel::new(address, tls.clone(), options.channel.clone()))
                    }
                    Protocol::Http => Link::Http(Http1Channel::new(
                        address,
                        tls.clone(),
                        options.channel.clone(),
                    )),
                };
                Arc::new(Replica {
                    channel: link,
                    outstanding: AtomicUsize::new(0),
                    failures: AtomicU32::new(0),
                    ejected: AtomicBool::new(false),
                    last_error: Mutex::new(String::new()),
                })
            })
            .collect();
        Ok(Arc::new(Upstream {
            describe,
            protocol,
            replicas,
            options,
            turn: AtomicUsize::new(0),
        }))
    }

    /// The replicas' addresses, for messages.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The protocol the replicas speak.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The options calls are made with.
    pub fn options(&self) -> &UpstreamOptions {
        &self.options
    }

    /// `Ok` while a replica is admitted; else why none is.
    pub fn status(&self) -> Result<(), String> {
        if self
            .replicas
            .iter()
            .any(|r| !r.ejected.load(Ordering::Acquire))
        {
            return Ok(());
        }
        let reasons: Vec<String> = self
            .replicas
            .iter()
            .map(|r| {
                let why = r.last_error.lock().map(|e| e.clone()).unwrap_or_default();
                format!("{} {why}", r.channel.address())
            })
            .collect();
        Err(format!(
            "{} (probing again with backoff)",
            reasons.join("; ")
        ))
    }

    /// The admitted replica with the fewest calls outstanding, not among
    /// `tried` unless every admitted one is.
    fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.replicas.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let mut best: Option<(usize, usize)> = None;
        for pass in [true, false] {
            for k in 0..n {
                let i = (start + k) % n;
                let replica = &self.replicas[i];
                if replica.ejected.load(Ordering::Acquire) || (pass && tried.contains(&i)) {
                    continue;
                }
                let load = replica.outstanding.load(Ordering::Relaxed);
                if best.is_none_or(|(_, b)| load < b) {
                    best = Some((i, load));
                }
            }
            if best.is_some() {
                break;
            }
        }
        best.map(|(i, _)| i)
    }

    /// A gRPC call of `path` with `body` (a framed message), balanced,
    /// retried and counted as this module says. Returns the answer's
    /// message.
    pub(crate) async fn grpc(
        &self,
        path: &str,
        body: Chunks,
        deadline: Option<Instant>,
        trace: Option<&TraceContext>,
    ) -> Result<Bytes, UpstreamError> {
        let headers = &self.options.headers;
        let max_message = self.options.max_message_bytes;
        self.call(deadline, |replica| {
            let body = body.clone();
            async move {
                match &replica.channel {
                    Link::Grpc(channel) => {
                        let call = Call {
                            path,
                            body,
                            deadline,
                            headers,
                            trace,
                            max_message,
                        };
                        grpc::unary(channel, call).await
                    }
                    Link::Http(_) => Err(CallError::Protocol(
                        "a gRPC call to a REST upstream".to_owned(),
                    )),
                }
            }
        })
        .await
    }

    /// A unary call of any gRPC method (the transcoding proxy's): `path`
    /// is `/package.Service/Method`, `message` the encoded request, and
    /// `metadata` headers sent beside the upstream's own. Balanced,
    /// retried and counted as every call. Returns the answer's message.
    pub async fn unary(
        &self,
        path: &str,
        message: Bytes,
        metadata: &HeaderMap,
        deadline: Option<Instant>,
    ) -> Result<Bytes, UpstreamError> {
        let mut prefix = [0u8; 5];
        prefix[1..].copy_from_slice(
            &u32::try_from(message.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        let body = Chunks::new([Bytes::copy_from_slice(&prefix), message]);
        let headers = &*self.headers_with(metadata);
        let max_message = self.options.max_message_bytes;
        self.call(deadline, |replica| {
            let body = body.clone();
            async move {
                match &replica.channel {
                    Link::Grpc(channel) => {
                        let call = Call {
                            path,
                            body,
                            deadline,
                            headers,
                            trace: None,
                            max_message,
                        };
                        grpc::unary(channel, call).await
                    }
                    Link::Http(_) => Err(CallError::Protocol(
                        "a gRPC call to a REST upstream".to_owned(),
                    )),
                }
            }
        })
        .await
    }

    /// Opens a call of any gRPC method (the transcoding proxy's), unary or
    /// streaming: `path` is `/package.Service/Method`, `body` the framed
    /// request (a client stream's messages as they are sent), `metadata`
    /// headers sent beside the upstream's own. Balanced, and retried on
    /// another replica while the request has not gone out. Returns once
    /// the answer's headers are in; its messages are read from the
    /// [`OpenCall`] (within `deadline`, which the caller keeps).
    pub async fn open(
        &self,
        path: &str,
        body: CallBody,
        metadata: &HeaderMap,
        deadline: Option<Instant>,
    ) -> Result<OpenCall, UpstreamError> {
        let headers = &*self.headers_with(metadata);
        let max_message = self.options.max_message_bytes;
        let unsent = std::sync::Mutex::new(Some(body));
        let opened = self.call(deadline, |replica| {
            let unsent = &unsent;
            async move {
                let Link::Grpc(channel) = &replica.channel else {
                    return Err(CallError::Protocol(
                        "a gRPC call to a REST upstream".to_owned(),
                    ));
                };
                // A unary body is kept for another replica; a stream's
                // goes once (and comes back if it never went out).
                let mut body = {
                    let mut slot = unsent.lock().unwrap_or_else(|e| e.into_inner());
                    match slot.as_ref() {
                        Some(CallBody::Chunks(chunks)) => Some(CallBody::Chunks(chunks.clone())),
                        _ => slot.take(),
                    }
                };
                let request = OpenRequest {
                    path,
                    deadline,
                    headers,
                    max_message,
                };
                let result = grpc::open(channel, request, &mut body).await;
                if let Some(CallBody::Stream(back)) = body {
                    *unsent.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(CallBody::Stream(back));
                }
                result
            }
        });
        match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), opened)
                .await
                .unwrap_or_else(|_| {
                    Err(UpstreamError {
                        upstream: self.describe.clone(),
                        error: CallError::Deadline,
                    })
                }),
            None => opened.await,
        }
    }

    /// The upstream's own headers with a call's `metadata`, copied only
    /// when the call adds some.
    fn headers_with(&self, metadata: &HeaderMap) -> std::borrow::Cow<'_, HeaderMap> {
        if metadata.is_empty() {
            return std::borrow::Cow::Borrowed(&self.options.headers);
        }
        let mut all = self.options.headers.clone();
        for (name, value) in metadata {
            all.append(name, value.clone());
        }
        std::borrow::Cow::Owned(all)
    }

    /// A REST request, balanced, retried and counted the same way; an
    /// error status is a [`CallError::Status`].
    pub(crate) async fn rest(
        &self,
        method: hyper::Method,
        path: &str,
        body: Chunks,
        headers: &HeaderMap,
        deadline: Option<Instant>,
    ) -> Result<Answer, UpstreamError> {
        let max = self.options.max_message_bytes;
        self.call(deadline, |replica| {
            let (body, method) = (body.clone(), method.clone());
            async move {
                match &replica.channel {
                    Link::Http(channel) => {
                        let answer = channel
                            .send(method, path, body, headers, deadline, max)
                            .await?;
                        if answer.status.is_success() {
                            Ok(answer)
                        } else {
                            Err(crate::rest::status_error(&answer))
                        }
                    }
                    Link::Grpc(_) => Err(CallError::Protocol(
                        "a REST request to a gRPC upstream".to_owned(),
                    )),
                }
            }
        })
        .await
    }

    /// A REST request to `endpoint` under the replica's own URL path,
    /// balanced, retried and counted the same way, that returns once the
    /// answer's head is in: its body is read as it arrives, and the call
    /// counts as outstanding on its replica until the [`Held`] goes. An
    /// error status is read whole (up to 64 KiB) and made an error by
    /// `refusal`.
    pub(crate) async fn rest_open(
        &self,
        method: hyper::Method,
        endpoint: &str,
        body: Chunks,
        headers: &HeaderMap,
        deadline: Option<Instant>,
        refusal: fn(&Answer) -> CallError,
    ) -> Result<(Opened, Held, String), UpstreamError> {
        self.call(deadline, |replica| {
            let (body, method) = (body.clone(), method.clone());
            async move {
                let Link::Http(channel) = &replica.channel else {
                    return Err(CallError::Protocol(
                        "a REST request to a gRPC upstream".to_owned(),
                    ));
                };
                let path = format!("{}{endpoint}", channel.address().path);
                let opened = channel
                    .begin(method, &path, body, headers, deadline)
                    .await?;
                if !opened.status.is_success() {
                    let answer = opened.whole(64 << 10).await?;
                    return Err(refusal(&answer));
                }
                let address = channel.address().to_string();
                Ok((opened, Held::new(replica), address))
            }
        })
        .await
    }

    /// Makes `attempt` on a replica: balanced, retried when nothing was
    /// reached, and counted for the replica's health.
    async fn call<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        attempt: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<Replica>) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let mut tried = Vec::new();
        let mut retries = 0;
        loop {
            let Some(i) = self.pick(&tried) else {
                let why = self.status().err().unwrap_or_default();
                return Err(UpstreamError {
                    upstream: self.describe.clone(),
                    error: CallError::NoReplica(why),
                });
            };
            let replica = &self.replicas[i];
            replica.outstanding.fetch_add(1, Ordering::Relaxed);
            let counted = Outstanding(replica);
            let result = attempt(Arc::clone(replica)).await;
            drop(counted);
            let error = match result {
                Ok(answer) => {
                    replica.failures.store(0, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(error) => error,
            };
            // A call cut once its deadline has passed (the upstream resets
            // an expired stream, or its connection's answer comes too late)
            // failed for want of time: never the replica's fault.
            let error = match error {
                CallError::Broken(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    CallError::Deadline
                }
                error => error,
            };
            if error.is_unhealthy() {
                self.failed(replica, &error);
            } else if error != CallError::Deadline {
                // It answered: healthy, whatever it said.
                replica.failures.store(0, Ordering::Relaxed);
            }
            let time_left = deadline.is_none_or(|d| Instant::now() < d);
            if matches!(error, CallError::Unreached(_))
                && retries < self.options.retries
                && time_left
            {
                retries += 1;
                tried.push(i);
                let wait = jitter(Duration::from_millis(5 << retries));
                match deadline {
                    Some(d) => {
                        tokio::time::sleep(wait.min(d.saturating_duration_since(Instant::now())))
                            .await
                    }
                    None => tokio::time::sleep(wait).await,
                }
                continue;
            }
            return Err(UpstreamError {
                upstream: replica.channel.address().to_string(),
                error,
            });
        }
    }

    /// Counts a failure of `replica`; the one that makes `eject_after` in a
    /// row ejects it and starts its probe.
    fn failed(&self, replica: &Arc<Replica>, error: &CallError) {
        if let Ok(mut last) = replica.last_error.lock() {
            *last = error.to_string();
        }
        let failures = replica.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= self.options.eject_after.max(1)
            && !replica.ejected.swap(true, Ordering::AcqRel)
        {
            tracing::warn!(
                upstream = %replica.channel.address(),
                failures,
                error = %error,
                "ejecting the replica; probing it until it answers"
            );
            let replica = Arc::clone(replica);
            let headers = self.options.headers.clone();
            tokio::spawn(probe(replica, headers, self.options.probe));
        }
    }
}

/// Asks an ejected replica whether it is live, with growing jittered waits,
/// until it says so; then admits it.
async fn probe(replica: Arc<Replica>, headers: HeaderMap, how: Probe) {
    let mut wait = Duration::from_millis(100);
    loop {
        tokio::time::sleep(jitter(wait)).await;
        let deadline = Instant::now() + Duration::from_secs(2);
        let answer = match (&replica.channel, how) {
            (Link::Grpc(channel), Probe::ServerLive) => {
                crate::v2::live(channel, &headers, deadline).await
            }
            (Link::Grpc(channel), Probe::GrpcHealth | Probe::OpenAiModels) => {
                grpc::health(channel, &headers, deadline).await
            }
            (Link::Http(channel), Probe::OpenAiModels) => {
                let path = format!("{}/models", channel.address().path);
                crate::rest::get(channel, &path, &headers, Some(deadline))
                    .await
                    .map(drop)
            }
            (Link::Http(channel), _) => crate::rest::live(channel, &headers, deadline).await,
        };
        match answer {
            Ok(()) => {
                replica.failures.store(0, Ordering::Relaxed);
                replica.ejected.store(false, Ordering::Release);
                tracing::info!(upstream = %replica.channel.address(), "the replica answers again; admitted");
                return;
            }
            Err(error) => {
                if let Ok(mut last) = replica.last_error.lock() {
                    *last = error.to_string();
                }
                tracing::debug!(upstream = %replica.channel.address(), error = %error, "probe failed");
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// A wait between half of `d` and `d`, so that callers who failed
/// together do not come back together.
pub(crate) fn jitter(d: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    d / 2 + d.mul_f64((random % 1024) as f64 / 2048.0)
}
