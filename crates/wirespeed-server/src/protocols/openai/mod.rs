//! The OpenAI API on the REST port: `GET /v1/models` (and a model),
//! `POST /v1/embeddings`, `POST /v1/chat/completions` and
//! `POST /v1/completions`, in OpenAI's shapes, for the official SDKs.
//!
//! `GET /v1/models` and `GET /v1/models/{model}` are KServe v1's and TF
//! Serving's paths too: their answers carry every protocol's fields
//! (KServe's `models`, TF Serving's `model_version_status`, OpenAI's
//! `object` and `data`, `id`), and each client reads its own
//! (`tfserving/rest.rs` adds [`list_fields`] and [`model_fields`]).
//!
//! Every request is read whole (they are small: texts and messages) and
//! parsed once (`request.rs`); the model it names then takes the one
//! pipeline (`wirespeed-engine/src/pipeline.rs`), which looks it up once,
//! so it queues, batches, is counted and traced like any other. The
//! request's codec (`call.rs`) becomes the one that model needs: a model on
//! another server's OpenAI API gets the request as its client wrote it,
//! and its upstream's answer goes back as written (`relay.rs`); a model of
//! ours has its endpoint's fields checked. Embeddings are written from the
//! embedder's output tensor by the V2 encoder's number writer, or as base64
//! of its bytes; a chat's messages become the prompt through the model's
//! own chat template, and its answer streams as server-sent events as the
//! model sends its tokens (`completions.rs`). Errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` ([`error`]).

mod ask;
mod call;
mod chunks;
pub(crate) mod completions;
pub(crate) mod embeddings;
mod relay;
mod request;

use std::time::{SystemTime, UNIX_EPOCH};

use hyper::StatusCode;
use serde_json::{json, Map, Value};
use wirespeed_core::{Error, ErrorKind, Fault};

use crate::protocols::http::body::RestRequest;
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::pipeline::{self, RequestContext, Target};

/// Who owns the models, as `/v1/models` says.
const OWNED_BY: &str = "wirespeed";

/// The OpenAI endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Embeddings,
    ChatCompletions,
    Completions,
}

/// When the models were made, as `/v1/models` says: the process's start.
fn created() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(now)
}

/// Seconds since the epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// OpenAI's fields of the model list, added to KServe's `{"models": [...]}`.
pub(crate) fn list_fields(front: &Front, answer: &mut Map<String, Value>) {
    let data: Vec<Value> = front
        .engine
        .models
        .names()
        .iter()
        .map(|name| model_object(name))
        .collect();
    answer.insert("object".into(), json!("list"));
    answer.insert("data".into(), Value::Array(data));
}

/// OpenAI's fields of one model, added to TF Serving's status.
pub(crate) fn model_fields(name: &str, answer: &mut Map<String, Value>) {
    if let Value::Object(fields) = model_object(name) {
        answer.extend(fields);
    }
}

fn model_object(name: &str) -> Value {
    json!({ "id": name, "object": "model", "created": created(), "owned_by": OWNED_BY })
}

/// OpenAI's error body for `error` (whose client-facing text is
/// `message`), with its status: 400 `invalid_request_error` for the
/// client's mistakes (404 `model_not_found` for a model not served), 401
/// for a key, 429 and 503 for overload, 500 `server_error` otherwise.
pub(crate) fn error_with(
    error: &Error,
    message: &str,
    param: Option<&str>,
) -> hyper::Response<Body> {
    let kind = error.kind();
    // A full queue is OpenAI's 429 (V2's 503): its SDKs wait and retry it.
    let status = match kind {
        ErrorKind::Overloaded => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    let (kind_name, code) = match kind {
        ErrorKind::ModelNotFound | ErrorKind::VersionNotFound => {
            ("invalid_request_error", Some("model_not_found"))
        }
        ErrorKind::Unauthenticated => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::Overloaded => ("rate_limit_error", None),
        _ if kind.fault() == Fault::Client => ("invalid_request_error", None),
        _ => ("server_error", None),
    };
    let body = json!({
        "error": { "message": message, "type": kind_name, "param": param, "code": code }
    });
    response::json_with_status(status, body.to_string())
}

/// OpenAI's error body for `error` to request `id`.
pub(crate) fn error(error: &Error, id: u64) -> hyper::Response<Body> {
    error_with(error, &pipeline::public_message(error, id), None)
}

/// A request refused before it reaches a model: the error and the field
/// it names.
pub(crate) type Refusal = (Error, Option<&'static str>);

/// Answers one request to an OpenAI endpoint: its body read whole (texts
/// and messages are small) and parsed once, then the model it names looked
/// up once, by the engine, whose codec takes it from there (`call.rs`).
pub(crate) async fn answer(
    front: &Front,
    mut context: RequestContext,
    endpoint: Endpoint,
    request: hyper::Request<wirespeed_http::RequestBody>,
) -> hyper::Response<Body> {
    let mut rest = RestRequest::new(front, request);
    let body = match rest.read_json(&mut context.stages).await {
        Ok(body) => body,
        Err(e) => return error(&e, context.id),
    };
    let request = match request::Request::read(body) {
        Ok(request) => request,
        Err(refusal) => return refused(refusal),
    };
    let model = request.model.clone();
    let codec = call::Call::new(endpoint, context.id, request);
    front
        .engine
        .infer(context, Target::new(&model, None), codec)
        .await
}

/// The answer that refuses a request as `refusal` says.
fn refused((error, param): Refusal) -> hyper::Response<Body> {
    error_with(&error, error.message(), param)
}

/// Checks that `object` has only the keys OpenAI's endpoint takes, in
/// OpenAI's words for one it does not.
fn known_keys(object: &Map<String, Value>, known: &[&str]) -> Result<(), Error> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(Error::invalid_input(format!(
            "Unrecognized request argument supplied: {key}"
        ))),
        None => Ok(()),
    }
}
