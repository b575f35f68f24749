//! One connection's activity: [`Tracked`] counts each read and write of
//! its bytes, and [`Counting`] each request its service is answering, so
//! the accept loop (`listen.rs`) can close a connection idle past the
//! keep-alive timeout without a clock on the hot path.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::Incoming;
use hyper::Request;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wirespeed_http::RequestBody;

/// Whether a connection has moved a byte lately, and how many of its
/// requests are being answered. Every read and write counts itself, with
/// no clock: the keep-alive check, a few times per timeout, sees whether
/// the count moved since its last look.
pub(crate) struct Activity {
    moves: AtomicU64,
    in_flight: AtomicUsize,
    /// The server is closing the connection once its request is answered.
    closing: AtomicBool,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            moves: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
        }
    }

    /// Asks the connection to close once its request is answered (at once
    /// when it has none).
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Whether the connection is asked to close.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    pub(crate) fn touch(&self) {
        self.moves.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn moves(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
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
pub(crate) struct Tracked<T> {
    pub(crate) io: T,
    pub(crate) activity: Arc<Activity>,
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

impl Activity {
    /// Whether a request is being answered.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }
}

/// What a listener's service must be: a hyper service of requests whose
/// bodies hyper or the HTTP/1 fast path read, cloned for each connection,
/// whose answers either can send.
pub(crate) trait Answers:
    hyper::service::Service<
        Request<RequestBody>,
        Response = hyper::Response<Self::Body>,
        Error = Infallible,
        Future: Unpin + Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// The response body.
    type Body: hyper::body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> Answers for S
where
    S: hyper::service::Service<
            Request<RequestBody>,
            Response = hyper::Response<B>,
            Error = Infallible,
            Future: Unpin + Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
    B: hyper::body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static,
{
    type Body = B;
}

/// A connection's service, counting each request in flight until its
/// answer's head is ready.
pub(crate) struct Counting<S> {
    pub(crate) inner: S,
    pub(crate) activity: Arc<Activity>,
}

impl<S: Answers> Counting<S> {
    /// Answers `request`, counted in flight.
    pub(crate) fn answer(&self, request: Request<RequestBody>) -> Counted<S::Future> {
        let in_flight = self.activity.begin();
        Counted {
            answer: self.inner.call(request),
            _in_flight: in_flight,
        }
    }
}

impl<S: Answers> hyper::service::Service<Request<Incoming>> for Counting<S> {
    type Response = S::Response;
    type Error = Infallible;
    type Future = Counted<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.answer(request.map(RequestBody::from))
    }
}

/// An answer being made, counted in flight until it is ready.
pub(crate) struct Counted<F> {
    answer: F,
    _in_flight: InFlight,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        Pin::new(&mut self.answer).poll(cx)
    }
}
