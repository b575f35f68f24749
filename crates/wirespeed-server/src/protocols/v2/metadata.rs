//! `GET /v2`, `GET /v2/models/{name}[/versions/{v}]` and the model
//! configuration and statistics extensions' `.../config` and `.../stats`.

use std::sync::OnceLock;

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use wirespeed_core::{Error, TensorSpec};

use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::pipeline::Target;

/// Server metadata: name, version and extensions. The same bytes for
/// every request, written once.
pub(crate) fn server() -> Response<Body> {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    let body = BODY.get_or_init(|| {
        let value = json!({
            "name": "wirespeed",
            "version": env!("CARGO_PKG_VERSION"),
            "extensions": crate::protocols::v2::EXTENSIONS,
        });
        Bytes::from(value.to_string())
    });
    response::json(body.clone())
}

/// A model's metadata: its versions, platform, inputs and outputs.
pub(crate) fn model(front: &Front, model: Target<'_>) -> Result<Response<Body>, Error> {
    let served = front.engine.models.get(model.name, model.version)?;
    if let Some(answer) = &served.metadata_answer {
        // MLServer's or KServe's model: the metadata its server answers.
        let mut answer = answer.clone();
        answer["name"] = json!(served.metadata().name);
        return Ok(response::json_value(&answer));
    }
    let metadata = served.metadata();
    let versions =
        wirespeed_engine::served::versions_named(&front.engine.models, model.name, model.version);
    let tensors = |specs: &[TensorSpec]| -> Vec<Value> {
        specs
            .iter()
            .filter(|s| served.shows(&s.name))
            .map(|s| json!({ "name": s.name, "datatype": s.datatype.as_str(), "shape": s.shape }))
            .collect()
    };
    Ok(response::json_value(&json!({
        "name": metadata.name,
        "versions": versions,
        "platform": metadata.platform,
        "inputs": tensors(&metadata.inputs),
        "outputs": tensors(&metadata.outputs),
    })))
}

/// A model's configuration, in Triton's `ModelConfig` JSON.
pub(crate) fn config(front: &Front, model: Target<'_>) -> Result<Response<Body>, Error> {
    let served = front.engine.models.get(model.name, model.version)?;
    let config = crate::protocols::v2::model_config::model_config(model.name, &served);
    Ok(response::json_value(
        &crate::protocols::v2::model_config::to_json(&config),
    ))
}

/// The statistics of one model, or of every model when the name is empty.
pub(crate) fn stats(front: &Front, model: Target<'_>) -> Result<Response<Body>, Error> {
    let stats =
        wirespeed_engine::statistics::select(&front.engine.models, model.name, model.version)?;
    Ok(response::json_value(
        &wirespeed_engine::statistics::to_json(&stats),
    ))
}
