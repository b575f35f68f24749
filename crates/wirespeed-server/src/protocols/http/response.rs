//! Building responses: JSON bodies, and errors in the protocol's
//! `{"error": "..."}` form with the status their kind maps to.

use bytes::Bytes;
use hyper::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::{Response, StatusCode};
use wirespeed_core::{Error, ErrorKind};

use wirespeed_engine::pipeline::public_message;
use wirespeed_engine::timing::SERVER_TIMING;
pub(crate) use wirespeed_http::Body;

/// A 200 response with a JSON body.
pub(crate) fn json(body: impl Into<Bytes>) -> Response<Body> {
    json_with_status(StatusCode::OK, body)
}

/// A 200 response in Triton's binary tensor data extension: a JSON header
/// of `header_len` bytes, then raw output bytes.
pub(crate) fn binary(body: Body, header_len: usize) -> Response<Body> {
    let mut response = Response::new(body);
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
    wirespeed_http::json_response(status, body)
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

/// Adds the `Server-Timing` header, and flags an answer made of the
/// model's default outputs (`default`).
pub(crate) fn stamp(response: &mut Response<Body>, timing: &str, default: bool) {
    // The names as constants: a `&str` name is copied into a new
    // allocation at each insert.
    const SERVER_TIMING_NAME: HeaderName = HeaderName::from_static(SERVER_TIMING);
    const DEFAULT_ANSWER_NAME: HeaderName = HeaderName::from_static(DEFAULT_ANSWER);
    if let Ok(value) = HeaderValue::try_from(timing) {
        response.headers_mut().insert(SERVER_TIMING_NAME, value);
    }
    if default {
        response
            .headers_mut()
            .insert(DEFAULT_ANSWER_NAME, HeaderValue::from_static("true"));
    }
}
