//! The response body every endpoint answers with: whole, or streamed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

/// A response with `status` and a JSON body.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The response body type of every endpoint: a whole body, or (a
/// transcoded server stream) frames made as they come.
pub enum Body {
    /// The whole body at once.
    Full(Full<Bytes>),
    /// Frames made as they come: the seam where one request is answered
    /// with many messages (a transcoded server stream today).
    Stream(Pin<Box<dyn hyper::body::Body<Data = Bytes, Error = BoxError> + Send>>),
}

/// Why a streamed body was cut.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body {
    /// A whole body.
    pub fn new(bytes: impl Into<Bytes>) -> Body {
        Body::Full(Full::new(bytes.into()))
    }

    /// A body streamed from `stream`.
    pub fn stream(
        stream: impl hyper::body::Body<Data = Bytes, Error = BoxError> + Send + 'static,
    ) -> Body {
        Body::Stream(Box::pin(stream))
    }

    /// The whole body, or `None` for a stream.
    pub fn into_full(self) -> Result<Full<Bytes>, Body> {
        match self {
            Body::Full(full) => Ok(full),
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
            Body::Full(full) => Pin::new(full)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
            Body::Stream(stream) => stream.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(full) => full.is_end_stream(),
            Body::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(full) => full.size_hint(),
            Body::Stream(stream) => stream.size_hint(),
        }
    }
}
