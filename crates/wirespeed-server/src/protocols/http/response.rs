//! Building responses: JSON bodies, and errors in the protocol's
//! `{"error": "..."}` form with the status their kind maps to.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use wirespeed_core::{Error, ErrorKind};

use crate::serve::pipeline::public_message;
use crate::serve::timing::SERVER_TIMING;

/// The response body type of every endpoint: a whole body, or (a
/// transcoded server stream) frames made as they come.
pub(crate) enum Body {
    Full(Full<Bytes>),
    /// Today only the transcoder streams; the seam where a codec answers
    /// one request with many responses (`docs/ARCHITECTURE.md`).
    Stream(Pin<Box<dyn hyper::body::Body<Data = Bytes, Error = BoxError> + Send>>),
}

/// Why a streamed body was cut.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body {
    /// A whole body.
    pub(crate) fn new(bytes: impl Into<Bytes>) -> Body {
        Body::Full(Full::new(bytes.into()))
    }

    /// A body streamed from `stream`.
    #[cfg_attr(
        not(feature = "proxy"),
        expect(dead_code, reason = "only the transcoder streams in this build")
    )]
    pub(crate) fn stream(
        stream: impl hyper::body::Body<Data = Bytes, Error = BoxError> + Send + 'static,
    ) -> Body {
        Body::Stream(Box::pin(stream))
    }

    /// The whole body, or `None` for a stream.
    pub(crate) fn into_full(self) -> Result<Full<Bytes>, Body> {
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

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A 200 response with a JSON body.
pub(crate) fn json(body: impl Into<Bytes>) -> Response<Body> {
    json_with_status(StatusCode::OK, body)
}

/// A 200 response in Triton's binary tensor data extension: a JSON header
/// of `header_len` bytes, then raw output bytes.
pub(crate) fn binary(body: Vec<u8>, header_len: usize) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        super::body::BINARY_HEADER_LENGTH,
        HeaderValue::from(header_len),
    );
    response
}

/// A response with `status` and a JSON body.
pub(crate) fn json_with_status(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, JSON);
    response
}

/// A 200 response with `value` serialized.
pub(crate) fn json_value(value: &serde_json::Value) -> Response<Body> {
    json(value.to_string())
}

/// The error response for `error` to request `id`, in the protocol's
/// `{"error": "..."}` form.
pub(crate) fn error(error: &Error, id: u64) -> Response<Body> {
    error_with(error, &public_message(error, id))
}

/// The error response for `error`, whose client-facing text is `message`,
/// with the status its kind maps to.
pub(crate) fn error_with(error: &Error, message: &str) -> Response<Body> {
    let kind = error.kind();
    let status =
        StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({ "error": message });
    let mut response = json_with_status(status, body.to_string());
    let headers = response.headers_mut();
    match kind {
        // The body was left unread, so this connection cannot carry another request.
        ErrorKind::PayloadTooLarge | ErrorKind::Timeout => {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        ErrorKind::Overloaded | ErrorKind::Unavailable => {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        ErrorKind::Unauthenticated => {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        _ => {}
    }
    response
}

/// The header that flags an answer made of the model's default outputs.
pub(crate) const DEFAULT_ANSWER: &str = "wirespeed-default";

/// Flags an answer made of the model's default outputs.
pub(crate) fn mark_default(response: &mut Response<Body>) {
    response
        .headers_mut()
        .insert(DEFAULT_ANSWER, HeaderValue::from_static("true"));
}

/// Adds the `Server-Timing` header.
pub(crate) fn stamp(response: &mut Response<Body>, timing: &str) {
    if let Ok(value) = HeaderValue::try_from(timing) {
        response.headers_mut().insert(SERVER_TIMING, value);
    }
}
