//! `POST /v2/models/{name}[/versions/{v}]/infer`: read the body, decode it
//! into typed tensors, check them against the model, run the model, encode
//! the outputs.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use hyper::{Request, Response};
use wirespeed_core::{Error, ErrorKind, InferResponse, Model};

use super::response::{self, Body};
use super::router::ModelRef;
use crate::codec::{decode_infer_request, encode_infer_response};
use crate::AppState;

/// Requests with fewer input elements than this run on the async worker that
/// read them: a Titanic row takes well under a microsecond, far less than a
/// hop to another thread. Larger ones move to the blocking pool so one big
/// batch cannot stall other connections.
const INLINE_COMPUTE_ELEMENTS: usize = 16 * 1024;

/// The Triton binary tensor extension's header; its presence means the body
/// is not plain JSON.
const BINARY_HEADER_LENGTH: &str = "inference-header-content-length";

pub(crate) async fn infer(
    state: &AppState,
    target: ModelRef<'_>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    // The body is read before anything can fail, so that an error response
    // leaves the connection clean for the client's next request.
    let body = read_body(request, state.max_body_bytes).await?;
    let model = Arc::clone(state.repository.get(target.name, target.version)?);
    let request = decode_infer_request(&body)?;
    drop(body);

    let metadata = model.metadata();
    metadata.check_inputs(&request.inputs)?;
    let outputs = metadata.resolve_outputs(request.outputs.iter().map(|o| o.name.as_str()))?;

    let elements: usize = request.inputs.iter().map(|t| t.data.len()).sum();
    let inputs = request.inputs;
    let tensors = if elements < INLINE_COMPUTE_ELEMENTS {
        model.infer(&inputs, &outputs)?
    } else {
        let model: Arc<dyn Model> = Arc::clone(&model);
        tokio::task::spawn_blocking(move || model.infer(&inputs, &outputs))
            .await
            .map_err(|e| Error::internal(format!("model task failed: {e}")))??
    };

    let response = InferResponse {
        model_name: metadata.name.clone(),
        model_version: target.version.unwrap_or(&metadata.versions[0]).to_owned(),
        id: request.id,
        outputs: tensors,
    };
    Ok(response::json(encode_infer_response(&response)))
}

/// Reads the whole body, up to `limit` bytes, then refuses what the JSON
/// path cannot take. A body declared larger than `limit` is refused unread
/// and the connection closed.
async fn read_body(request: Request<Incoming>, limit: usize) -> Result<Bytes, Error> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let (parts, body) = request.into_parts();
    let collected = Limited::new(body, limit).collect().await.map_err(|e| {
        if e.downcast_ref::<LengthLimitError>().is_some() {
            too_large(limit)
        } else {
            Error::malformed(format!("could not read the request body: {e}"))
        }
    })?;

    let headers = &parts.headers;
    if headers.contains_key(BINARY_HEADER_LENGTH) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "this server does not support the binary tensor data extension yet \
             (Inference-Header-Content-Length); send inputs as JSON 'data' \
             (tritonclient: set_data_from_numpy(..., binary_data=False))",
        ));
    }
    if let Some(encoding) = headers.get(CONTENT_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "Content-Encoding {:?} is not supported; send the body uncompressed",
                    encoding
                ),
            ));
        }
    }
    Ok(collected.to_bytes())
}

fn too_large(limit: usize) -> Error {
    Error::new(
        ErrorKind::PayloadTooLarge,
        format!("request body is larger than the {limit}-byte limit"),
    )
}
