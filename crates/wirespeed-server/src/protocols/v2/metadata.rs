//! `GET /v2`, `GET /v2/models/{name}[/versions/{v}]` and the model
//! configuration and statistics extensions' `.../config` and `.../stats`.

use bytes::Bytes;
use hyper::Response;
use serde_json::json;
use wirespeed_core::{Error, TensorSpec};

use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::pipeline::Target;

/// Server metadata: name, version and extensions. The same bytes for
/// every request, written at start ([`server_body`]).
pub(crate) fn server(front: &Front) -> Response<Body> {
    response::json(front.server_metadata.clone())
}

/// The server metadata's body for a server called `name` (`wirespeed`, or
/// as Triton's `--id` names it).
pub(crate) fn server_body(name: &str) -> Bytes {
    let value = json!({
        "name": name,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": crate::protocols::v2::EXTENSIONS,
    });
    Bytes::from(value.to_string())
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
    fn tensors<'a>(
        served: &wirespeed_engine::served::ServedModel,
        specs: &'a [TensorSpec],
    ) -> Vec<TensorMetadata<'a>> {
        specs
            .iter()
            .filter(|s| served.shows(&s.name))
            .map(|s| TensorMetadata {
                name: &s.name,
                datatype: s.datatype.as_str(),
                shape: &s.shape,
            })
            .collect()
    }
    // Written straight from the model's own fields: a scrape of every
    // model's metadata is a hot path for some clients (perf_analyzer,
    // dashboards), and a `serde_json::Value` tree made it 10-15% slower
    // than `GET /v2`; written straight, it answers at the same rate.
    let answer = ModelMetadataAnswer {
        name: &metadata.name,
        versions,
        platform: &metadata.platform,
        inputs: tensors(&served, &metadata.inputs),
        outputs: tensors(&served, &metadata.outputs),
    };
    let body = serde_json::to_vec(&answer).map_err(|e| Error::internal(e.to_string()))?;
    Ok(response::json(body))
}

/// The V2 model metadata answer, in the protocol's field order.
#[derive(serde::Serialize)]
struct ModelMetadataAnswer<'a> {
    name: &'a str,
    versions: Vec<String>,
    platform: &'a str,
    inputs: Vec<TensorMetadata<'a>>,
    outputs: Vec<TensorMetadata<'a>>,
}

/// One tensor of [`ModelMetadataAnswer`].
#[derive(serde::Serialize)]
struct TensorMetadata<'a> {
    name: &'a str,
    datatype: &'a str,
    shape: &'a [i64],
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
        wirespeed_engine::counting::select(&front.engine.models, model.name, model.version)?;
    Ok(response::json_value(
        &wirespeed_engine::statistics::to_json(&stats),
    ))
}
