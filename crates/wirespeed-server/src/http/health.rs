//! `GET /v2/health/live`, `GET /v2/health/ready` and
//! `GET /v2/models/{name}[/versions/{v}]/ready`: the status code is the
//! answer. And KServe v1's liveness, `GET /`.

use std::sync::atomic::Ordering;

use hyper::{Response, StatusCode};
use serde_json::json;
use wirespeed_core::Error;

use super::response::{self, Body};
use super::router::ModelRef;
use crate::AppState;

/// Live while the process answers at all.
pub(crate) fn live() -> Response<Body> {
    response::json_value(&json!({ "live": true }))
}

/// KServe v1's liveness: `{"status": "alive"}`, as KServe's model server
/// and its client (`InferenceRESTClient(protocol="v1").is_server_live`)
/// spell it.
pub(crate) fn alive() -> Response<Body> {
    response::json_value(&json!({ "status": "alive" }))
}

/// Ready once every model is loaded, until shutdown begins.
pub(crate) fn ready(state: &AppState) -> Response<Body> {
    let ready = state.ready.load(Ordering::Acquire);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    response::json_with_status(status, json!({ "ready": ready }).to_string())
}

/// A model is ready when it is served (models load before the server
/// listens) and the server is not shutting down.
pub(crate) fn model_ready(state: &AppState, model: ModelRef<'_>) -> Result<Response<Body>, Error> {
    state.models.get(model.name, model.version)?;
    let ready = state.ready.load(Ordering::Acquire);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok(response::json_with_status(
        status,
        json!({ "name": model.name, "ready": ready }).to_string(),
    ))
}
