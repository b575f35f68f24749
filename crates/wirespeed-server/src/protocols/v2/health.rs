//! `GET /v2/health/live`, `GET /v2/health/ready` and
//! `GET /v2/models/{name}[/versions/{v}]/ready`: the status code is the
//! answer. And KServe v1's liveness, `GET /`.

use hyper::{Response, StatusCode};
use serde_json::json;
use wirespeed_core::Error;

use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::pipeline::Target;

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

/// Ready while every model is ready, until shutdown begins.
pub(crate) fn ready(front: &Front) -> Response<Body> {
    let ready = front.engine.server_ready();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    response::json_with_status(status, json!({ "ready": ready }).to_string())
}

/// A model is ready when it can answer (a model in front of another server
/// is not while that server does not answer) and the server is not
/// shutting down. When it is not, `reason` says why.
pub(crate) fn model_ready(front: &Front, model: Target<'_>) -> Result<Response<Body>, Error> {
    let served = front.engine.models.get(model.name, model.version)?;
    Ok(match front.engine.model_ready(&served) {
        Ok(()) => response::json_value(&json!({ "name": model.name, "ready": true })),
        Err(reason) => response::json_with_status(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "name": model.name, "ready": false, "reason": reason }).to_string(),
        ),
    })
}
