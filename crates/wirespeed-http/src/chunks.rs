//! A body of buffers that already exist, sent in order, never joined, and
//! its trailers, if it has any.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// Buffers sent in order as the body's data frames.
#[derive(Debug, Clone, Default)]
pub struct Chunks {
    parts: VecDeque<Bytes>,
    len: u64,
    /// Boxed: most bodies have none, and `Body` holds a `Chunks` inline.
    trailers: Option<Box<hyper::HeaderMap>>,
}

impl Chunks {
    /// A body of `parts`, in order.
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Chunks {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        let len = parts.iter().map(|b| b.len() as u64).sum();
        Chunks {
            parts,
            len,
            trailers: None,
        }
    }

    /// The same body, ending with `trailers` (a gRPC answer's status).
    pub fn with_trailers(mut self, trailers: hyper::HeaderMap) -> Chunks {
        self.trailers = Some(Box::new(trailers));
        self
    }

    /// The body's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts joined in one buffer (one copy, none for a single part):
    /// for what needs the body whole, as compression does.
    pub fn join(mut self) -> Bytes {
        if self.parts.len() <= 1 {
            return self.parts.pop_front().unwrap_or_default();
        }
        let mut whole = Vec::with_capacity(self.len as usize);
        for part in &self.parts {
            whole.extend_from_slice(part);
        }
        Bytes::from(whole)
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(part) = this.parts.pop_front() {
            this.len -= part.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(part))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(*t))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty() && self.trailers.is_none()
    }

    /// Exact, but for a body with trailers, a gRPC answer: its length goes
    /// unsaid (no `content-length`), as tonic's and Triton's answers.
    fn size_hint(&self) -> SizeHint {
        match self.trailers {
            None => SizeHint::with_exact(self.len),
            Some(_) => SizeHint::default(),
        }
    }
}
