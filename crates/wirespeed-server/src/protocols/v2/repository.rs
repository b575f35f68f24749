//! Triton's model repository extension on REST:
//! `POST /v2/repository/index` (`{"ready": true}` for ready models only),
//! `POST /v2/repository/models/{m}/load` (`{"parameters": {"config":
//! "..."}}` to load with that configuration instead of `config.toml`) and
//! `POST /v2/repository/models/{m}/unload`. `repository.rs` does the work,
//! for gRPC too.

use hyper::{Request, Response};
use serde::Deserialize;
use serde_json::{Map, Value};
use wirespeed_core::Error;
use wirespeed_http::RequestBody;

use crate::protocols::http::body::read_small;
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::model_control::{index_json, load_request, LoadValue};

/// The largest body of these calls: a load's configuration is a few KiB.
const MAX_BODY: usize = 1 << 20;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ModelRequest {
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// The body as `T`; an empty body is `T`'s default.
async fn body<T: for<'de> Deserialize<'de> + Default>(
    front: &Front,
    request: Request<RequestBody>,
    shape: &str,
) -> Result<T, Error> {
    let bytes = read_small(front, request.into_body(), MAX_BODY).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::malformed(format!("this request's body is {shape}: {e}")))
}

pub(crate) async fn index(
    front: &Front,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Error> {
    let asked: IndexRequest = body(front, request, r#"{"ready": true|false}, or empty"#).await?;
    let entries = front.repository.index(asked.ready);
    Ok(response::json_value(&index_json(&entries)))
}

pub(crate) async fn load(
    front: &Front,
    model: &str,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Error> {
    // Model files may come with a load: as large as a request may be.
    let bytes = read_small(front, request.into_body(), front.limits.max_body_bytes).await?;
    let asked: ModelRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        ModelRequest::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::malformed(format!(
                r#"this request's body is {{"parameters": {{"config": "...", "file:PATH": "<base64>"}}}}, or empty: {e}"#
            ))
        })?
    };
    let load = load_request(asked.parameters.iter().map(|(key, value)| {
        let value = match value.as_str() {
            Some(text) => LoadValue::Text(text),
            None => LoadValue::Other,
        };
        (key.as_str(), value)
    }))?;
    front.repository.load(model, load).await?;
    Ok(response::json(Vec::new()))
}

pub(crate) async fn unload(
    front: &Front,
    model: &str,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Error> {
    let asked: ModelRequest = body(
        front,
        request,
        r#"{"parameters": {"unload_dependents": false}}, or empty"#,
    )
    .await?;
    // wirespeed has no ensembles, so no model depends on another.
    if let Some(key) = asked.parameters.keys().find(|k| *k != "unload_dependents") {
        return Err(Error::invalid_input(format!(
            "unknown unload parameter '{key}'; an unload takes 'unload_dependents'"
        )));
    }
    front.repository.unload(model).await?;
    Ok(response::json(Vec::new()))
}
