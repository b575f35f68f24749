//! TF Serving's REST API: `:predict` in the row (`instances`) and columnar
//! (`inputs`) formats, model status and model metadata. Bodies go through
//! the same incremental decoder as V2 (`RequestDecoder::tf_serving`); the
//! model's input names and datatypes stand in for TF's signature.

use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Map, Value};
use wirespeed_core::{DataType, Error, ErrorKind, TensorSpec};
use wirespeed_json::RequestDecoder;

use super::body::{decode_json_body, model_for};
use super::response::{self, Body};
use super::router::ModelRef;
use crate::timing::{timed, Stages};
use crate::{compute, AppState};

/// `POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict`
pub(crate) async fn predict(
    state: &AppState,
    target: ModelRef<'_>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let mut stages = Stages::start();
    let (parts, body) = request.into_parts();
    let (model, body) = model_for(state, target.name, target.version, body).await?;
    let specs: Vec<(String, DataType)> = model
        .metadata()
        .inputs
        .iter()
        .map(|s| (s.name.clone(), s.datatype))
        .collect();
    let decoder = RequestDecoder::tf_serving(state.decode_options.clone(), &specs);
    let (request, format, decode) = decode_json_body(
        &parts.headers,
        body,
        &state.limits,
        decoder,
        &state.decode_options,
    )
    .await?;
    stages.body_read(decode);
    let outputs = compute::run(state, &model, request.inputs, &[], &mut stages).await?;
    let mut out = Vec::new();
    timed(&mut stages.encode, || {
        wirespeed_json::encode_tf_response(&outputs, format, &mut out);
    });
    let mut answer = response::json(out);
    stages.stamp(&mut answer);
    Ok(answer)
}

/// `:classify` and `:regress` need TF's classification and regression
/// signatures, which tree models do not have.
pub(crate) fn other_verb(verb: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("':{verb}' is not supported; wirespeed serves TF Serving's ':predict'"),
    )
}

/// `GET /v1/models/{name}[/versions/{v}]`: the served version is AVAILABLE.
pub(crate) fn status(state: &AppState, target: ModelRef<'_>) -> Result<Response<Body>, Error> {
    let model = state.repository.get(target.name, target.version)?;
    let version = target.version.unwrap_or(&model.metadata().versions[0]);
    Ok(response::json_value(&json!({
        "model_version_status": [{
            "version": version,
            "state": "AVAILABLE",
            "status": { "error_code": "OK", "error_message": "" },
        }]
    })))
}

/// `GET /v1/models/{name}[/versions/{v}]/metadata`: the model's inputs and
/// outputs as a `serving_default` signature.
pub(crate) fn metadata(state: &AppState, target: ModelRef<'_>) -> Result<Response<Body>, Error> {
    let model = state.repository.get(target.name, target.version)?;
    let m = model.metadata();
    let tensors = |specs: &[TensorSpec]| -> Value {
        let mut map = Map::new();
        for spec in specs {
            let dims: Vec<Value> = spec
                .shape
                .iter()
                .map(|d| json!({ "size": d.to_string(), "name": "" }))
                .collect();
            map.insert(
                spec.name.clone(),
                json!({
                    "dtype": tf_dtype(spec.datatype),
                    "tensor_shape": { "dim": dims, "unknown_rank": false },
                    "name": spec.name,
                }),
            );
        }
        Value::Object(map)
    };
    Ok(response::json_value(&json!({
        "model_spec": {
            "name": m.name,
            "signature_name": "",
            "version": target.version.unwrap_or(&m.versions[0]),
        },
        "metadata": { "signature_def": { "signature_def": { "serving_default": {
            "inputs": tensors(&m.inputs),
            "outputs": tensors(&m.outputs),
            "method_name": "tensorflow/serving/predict",
        }}}}
    })))
}

/// TensorFlow's name for a datatype.
fn tf_dtype(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "DT_BOOL",
        DataType::Uint8 => "DT_UINT8",
        DataType::Uint16 => "DT_UINT16",
        DataType::Uint32 => "DT_UINT32",
        DataType::Uint64 => "DT_UINT64",
        DataType::Int8 => "DT_INT8",
        DataType::Int16 => "DT_INT16",
        DataType::Int32 => "DT_INT32",
        DataType::Int64 => "DT_INT64",
        DataType::Fp16 => "DT_HALF",
        DataType::Fp32 => "DT_FLOAT",
        DataType::Fp64 => "DT_DOUBLE",
        DataType::Bf16 => "DT_BFLOAT16",
        DataType::Bytes => "DT_STRING",
    }
}
