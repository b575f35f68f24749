//! Accepting and serving connections, the same way for REST and gRPC, on
//! TCP and Unix sockets, with or without TLS.
//!
//! Every connection holds a permit of the server's connection semaphore
//! (`--max-connections`): at the limit, accepting waits, and new clients
//! queue in the kernel's backlog rather than in our memory. The same
//! semaphore tells when the drain is over: all permits are back.
//!
//! Connections are served by I/O threads, one per core unless
//! `--io-threads` says otherwise, each with a single-threaded tokio
//! runtime of its own that accepts on every listener (the kernel hands each
//! connection to one of them) and keeps the connection to its end, as nginx
//! workers and pingora's no-steal runtimes do. One work-stealing runtime
//! served small requests a fifth slower: each readiness event woke a second
//! worker to steal, and the futex wake-ups and context switches were the
//! largest item in the profile (`GET /v2`: 124 k req/s with two stealing
//! workers, 152 k with one). Long work never runs on these threads: large
//! decodes and model compute go to the CPU pool.
//!
//! Every thread is woken by a new connection, and the first to run takes
//! it; in a burst (a load balancer's pool, a benchmark's sixteen
//! connections) one thread took them all, and served them alone while
//! the other idled (24,800 req/s on small embeddings against 44,700 when
//! they split). So the threads keep a count of their open connections
//! ([`Spread`]), and one holding two more than another waits a moment
//! before accepting again, for the other to take the next.
//!
//! Each connection's bytes pass through [`Tracked`], which notes the time of
//! the last read or write. A connection with no request in flight and no
//! bytes for `--keep-alive-timeout` is shut down gracefully; so is every
//! connection when shutdown begins. A connection that sends nothing after
//! it is accepted is closed after the header timeout instead. A request
//! whose head comes in pieces goes to hyper (`http1/`), whose header
//! timeout closes a connection that does not finish it in time.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::net::authority::GrpcUnixListener;
use crate::net::connection::{Activity, Answers, BoxError, Counting, Tracked};
use crate::net::counts::{Connections, ListenerKind};
use crate::net::http1;

/// A listening socket.
pub(crate) trait Listener {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// The next connection, with a description of the peer for logs.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, String)>> + Send;
}

impl Listener for TcpListener {
    type Io = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, String)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }
}

impl Listener for UnixListener {
    type Io = UnixStream;

    async fn accept(&self) -> io::Result<(UnixStream, String)> {
        let (stream, _) = UnixListener::accept(self).await?;
        Ok((stream, "unix".to_owned()))
    }
}

/// Which protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// REST: HTTP/1.1, or HTTP/2 with prior knowledge.
    Rest,
    /// gRPC: HTTP/2 only.
    Grpc,
}

/// HTTP/2 flow-control windows for gRPC. h2's default of 64 KiB makes a
/// large tensor wait for a WINDOW_UPDATE round trip every 64 KiB; these let
/// a few MiB arrive at once (and bound what one connection can buffer).
const STREAM_WINDOW_BYTES: u32 = 4 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 8 << 20;

/// The largest HTTP/2 frame clients may send to gRPC: 512 KiB rather than
/// h2's 16 KiB, so a large tensor arrives in a few frames, not hundreds.
const MAX_FRAME_BYTES: u32 = 512 << 10;

/// What hyper is told of a connection's requests' heads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLimits {
    /// Time to receive a request's headers (HTTP/1).
    pub(crate) header_timeout: Duration,
    /// The most request headers (HTTP/1).
    pub(crate) max_headers: usize,
    /// The most bytes of request headers.
    pub(crate) max_header_bytes: usize,
}

/// The hyper connection builder for `protocol` under `limits`.
pub(crate) fn builder(protocol: Protocol, limits: &HeadLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if protocol == Protocol::Grpc {
        builder = builder.http2_only();
    }
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(limits.max_headers);
    let mut http2 = builder.http2();
    http2
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    if protocol == Protocol::Grpc {
        http2
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_frame_size(MAX_FRAME_BYTES);
    }
    builder
}

