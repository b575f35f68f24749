//! `google.api.HttpBody`: a method's raw HTTP body, not JSON.
//!
//! A request whose body (`body: "*"`, or the `body` field) is an
//! `HttpBody` takes the request's bytes as `data` and its `Content-Type`
//! as `content_type`; an answer that is an `HttpBody` is its `data`, sent
//! with its `content_type`. grpc-gateway and Envoy treat the type so, for
//! services that serve files, images or their own formats.

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use prost::Message;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value};
use wirespeed_http::Body;
use wirespeed_transcode::BodyTarget;

/// The message's full name.
const HTTP_BODY: &str = "google.api.HttpBody";

fn is_http_body(desc: &MessageDescriptor) -> bool {
    desc.full_name() == HTTP_BODY
}

/// Where a request's raw body goes, when the route's body is an
/// `HttpBody`: the fields leading to it (none for the whole request).
pub(crate) fn request_target(
    input: &MessageDescriptor,
    body: &BodyTarget,
) -> Option<Vec<FieldDescriptor>> {
    match body {
        BodyTarget::Whole if is_http_body(input) => Some(Vec::new()),
        BodyTarget::Field(fields) => match fields.last().map(FieldDescriptor::kind) {
            Some(Kind::Message(m)) if is_http_body(&m) && !fields.last()?.is_list() => {
                Some(fields.clone())
            }
            _ => None,
        },
        _ => None,
    }
}

/// The request message (without the path's and query's fields) holding
/// `data` and the request's content type in the `HttpBody` at `path`.
pub(crate) fn request(
    input: &MessageDescriptor,
    path: &[FieldDescriptor],
    headers: &HeaderMap,
    data: Vec<u8>,
) -> Vec<u8> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body_desc = match path.last().map(FieldDescriptor::kind) {
        Some(Kind::Message(m)) => m,
        _ => input.clone(),
    };
    let mut body = DynamicMessage::new(body_desc);
    body.set_field_by_name("content_type", Value::String(content_type));
    body.set_field_by_name("data", Value::Bytes(Bytes::from(data)));
    // Wrapped in each message on the way, innermost first.
    let mut message = body;
    for (i, field) in path.iter().enumerate().rev() {
        let parent = match i.checked_sub(1).map(|p| path[p].kind()) {
            Some(Kind::Message(m)) => m,
            _ => input.clone(),
        };
        let mut outer = DynamicMessage::new(parent);
        outer.set_field(field, Value::Message(message));
        message = outer;
    }
    message.encode_to_vec()
}

/// Whether a method's answers are `HttpBody`s to send as they are (a
/// `response_body` picks a field, which is printed as JSON).
pub(crate) fn answers_raw(output: &MessageDescriptor, response_body: bool) -> bool {
    is_http_body(output) && !response_body
}

/// An `HttpBody`'s content type and data.
pub(crate) fn parts(output: &MessageDescriptor, bytes: &[u8]) -> Result<(String, Bytes), String> {
    let message = DynamicMessage::decode(output.clone(), bytes).map_err(|e| {
        format!(
            "the upstream's answer does not decode as {}: {e}",
            output.full_name()
        )
    })?;
    let content_type = match message.get_field_by_name("content_type").as_deref() {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let data = match message.get_field_by_name("data").as_deref() {
        Some(Value::Bytes(b)) => b.clone(),
        _ => Bytes::new(),
    };
    Ok((content_type, data))
}

/// The answer of a unary call whose output is an `HttpBody`: its data,
/// with its content type; `None` for any other output.
pub(crate) fn answer(
    output: &MessageDescriptor,
    bytes: &[u8],
) -> Option<Result<Response<Body>, String>> {
    if !is_http_body(output) {
        return None;
    }
    let (content_type, data) = match parts(output, bytes) {
        Ok(parts) => parts,
        Err(e) => return Some(Err(e)),
    };
    let mut response = Response::new(Body::new(data));
    *response.status_mut() = StatusCode::OK;
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        if !content_type.is_empty() {
            response.headers_mut().insert(CONTENT_TYPE, value);
        }
    }
    Some(Ok(response))
}
