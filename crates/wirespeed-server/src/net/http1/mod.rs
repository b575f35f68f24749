//! HTTP/1.1 read in place, for the REST listeners: the fast path in front
//! of hyper.
//!
//! Most requests a model server sees are small, whole in one read, and
//! plain: a head, a `Content-Length`, a body. For those, hyper's machinery
//! (its read buffer and dispatch, a header map built by copying each value,
//! the encoder and its write buffer, a timer armed per request) was a fifth
//! of the server's time on `GET /v2`. Here such a request is parsed with
//! `httparse` where it arrived, its URI, header values and body are slices
//! of the bytes read (no copy), and its answer goes out in one write.
//!
//! What is not plain goes to hyper, with the bytes already read replayed
//! first ([`Replayed`]), and hyper serves the connection from then on: a
//! chunked body, `Expect: 100-continue`, an upgrade, HTTP/1.0, a head or
//! body that does not arrive at once (the slow client; the header and body
//! timeouts are hyper's and the body reader's, as before), a large body
//! (streamed to the decoder as it arrives), HTTP/2's preface, and every
//! malformed or ambiguous head (two `Content-Length`s,
//! `Transfer-Encoding` with `Content-Length`, obsolete line folding, a bare
//! CR), which hyper answers as it always has. So nothing hyper refused is
//! accepted here; the fast path only takes what hyper would read the same
//! way.
//!
//! Between requests a connection holds no buffer: it waits with the I/O
//! thread's scratch buffer and takes a buffer of its own only for the
//! bytes that arrive, so an idle keep-alive connection costs its socket and
//! its task, not a read buffer.

mod replay;
mod request;
mod response;

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use hyper::Method;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::net::connection::{Activity, Answers, BoxError, Counting};
pub(crate) use replay::Replayed;
use request::Read;

/// How a connection's fast path ended.
pub(crate) enum Ended {
    /// The connection is over: closed by the client, asked to close, or
    /// idle when the server began closing it.
    Closed,
    /// hyper serves the rest, starting with these bytes.
    HandOver(Bytes),
}

/// What the fast path reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The most request headers.
    pub(crate) max_headers: usize,
    /// The most bytes of a request's head.
    pub(crate) max_header_bytes: usize,
}

/// Bodies up to this size are read whole here; larger ones stream through
/// hyper to the decoder as they arrive.
const MAX_BODY_BYTES: usize = 256 << 10;

/// The I/O thread's buffer for a read into no connection's buffer.
const SCRATCH_BYTES: usize = 16 << 10;

/// Serves plain requests on `io` until the connection ends or a request
/// needs hyper.
pub(crate) async fn serve<I, S>(
    io: &mut I,
    service: &Counting<S>,
    activity: &Activity,
    limits: Limits,
) -> Result<Ended, BoxError>
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: Answers,
{
    // The bytes read and not yet taken: a request's, or its start.
    let mut buffer = Bytes::new();
    loop {
        if buffer.is_empty() {
            match next_bytes(io, activity).await? {
                Some(bytes) => buffer = bytes.freeze(),
                None => return Ok(Ended::Closed),
            }
        }
        match request::read(&mut buffer, limits.max_headers, MAX_BODY_BYTES) {
            Read::Request(request) => {
                let head_only = request.method() == Method::HEAD;
                let Some(response) =
                    answer_watching(io, service.answer(request), &mut buffer).await?
                else {
                    // The client closed while its answer was being made:
                    // the answer is dropped, which cancels its model call.
                    return Ok(Ended::Closed);
                };
                let closes = response::write(io, response, head_only).await?;
                if closes || activity.closing() {
                    // The write side ends first, as hyper ends it, so the
                    // answer is not lost to a reset.
                    let _ = io.shutdown().await;
                    return Ok(Ended::Closed);
                }
            }
            Read::Short { missing } => {
                if !read_arrived(io, &mut buffer, missing).await? {
                    return Ok(Ended::HandOver(buffer));
                }
            }
            Read::Partial => {
                if buffer.len() > limits.max_header_bytes
                    || !read_arrived(io, &mut buffer, 0).await?
                {
                    return Ok(Ended::HandOver(buffer));
                }
            }
            Read::HandOver => return Ok(Ended::HandOver(buffer)),
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_BYTES].into_boxed_slice());
}

/// Waits for the next request's first bytes, read into the thread's
/// scratch buffer and copied into a buffer of their size. `None` when the
/// client has closed, or when the server is closing the connection.
async fn next_bytes<I: AsyncRead + Unpin>(
    io: &mut I,
    activity: &Activity,
) -> io::Result<Option<BytesMut>> {
    poll_fn(|cx| {
        if activity.closing() {
            return Poll::Ready(Ok(None));
        }
        SCRATCH.with_borrow_mut(|scratch| {
            let mut read = ReadBuf::new(scratch);
            match Pin::new(&mut *io).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => Poll::Ready(Ok(None)),
                Poll::Ready(Ok(())) => Poll::Ready(Ok(Some(BytesMut::from(read.filled())))),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    })
    .await
}

/// Pipelined bytes read while an answer is made, at most: past this, the
/// socket is left unread until the answer is written.
const READ_AHEAD_BYTES: usize = 64 << 10;

/// Waits for `answer` while watching the socket, as hyper does: bytes that
/// arrive (the next pipelined request) are kept in `buffer`, and the client
/// closing its side ends the wait with `None`, dropping the answer, which
/// cancels the model's call.
async fn answer_watching<I, F, B>(
    io: &mut I,
    answer: F,
    buffer: &mut Bytes,
) -> io::Result<Option<hyper::Response<B>>>
where
    I: AsyncRead + Unpin,
    F: std::future::Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Unpin,
{
    let mut answer = answer;
    poll_fn(|cx| {
        if let Poll::Ready(Ok(response)) = Pin::new(&mut answer).poll(cx) {
            return Poll::Ready(Ok(Some(response)));
        }
        while buffer.len() < READ_AHEAD_BYTES {
            let read = SCRATCH.with_borrow_mut(|scratch| {
                let mut read = ReadBuf::new(scratch);
                match Pin::new(&mut *io).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => {
                        let mut more = writable(std::mem::take(buffer));
                        more.extend_from_slice(read.filled());
                        *buffer = more.freeze();
                        Poll::Ready(Ok(read.filled().len()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            });
            match read {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(None)),
                Poll::Ready(Ok(_)) => {}
                // A reset: the answer cannot be sent either.
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(None)),
                Poll::Pending => break,
            }
        }
        Poll::Pending
    })
    .await
}

/// Reads into `buffer` what has already arrived, without waiting for more;
/// whether anything had.
async fn read_arrived<I: AsyncRead + Unpin>(
    io: &mut I,
    buffer: &mut Bytes,
    wanted: usize,
) -> io::Result<bool> {
    let mut more = writable(std::mem::take(buffer));
    more.reserve(wanted.max(4096));
    let arrived =
        poll_fn(
            |cx| match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, &mut more) {
                Poll::Ready(Ok(n)) => Poll::Ready(Ok(n > 0)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Ready(Ok(false)),
            },
        )
        .await;
    *buffer = more.freeze();
    arrived
}

/// `bytes` to append to: the same memory when nothing else holds it (the
/// usual case), else a copy of what is left of it (the request before
/// them, still being answered, holds the rest).
fn writable(bytes: Bytes) -> BytesMut {
    bytes
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
}
