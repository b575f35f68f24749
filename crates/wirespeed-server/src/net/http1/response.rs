//! An answer written as HTTP/1.1: a body of known length goes out with its
//! head in one write; a streamed body (server-sent events, a generated
//! text) goes out chunked, each frame as it comes, flushed.
//!
//! The head is written as hyper writes it: the status line with its
//! canonical reason, the answer's headers in lower case, a `date`, and
//! `content-length` or `transfer-encoding: chunked` unless the answer has
//! set its own.

use std::cell::RefCell;
use std::io::{self, IoSlice, Write as _};
use std::pin::Pin;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use hyper::{Response, StatusCode};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::net::connection::BoxError;

/// Frames up to this size are copied behind the head, for one write;
/// larger ones go out as they are, beside it.
const COPY_BYTES: usize = 16 << 10;

/// Writes `response` to `io`; with `head_only` (a `HEAD` request) its body
/// is not sent. Returns whether the answer asked to close the connection.
pub(crate) async fn write<I, B>(
    io: &mut I,
    response: Response<B>,
    head_only: bool,
) -> Result<bool, BoxError>
where
    I: AsyncWrite + Unpin,
    B: Body<Data = Bytes, Error: Into<BoxError>>,
{
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let bodiless = head_only
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // One pass over the answer's headers for the three that shape the
    // head.
    let (mut closes, mut declared, mut dated) = (false, None, false);
    for (name, value) in &parts.headers {
        if name == CONNECTION {
            closes |= value.as_bytes().eq_ignore_ascii_case(b"close");
        } else if name == CONTENT_LENGTH {
            declared = value.to_str().ok().and_then(|v| v.parse::<u64>().ok());
        } else if name == DATE {
            dated = true;
        }
    }
    let known = declared.or_else(|| body.size_hint().exact());
    let chunked = known.is_none() && !bodiless;

    // The head, and behind it a small body, are written into the thread's
    // reused buffer: no allocation per answer.
    let mut head =
        Head::take(256 + known.filter(|&n| n <= COPY_BYTES as u64).unwrap_or(0) as usize);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == TRANSFER_ENCODING {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if declared.is_none() && !(status.is_informational() || status == StatusCode::NO_CONTENT) {
        if let Some(length) = known {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
    }
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if !dated {
        head.extend_from_slice(b"date: ");
        date(&mut head);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");

    let mut body = std::pin::pin!(body);
    // Every answer ends flushed: over TLS the last record may still be in
    // the session's buffer (over TCP the flush does nothing).
    if bodiless {
        io.write_all(&head).await?;
        io.flush().await?;
        head.give_back();
        return Ok(closes);
    }
    if !chunked {
        // The first frame (for most answers, the only one) goes with the
        // head.
        let mut head_sent = false;
        while let Some(data) = next_data(&mut body).await? {
            if head_sent {
                io.write_all(&data).await?;
            } else if data.len() <= COPY_BYTES {
                head.extend_from_slice(&data);
                io.write_all(&head).await?;
            } else {
                write_both(io, &head, &data).await?;
            }
            head_sent = true;
        }
        if !head_sent {
            io.write_all(&head).await?;
        }
        io.flush().await?;
        head.give_back();
        return Ok(closes);
    }
    io.write_all(&head).await?;
    io.flush().await?;
    head.give_back();
    let mut size = Vec::with_capacity(20);
    while let Some(data) = next_data(&mut body).await? {
        if data.is_empty() {
            continue;
        }
        size.clear();
        // Written into the reused line, not a new string per chunk.
        write!(size, "{:x}\r\n", data.len())?;
        write_both(io, &size, &data).await?;
        io.write_all(b"\r\n").await?;
        io.flush().await?;
    }
    io.write_all(b"0\r\n\r\n").await?;
    io.flush().await?;
    Ok(closes)
}

/// An answer's head: the I/O thread's buffer, taken for one answer and
/// given back once it is written. Answers the thread writes meanwhile (it
/// serves other connections while this one waits to write) take new ones.
struct Head(Vec<u8>);

thread_local! {
    static HEAD: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A buffer larger than this is not kept for the next answer.
const KEPT_HEAD_BYTES: usize = 2 * COPY_BYTES;

impl Head {
    fn take(capacity: usize) -> Head {
        let mut buffer = HEAD.take();
        buffer.clear();
        buffer.reserve(capacity);
        Head(buffer)
    }

    fn give_back(self) {
        if self.0.capacity() <= KEPT_HEAD_BYTES {
            HEAD.set(self.0);
        }
    }
}

impl std::ops::Deref for Head {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for Head {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

/// The body's next data frame (trailers are not sent over HTTP/1).
async fn next_data<B>(body: &mut Pin<&mut B>) -> Result<Option<Bytes>, BoxError>
where
    B: Body<Data = Bytes, Error: Into<BoxError>>,
{
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// Writes `first` then `second`, in as few writes as the socket takes.
async fn write_both<I: AsyncWrite + Unpin>(
    io: &mut I,
    first: &[u8],
    second: &[u8],
) -> io::Result<()> {
    let (mut first, mut second) = (first, second);
    while !first.is_empty() {
        let n = io
            .write_vectored(&[IoSlice::new(first), IoSlice::new(second)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        if n < first.len() {
            first = &first[n..];
        } else {
            second = &second[n - first.len()..];
            first = &[];
        }
    }
    io.write_all(second).await
}

/// Appends today's HTTP date, formatted once a second per thread.
fn date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}
