//! `GET /v2` and `GET /v2/models/{name}[/versions/{v}]`.

use std::sync::OnceLock;

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use wirespeed_core::{Error, TensorSpec};

use super::response::{self, Body};
use super::router::ModelRef;
use crate::AppState;

/// Server metadata: name, version and extensions. The same bytes for
/// every request, written once.
pub(crate) fn server() -> Response<Body> {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    let body = BODY.get_or_init(|| {
        let value = json!({
            "name": "wirespeed",
            "version": env!("CARGO_PKG_VERSION"),
            "extensions": crate::EXTENSIONS,
        });
        Bytes::from(value.to_string())
    });
    response::json(body.clone())
}

/// A model's metadata: its versions, platform, inputs and outputs.
pub(crate) fn model(state: &AppState, model: ModelRef<'_>) -> Result<Response<Body>, Error> {
    let metadata = state.models.get(model.name, model.version)?.metadata();
    let tensors = |specs: &[TensorSpec]| -> Vec<Value> {
        specs
            .iter()
            .map(|s| json!({ "name": s.name, "datatype": s.datatype.as_str(), "shape": s.shape }))
            .collect()
    };
    Ok(response::json_value(&json!({
        "name": metadata.name,
        "versions": metadata.versions,
        "platform": metadata.platform,
        "inputs": tensors(&metadata.inputs),
        "outputs": tensors(&metadata.outputs),
    })))
}
