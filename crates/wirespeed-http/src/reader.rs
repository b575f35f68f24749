//! A request body read frame by frame, decompressed as it arrives when it
//! is, under a size limit (of the decompressed bytes) and two timeouts:
//! each frame within the idle timeout, the whole body within the total.

use std::time::{Duration, Instant};

use crate::incoming::RequestBody;
use bytes::Bytes;
use http_body_util::BodyExt;
use wirespeed_core::{Error, ErrorKind};

use crate::coding::{Coding, Inflater};

/// What a body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// The most bytes (decompressed).
    pub max_bytes: usize,
    /// The longest pause between two frames.
    pub idle: Duration,
    /// The longest the whole body may take.
    pub total: Duration,
}

/// The error for a body past `limit` bytes.
pub fn too_large(limit: u64) -> Error {
    Error::new(
        ErrorKind::PayloadTooLarge,
        format!("request body is larger than the {limit}-byte limit"),
    )
}

/// The body's frames, with the size limit and the timeouts enforced as
/// they arrive: each frame must come within the idle timeout, and the whole
/// body within the request timeout.
pub struct BodyReader {
    body: Source,
    received: u64,
    limit: u64,
    idle: Duration,
    deadline: Instant,
    timeout: Duration,
    /// Time spent decoding what was read: parsing JSON, copying raw bytes.
    pub decode: Duration,
}

/// Where a body's bytes come from: hyper's frames as they are, or
/// decompressed.
enum Source {
    Plain(RequestBody),
    Inflating(Inflater),
}

impl Source {
    async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        match self {
            Source::Plain(body) => loop {
                match body.frame().await? {
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => return Some(Ok(data)),
                        Err(_) => continue,
                    },
                    Err(e) => {
                        return Some(Err(Error::malformed(format!(
                            "could not read the request body: {e}"
                        ))))
                    }
                }
            },
            Source::Inflating(inflater) => inflater.next().await.transpose(),
        }
    }
}

impl BodyReader {
    /// A reader of `body` as it is.
    pub fn new(body: RequestBody, limits: &BodyLimits) -> BodyReader {
        BodyReader::decoding(body, None, limits)
    }

    /// A reader of `body`, decompressed from `coding` if it has one: the
    /// limit counts decompressed bytes.
    pub fn decoding(body: RequestBody, coding: Option<Coding>, limits: &BodyLimits) -> BodyReader {
        let body = match coding {
            Some(coding) => Source::Inflating(Inflater::new(body, coding)),
            None => Source::Plain(body),
        };
        BodyReader {
            body,
            received: 0,
            limit: limits.max_bytes as u64,
            idle: limits.idle,
            deadline: Instant::now() + limits.total,
            timeout: limits.total,
            decode: Duration::ZERO,
        }
    }

    /// The next data frame, or `None` at the end of the body. Cancel-safe,
    /// as a `select!` with the offloaded decoder needs: nothing read is
    /// lost if the future is dropped before it ends.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Error> {
        let wait = (Instant::now() + self.idle).min(self.deadline);
        let data = match tokio::time::timeout_at(wait.into(), self.body.next()).await {
            Ok(Some(data)) => data?,
            Ok(None) => return Ok(None),
            Err(_) if Instant::now() >= self.deadline => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the request body did not arrive within {} s ({} bytes came)",
                        self.timeout.as_secs_f64(),
                        self.received
                    ),
                ))
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the request body stalled for {} s after {} bytes",
                        self.idle.as_secs_f64(),
                        self.received
                    ),
                ))
            }
        };
        self.received += data.len() as u64;
        if self.received > self.limit {
            return Err(too_large(self.limit));
        }
        Ok(Some(data))
    }

    /// The bytes read so far (decompressed).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The most bytes the body may have.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Reads and drops the rest of the body, up to what the limit still
    /// allows and within the timeouts, before an error is answered. A client
    /// that sends its whole body before reading the answer (most do) then
    /// gets the error rather than a broken pipe, and the connection stays
    /// usable. It costs no more than accepting the body would have: the
    /// bytes are read, not decoded.
    pub async fn discard(&mut self) {
        while let Ok(Some(_)) = self.next().await {}
    }
}