/// How long a thread holding more connections than another waits before
/// accepting, for the other (woken by the same arrival) to take it.
const SPREAD_WAIT: Duration = Duration::from_millis(1);

/// The open connections of each I/O thread.
#[derive(Default)]
pub(crate) struct Spread {
    open: Vec<std::sync::atomic::AtomicUsize>,
}

impl Spread {
    pub(crate) fn new(threads: usize) -> Spread {
        Spread {
            open: (0..threads).map(|_| Default::default()).collect(),
        }
    }

    /// Whether thread `me` holds two or more connections than another.
    fn ahead(&self, me: usize) -> bool {
        use std::sync::atomic::Ordering;
        let mine = self.open.get(me).map_or(0, |o| o.load(Ordering::Relaxed));
        self.open
            .iter()
            .enumerate()
            .any(|(i, o)| i != me && o.load(Ordering::Relaxed) + 1 < mine)
    }

    /// Thread `me` serves nothing (it did not start): no other waits for
    /// it.
    pub(crate) fn absent(&self, me: usize) {
        if let Some(open) = self.open.get(me) {
            open.store(usize::MAX / 2, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Counts a connection of thread `me` until the guard drops.
    fn opened(self: &Arc<Self>, me: usize) -> Option<SpreadGuard> {
        use std::sync::atomic::Ordering;
        self.open.get(me)?.fetch_add(1, Ordering::Relaxed);
        Some(SpreadGuard {
            spread: Arc::clone(self),
            me,
        })
    }
}

struct SpreadGuard {
    spread: Arc<Spread>,
    me: usize,
}

impl Drop for SpreadGuard {
    fn drop(&mut self) {
        if let Some(open) = self.spread.open.get(self.me) {
            open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Which I/O thread serves, among how many.
#[derive(Clone, Default)]
pub(crate) struct Place {
    pub(crate) spread: Arc<Spread>,
    pub(crate) index: usize,
}

/// What every accept loop shares.
pub(crate) struct Shared {
    /// One permit per open connection.
    pub(crate) connections: Arc<Semaphore>,
    /// Turns true when shutdown begins.
    pub(crate) stopping: watch::Receiver<bool>,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) keep_alive: Duration,
    pub(crate) header_timeout: Duration,
    /// Where connections are counted, when metrics are on.
    pub(crate) counts: Option<Arc<Connections>>,
}

/// Accepts connections on `listener` until shutdown begins, serving each
/// with `service`, counted per connection. Returns when the listener is closed; the caller
/// waits for the open connections (their permits) to finish.
pub(crate) async fn serve<L, S>(
    listener: L,
    kind: ListenerKind,
    builder: Arc<auto::Builder<TokioExecutor>>,
    http1: Option<http1::Limits>,
    service: &S,
    shared: Arc<Shared>,
    place: Place,
) where
    L: Listener,
    S: Answers,
{
    let mut stopping = shared.stopping.clone();
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&shared.connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stopping.wait_for(|&s| s) => break,
        };
        if place.spread.ahead(place.index) {
            tokio::select! {
                () = tokio::time::sleep(SPREAD_WAIT) => {}
                _ = stopping.wait_for(|&s| s) => break,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|&s| s) => break,
        };
        let (io, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: back off instead
                // of spinning, and keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let activity = Arc::new(Activity::new());
        activity.touch();
        let service = Counting {
            inner: service.clone(),
            activity: Arc::clone(&activity),
        };
        let builder = Arc::clone(&builder);
        let shared = Arc::clone(&shared);
        let open = shared.counts.as_ref().map(|c| c.opened(kind));
        let spread = place.spread.opened(place.index);
        tokio::spawn(async move {
            let io = Tracked {
                io,
                activity: Arc::clone(&activity),
            };
            let result = match &shared.tls {
                None => drive(&builder, http1, io, service, &activity, &shared).await,
                Some(acceptor) => {
                    // A handshake that does not finish within the header
                    // timeout holds the slot no longer than a slow header.
                    match tokio::time::timeout(shared.header_timeout, acceptor.accept(io)).await {
                        // Boxed: a TLS connection's state is large, and
                        // inline it would size every connection's task
                        // (as it does when awaited in the statement that
                        // boxes it: the temporary keeps its room).
                        Ok(Ok(tls)) => {
                            let driving =
                                Box::pin(drive(&builder, http1, tls, service, &activity, &shared));
                            driving.await
                        }
                        Ok(Err(e)) => Err(e.into()),
                        Err(_) => Err("TLS handshake timed out".into()),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(open);
            drop(spread);
            drop(permit);
        });
    }
}

/// Serves one connection to its end: closed by the client, idle past the
/// keep-alive timeout, or shut down gracefully when the server stops.
/// A REST connection starts on the HTTP/1 fast path and goes on with hyper
/// from the first request the fast path hands over.
async fn drive<I, S>(
    builder: &auto::Builder<TokioExecutor>,
    http1: Option<http1::Limits>,
    mut io: I,
    service: Counting<S>,
    activity: &Activity,
    shared: &Shared,
) -> Result<(), BoxError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Answers,
{
    let mut stopping = shared.stopping.clone();
    let check = (shared.keep_alive / 4).max(Duration::from_millis(50));
    let mut closing = false;
    // The activity count at the last check, and since when it has not moved.
    let (mut seen, mut still_since) = (activity.moves(), Instant::now());
    // A connection that has sent nothing since it was accepted (its one
    // move is the accept's) is held to the header timeout, as hyper holds
    // it; after its first bytes, to the keep-alive timeout.
    let first_check = (shared.header_timeout / 4).max(Duration::from_millis(50));
    let silent = |activity: &Activity| activity.moves() <= 1;
    let mut idle = |activity: &Activity| {
        let moves = activity.moves();
        if moves != seen {
            (seen, still_since) = (moves, Instant::now());
        }
        let limit = if silent(activity) {
            shared.header_timeout
        } else {
            shared.keep_alive
        };
        !activity.busy() && still_since.elapsed() >= limit
    };
    let read = match http1 {
        Some(limits) => {
            let fast = http1::serve(&mut io, &service, activity, limits);
            tokio::pin!(fast);
            let ended = loop {
                tokio::select! {
                    ended = fast.as_mut() => break ended?,
                    _ = stopping.wait_for(|&s| s), if !closing => {
                        closing = true;
                        activity.close();
                    }
                    () = tokio::time::sleep(if silent(activity) { first_check } else { check }), if !closing => {
                        if idle(activity) {
                            closing = true;
                            activity.close();
                        }
                    }
                }
            };
            match ended {
                http1::Ended::Closed => return Ok(()),
                http1::Ended::HandOver(read) => read,
            }
        }
        None => bytes::Bytes::new(),
    };
    let io = http1::Replayed { read, io };
    // Boxed: only connections hyper serves carry its state.
    let mut connection = Box::pin(builder.serve_connection(TokioIo::new(io), service));
    if closing {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            _ = stopping.wait_for(|&s| s), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep(check), if !closing => {
                if idle(activity) {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The listeners, as std sockets, so that each I/O thread can take a copy
/// into its own runtime.
pub(crate) struct Sockets {
    /// The REST API's TCP listeners: `--http`, and `--tf-http` if given.
    http_tcp: Vec<std::net::TcpListener>,
    http_uds: Option<std::os::unix::net::UnixListener>,
    /// The gRPC API's: `--grpc`, and `--tf-grpc` if given.
    grpc_tcp: Vec<std::net::TcpListener>,
    grpc_uds: Option<std::os::unix::net::UnixListener>,
    metrics_tcp: Option<std::net::TcpListener>,
}

impl Sockets {
    pub(crate) fn new(
        http_tcp: Vec<TcpListener>,
        http_uds: Option<UnixListener>,
        grpc_tcp: Vec<TcpListener>,
        grpc_uds: Option<UnixListener>,
        metrics_tcp: Option<TcpListener>,
    ) -> io::Result<Sockets> {
        let std_tcp = |all: Vec<TcpListener>| {
            all.into_iter()
                .map(TcpListener::into_std)
                .collect::<io::Result<Vec<_>>>()
        };
        Ok(Sockets {
            http_tcp: std_tcp(http_tcp)?,
            http_uds: http_uds.map(UnixListener::into_std).transpose()?,
            grpc_tcp: std_tcp(grpc_tcp)?,
            grpc_uds: grpc_uds.map(UnixListener::into_std).transpose()?,
            metrics_tcp: metrics_tcp.map(TcpListener::into_std).transpose()?,
        })
    }

    /// Another handle on the same sockets.
    pub(crate) fn try_clone(&self) -> io::Result<Sockets> {
        let clone_tcp = |all: &[std::net::TcpListener]| {
            all.iter()
                .map(|l| l.try_clone())
                .collect::<io::Result<Vec<_>>>()
        };
        Ok(Sockets {
            http_tcp: clone_tcp(&self.http_tcp)?,
            http_uds: self.http_uds.as_ref().map(|l| l.try_clone()).transpose()?,
            grpc_tcp: clone_tcp(&self.grpc_tcp)?,
            grpc_uds: self.grpc_uds.as_ref().map(|l| l.try_clone()).transpose()?,
            metrics_tcp: self
                .metrics_tcp
                .as_ref()
                .map(|l| l.try_clone())
                .transpose()?,
        })
    }
}

/// One I/O thread: its copy of the sockets and what serving them takes.
pub(crate) struct IoThread<R, G, M> {
    pub(crate) sockets: Sockets,
    pub(crate) rest: Arc<auto::Builder<TokioExecutor>>,
    pub(crate) grpc: Arc<auto::Builder<TokioExecutor>>,
    /// What the REST listeners' HTTP/1 fast path reads.
    pub(crate) http1: http1::Limits,
    /// The REST listeners' service, cloned for each connection.
    pub(crate) rest_service: R,
    /// The gRPC listeners' service.
    pub(crate) grpc_service: G,
    /// The metrics listener's service: `/metrics` and nothing else.
    pub(crate) metrics_service: M,
    pub(crate) shared: Arc<Shared>,
    /// This thread among the others (set by [`super::threads::start_io_threads`]).
    pub(crate) place: Place,
    /// Told when this thread's accept loops have ended.
    pub(crate) ended: mpsc::UnboundedSender<()>,
    /// Turns true when the drain is over; until then the thread's runtime
    /// keeps serving the connections it has.
    pub(crate) drain_over: watch::Receiver<bool>,
}

impl<R, G, M> IoThread<R, G, M>
where
    R: Answers,
    G: Answers,
    M: Answers,
{
    /// Accepts and serves until shutdown begins, then serves the open
    /// connections until the drain is over.
    pub(crate) fn run(self) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "cannot start an I/O runtime");
                self.place.spread.absent(self.place.index);
                let _ = self.ended.send(());
                return;
            }
        };
        let IoThread {
            sockets,
            rest,
            grpc,
            http1,
            rest_service,
            grpc_service,
            metrics_service,
            shared,
            place,
            ended,
            mut drain_over,
        } = self;
        runtime.block_on(async move {
            let accepting = async {
                let tcp = |l: Option<std::net::TcpListener>| {
                    l.and_then(|l| TcpListener::from_std(l).map_err(log_lost).ok())
                };
                let unix = |l: Option<std::os::unix::net::UnixListener>| {
                    l.and_then(|l| UnixListener::from_std(l).map_err(log_lost).ok())
                };
                let (http_uds, grpc_uds) = (unix(sockets.http_uds), unix(sockets.grpc_uds));
                let metrics_tcp = tcp(sockets.metrics_tcp);
                let http_tcp = sockets.http_tcp.into_iter().filter_map(|l| tcp(Some(l)));
                let grpc_tcp = sockets.grpc_tcp.into_iter().filter_map(|l| tcp(Some(l)));
                let rest_tcp = http_tcp.map(|l| {
                    serve(
                        l,
                        ListenerKind::RestTcp,
                        Arc::clone(&rest),
                        Some(http1),
                        &rest_service,
                        Arc::clone(&shared),
                        place.clone(),
                    )
                });
                let grpc_tcp = grpc_tcp.map(|l| {
                    serve(
                        l,
                        ListenerKind::GrpcTcp,
                        Arc::clone(&grpc),
                        None,
                        &grpc_service,
                        Arc::clone(&shared),
                        place.clone(),
                    )
                });
                tokio::join!(
                    join_all(rest_tcp),
                    join_all(grpc_tcp),
                    maybe(http_uds.map(|l| serve(
                        l,
                        ListenerKind::RestUnix,
                        Arc::clone(&rest),
                        Some(http1),
                        &rest_service,
                        Arc::clone(&shared),
                        place.clone()
                    ))),
                    maybe(grpc_uds.map(|l| serve(
                        GrpcUnixListener(l),
                        ListenerKind::GrpcUnix,
                        Arc::clone(&grpc),
                        None,
                        &grpc_service,
                        Arc::clone(&shared),
                        place.clone()
                    ))),
                    maybe(metrics_tcp.map(|l| serve(
                        l,
                        ListenerKind::Metrics,
                        Arc::clone(&rest),
                        Some(http1),
                        &metrics_service,
                        Arc::clone(&shared),
                        place.clone()
                    ))),
                );
            };
            accepting.await;
            let _ = ended.send(());
            let _ = drain_over.wait_for(|&over| over).await;
        });
    }
}

fn log_lost(e: io::Error) -> io::Error {
    tracing::error!(error = %e, "an I/O thread cannot take its listener");
    e
}

/// Runs every future to its end, together.
async fn join_all<F: Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut all: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        all.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if all.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

async fn maybe(future: Option<impl Future<Output = ()>>) {
    if let Some(future) = future {
        future.await;
    }
}

#[cfg(test)]
mod tests {
    fn size_of_future<Fut: std::future::Future>(_: impl FnOnce() -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A service whose answer is ready at once.
    #[derive(Clone)]
    struct Answer;

    impl hyper::service::Service<hyper::Request<wirespeed_http::RequestBody>> for Answer {
        type Response = hyper::Response<wirespeed_http::Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn call(&self, _: hyper::Request<wirespeed_http::RequestBody>) -> Self::Future {
            std::future::ready(Ok(hyper::Response::new(wirespeed_http::Body::new(
                Vec::new(),
            ))))
        }
    }

    /// An idle keep-alive connection costs its task, whose size is this
    /// future's: hyper's state and TLS's are boxed, only for the
    /// connections that have them (10,000 idle connections took 12.8 KiB
    /// each behind hyper, 3.7 KiB on the fast path).
    #[test]
    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn a_connection_s_task_stays_small() {
        let size = size_of_future(|| {
            let io: super::Tracked<tokio::net::TcpStream> =
                unreachable!("only the type is measured");
            let service: super::Counting<Answer> = unreachable!("only the type is measured");
            super::drive(
                unreachable!("only the type is measured"),
                None,
                io,
                service,
                unreachable!("only the type is measured"),
                unreachable!("only the type is measured"),
            )
        });
        assert!(size < 3072, "{size} bytes");
    }
}
