//! Clipper's query frontend: `POST /{app}/predict`, where the application
//! is the model of the same name. `{"input": ...}` is one query and
//! `{"input_batch": [...]}` one query per row; the answer is the model's
//! first output for each. Clipper refused integer literals for float
//! inputs; wirespeed takes them. Errors are Clipper's `{"error", "cause"}`.

use std::sync::atomic::Ordering;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use wirespeed_core::{Error, ErrorKind};
use wirespeed_json::RequestDecoder;

use super::body::{decode_json_body, model_for, refuse};
use super::response::{self, Body};
use crate::timing::{timed, Stages};
use crate::{compute, AppState};

/// `POST /{app}/predict`, answering errors in Clipper's own shape.
pub(crate) async fn predict(
    state: &AppState,
    app: &str,
    request: Request<Incoming>,
    id: u64,
) -> Response<Body> {
    answer(state, app, request)
        .await
        .unwrap_or_else(|e| error(&e, id))
}

async fn answer(
    state: &AppState,
    app: &str,
    request: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let mut stages = Stages::start();
    let (parts, body) = request.into_parts();
    let (model, body) = model_for(state, app, None, body)
        .await
        .map_err(|e| Error::new(e.kind(), format!("no application '{app}': {}", e.message())))?;
    let metadata = model.metadata();
    let [input] = metadata.inputs.as_slice() else {
        let e = Error::invalid_input(format!(
            "application '{app}' is model '{}', which has {} inputs; Clipper queries feed one",
            metadata.name,
            metadata.inputs.len()
        ));
        return Err(refuse(body, &state.limits, e).await);
    };
    let decoder = RequestDecoder::clipper(
        state.decode_options.clone(),
        (input.name.clone(), input.datatype),
    );
    let (request, format, decode) = decode_json_body(
        &parts.headers,
        body,
        &state.limits,
        decoder,
        &state.decode_options,
    )
    .await?;
    stages.body_read(decode);
    let mut outputs = compute::run(state, &model, request.inputs, &[], &mut stages).await?;
    if outputs.is_empty() {
        return Err(Error::internal(format!(
            "model '{}' produced no output",
            metadata.name
        )));
    }
    let output = outputs.swap_remove(0);
    let rows = output.shape.first().copied().unwrap_or(1) as u64;
    let first_id = state.clipper_queries.fetch_add(rows, Ordering::Relaxed);
    let mut out = Vec::new();
    timed(&mut stages.encode, || {
        wirespeed_json::encode_clipper_response(&output, format, first_id, &mut out);
    });
    let mut answer = response::json(out);
    stages.stamp(&mut answer);
    Ok(answer)
}

/// Clipper's error body: a short title and the cause.
pub(crate) fn error(e: &Error, id: u64) -> Response<Body> {
    let kind = e.kind();
    let cause = response::public_message(e, id);
    let title = match kind {
        ErrorKind::MalformedRequest => "Json error",
        ErrorKind::InvalidInput => "Invalid input",
        ErrorKind::ModelNotFound | ErrorKind::VersionNotFound => "Application not found",
        ErrorKind::PayloadTooLarge | ErrorKind::LimitExceeded | ErrorKind::HeadersTooLarge => {
            "Request too large"
        }
        ErrorKind::Overloaded => "Overloaded",
        ErrorKind::Unauthenticated => "Unauthenticated",
        ErrorKind::Timeout => "Request timeout",
        ErrorKind::Internal => "Internal error",
        _ => "Bad request",
    };
    let status =
        StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response::json_with_status(
        status,
        json!({ "error": title, "cause": cause }).to_string(),
    )
}
