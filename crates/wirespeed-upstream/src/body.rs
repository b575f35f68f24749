//! Request bodies. [`Chunks`] (`wirespeed_http`'s): buffers that already
//! exist (a message's header and each tensor's own bytes), handed to hyper
//! one by one, never joined. [`CallBody`] adds the body of a
//! client-streaming call, whose messages are sent as they are made
//! ([`MessageSender`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
pub use wirespeed_http::Chunks;

/// The body of a gRPC call: existing buffers, or a client stream's
/// messages as they are sent.
#[derive(Debug)]
pub enum CallBody {
    /// Buffers sent in order.
    Chunks(Chunks),
    /// Frames from a [`MessageSender`]; an error resets the call.
    Stream(MessageStream),
}

/// A client stream's frames, and whether its sender gave it up.
#[derive(Debug)]
pub struct MessageStream {
    frames: mpsc::Receiver<Result<Bytes, Aborted>>,
    abandoned: Arc<AtomicBool>,
}

impl MessageStream {
    /// The flag its sender raises when it gives the stream up.
    pub(crate) fn abandoned(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abandoned)
    }
}

impl From<Chunks> for CallBody {
    fn from(chunks: Chunks) -> CallBody {
        CallBody::Chunks(chunks)
    }
}

/// Why a client stream was given up: its sender failed (the client's
/// body did not encode), so the call is reset rather than half-closed,
/// and the upstream never takes a cut stream for a whole one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the request stream was abandoned: {0}")]
pub struct Aborted(pub String);

impl Body for CallBody {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Aborted>>> {
        match self.get_mut() {
            CallBody::Chunks(chunks) => Pin::new(chunks)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
            CallBody::Stream(stream) => stream
                .frames
                .poll_recv(cx)
                .map(|item| item.map(|r| r.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            CallBody::Chunks(chunks) => chunks.is_end_stream(),
            CallBody::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            CallBody::Chunks(chunks) => chunks.size_hint(),
            CallBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// Sends a client stream's messages, each framed, as they are made; the
/// call's request ends when the sender is dropped.
#[derive(Debug)]
pub struct MessageSender {
    frames: mpsc::Sender<Result<Bytes, Aborted>>,
    abandoned: Arc<AtomicBool>,
}

/// A client stream: the sender, and the body for
/// [`Upstream::open`](crate::Upstream::open). `depth` messages may wait
/// unsent before [`MessageSender::send`] waits for the upstream to take
/// them.
pub fn message_stream(depth: usize) -> (MessageSender, CallBody) {
    let (frames, receiver) = mpsc::channel(depth.max(1) * 2);
    let abandoned = Arc::new(AtomicBool::new(false));
    let stream = MessageStream {
        frames: receiver,
        abandoned: Arc::clone(&abandoned),
    };
    (
        MessageSender { frames, abandoned },
        CallBody::Stream(stream),
    )
}

impl MessageSender {
    /// Sends one message (its encoding, unframed). `false` when the call
    /// has ended and takes no more.
    pub async fn send(&self, message: Bytes) -> bool {
        let prefix = crate::grpc::message_prefix(message.len());
        self.frames
            .send(Ok(Bytes::copy_from_slice(&prefix)))
            .await
            .is_ok()
            && self.frames.send(Ok(message)).await.is_ok()
    }

    /// Gives the stream up: the call is reset, saying `why`.
    pub async fn abort(self, why: String) {
        self.abandoned.store(true, Ordering::Release);
        let _ = self.frames.send(Err(Aborted(why))).await;
    }
}
