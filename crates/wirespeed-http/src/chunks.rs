//! A body of buffers that already exist, sent in order, never joined.

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
}

impl Chunks {
    /// A body of `parts`, in order.
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Chunks {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        let len = parts.iter().map(|b| b.len() as u64).sum();
        Chunks { parts, len }
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
        Poll::Ready(this.parts.pop_front().map(|part| {
            this.len -= part.len() as u64;
            Ok(Frame::data(part))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}
