//! Building responses: JSON bodies, and errors in the protocol's
//! `{"error": "..."}` form with the status their kind maps to.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use wirespeed_core::{Error, ErrorKind};

/// The response body type of every endpoint.
pub(crate) type Body = Full<Bytes>;

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A 200 response with a JSON body.
pub(crate) fn json(body: impl Into<Bytes>) -> Response<Body> {
    json_with_status(StatusCode::OK, body)
}

/// A 200 response in Triton's binary tensor data extension: a JSON header
/// of `header_len` bytes, then raw output bytes.
pub(crate) fn binary(body: Vec<u8>, header_len: usize) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
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
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, JSON);
    response
}

/// A 200 response with `value` serialized.
pub(crate) fn json_value(value: &serde_json::Value) -> Response<Body> {
    json(value.to_string())
}

/// The error response for `error` to request `id`. Server errors are
/// logged here in full, with the id, and reach the client only as a generic
/// message with the same id.
pub(crate) fn error(error: &Error, id: u64) -> Response<Body> {
    let kind = error.kind();
    let message = public_message(error, id);
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
        ErrorKind::Overloaded => {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    response
}

/// What the client is told of `error`: the message of a client error; for
/// a server error, only that it happened and the request id, which the log
/// line (written here) also carries.
pub(crate) fn public_message(error: &Error, id: u64) -> String {
    if error.kind().is_client_error() {
        return error.message().to_owned();
    }
    tracing::error!(request_id = id, error = %error, "request failed");
    format!("internal server error (request id {id}); the server log has the details")
}
