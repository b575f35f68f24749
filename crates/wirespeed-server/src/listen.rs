//! Accepting and serving connections, the same way for REST and gRPC, on
//! TCP and Unix sockets, with or without TLS.
//!
//! Every connection holds a permit of the server's connection semaphore
//! (`--max-connections`): at the limit, accepting waits, and new clients
//! queue in the kernel's backlog rather than in our memory. The same
//! semaphore tells when the drain is over: all permits are back.
//!
//! Each connection's bytes pass through [`Tracked`], which notes the time of
//! the last read or write. A connection with no request in flight and no
//! bytes for `--keep-alive-timeout` is shut down gracefully; so is every
//! connection when shutdown begins. HTTP/1 also has hyper's header timeout,
//! which closes a connection that does not finish sending a request's
//! headers (or, idle between requests, does not start) in time.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};

use crate::Limits;

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

/// The hyper connection builder for `protocol` under `limits`.
pub(crate) fn builder(protocol: Protocol, limits: &Limits) -> auto::Builder<TokioExecutor> {
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

/// When a connection last moved a byte, and how many of its requests are
/// being answered.
pub(crate) struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = self.last_ms.load(Ordering::Relaxed);
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(last))
    }

    /// Counts a request as in flight until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

/// A request being answered on a connection.
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's byte stream, noting activity.
struct Tracked<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The error type hyper takes from services and bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What every accept loop shares.
pub(crate) struct Shared {
    /// One permit per open connection.
    pub(crate) connections: Arc<Semaphore>,
    /// Turns true when shutdown begins.
    pub(crate) stopping: watch::Receiver<bool>,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) keep_alive: Duration,
    pub(crate) header_timeout: Duration,
}

/// Accepts connections on `listener` until shutdown begins, serving each
/// with `make`'s service. Returns when the listener is closed; the caller
/// waits for the open connections (their permits) to finish.
pub(crate) async fn serve<L, F, S, B>(
    listener: L,
    builder: Arc<auto::Builder<TokioExecutor>>,
    make: F,
    shared: Arc<Shared>,
) where
    L: Listener,
    F: Fn(Arc<Activity>) -> S,
    S: hyper::service::Service<Request<Incoming>, Response = hyper::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
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
        let service = make(Arc::clone(&activity));
        let builder = Arc::clone(&builder);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let io = Tracked {
                io,
                activity: Arc::clone(&activity),
            };
            let result = match &shared.tls {
                None => drive(&builder, io, service, &activity, &shared).await,
                Some(acceptor) => {
                    // A handshake that does not finish within the header
                    // timeout holds the slot no longer than a slow header.
                    match tokio::time::timeout(shared.header_timeout, acceptor.accept(io)).await {
                        Ok(Ok(tls)) => drive(&builder, tls, service, &activity, &shared).await,
                        Ok(Err(e)) => Err(e.into()),
                        Err(_) => Err("TLS handshake timed out".into()),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Serves one connection to its end: closed by the client, idle past the
/// keep-alive timeout, or shut down gracefully when the server stops.
async fn drive<I, S, B>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    activity: &Activity,
    shared: &Shared,
) -> Result<(), BoxError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = hyper::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut stopping = shared.stopping.clone();
    let check = (shared.keep_alive / 4).max(Duration::from_millis(50));
    let mut closing = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            _ = stopping.wait_for(|&s| s), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep(check), if !closing => {
                let idle = activity.in_flight.load(Ordering::Relaxed) == 0
                    && activity.idle_for() >= shared.keep_alive;
                if idle {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
