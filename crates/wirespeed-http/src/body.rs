//! The response body every endpoint answers with: whole, in parts that
//! already exist, or streamed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use crate::Chunks;

/// A response with `status` and a JSON body.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The response body type of every endpoint: a whole body, one in parts
/// (a message's header and each tensor's own buffer, never joined), or (a
/// transcoded server stream) frames made as they come.
pub enum Body {
    /// The whole body at once (`None` once sent, or when it is empty).
    Full(Option<Bytes>),
    /// The whole body, in parts sent in order; its length is known.
    Chunks(Chunks),
    /// Frames made as they come: the seam where one request is answered
    /// with many messages (a transcoded server stream today).
    Stream(Pin<Box<dyn hyper::body::Body<Data = Bytes, Error = BoxError> + Send>>),
}

/// Why a streamed body was cut.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body {
    /// A whole body.
    pub fn new(bytes: impl Into<Bytes>) -> Body {
        let bytes = bytes.into();
        Body::Full((!bytes.is_empty()).then_some(bytes))
    }

    /// A whole body of `parts`, sent in order without joining them.
    pub fn chunks(parts: impl IntoIterator<Item = Bytes>) -> Body {
        Body::Chunks(Chunks::new(parts))
    }

    /// A body streamed from `stream`.
    pub fn stream(
        stream: impl hyper::body::Body<Data = Bytes, Error = BoxError> + Send + 'static,
    ) -> Body {
        Body::Stream(Box::pin(stream))
    }

    /// The whole body as one buffer (parts joined), or the body itself
    /// when it is a stream.
    pub fn into_whole(self) -> Result<Bytes, Body> {
        match self {
            Body::Full(full) => Ok(full.unwrap_or_default()),
            Body::Chunks(chunks) => Ok(chunks.join()),
            stream => Err(stream),
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Body::Full(full) => Poll::Ready(full.take().map(|data| Ok(Frame::data(data)))),
            Body::Chunks(chunks) => Pin::new(chunks)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
            Body::Stream(stream) => stream.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(full) => full.is_none(),
            Body::Chunks(chunks) => chunks.is_end_stream(),
            Body::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(full) => SizeHint::with_exact(full.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Chunks(chunks) => chunks.size_hint(),
            Body::Stream(stream) => stream.size_hint(),
        }
    }
}
