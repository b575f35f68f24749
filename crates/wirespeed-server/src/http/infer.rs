//! `POST /v2/models/{name}[/versions/{v}]/infer`: read the body, decode it
//! into typed tensors, check them against the model, run the model, encode
//! the outputs.

use hyper::body::Incoming;
use hyper::{Request, Response};
use wirespeed_core::{raw, Error, InferRequest, InferResponse, ParameterValue, Parameters};

use super::body::{decode_body, model_for, DecodedBody};
use super::response::{self, Body};
use super::router::ModelRef;
use crate::timing::{timed, Stages};
use crate::{compute, AppState};

pub(crate) async fn infer(
    state: &AppState,
    target: ModelRef<'_>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let mut stages = Stages::start();
    let (parts, body) = request.into_parts();
    let (model, body) = model_for(state, target.name, target.version, body).await?;
    // The body is decoded as it arrives, and read to its end before any
    // error is answered, so the connection stays clean for the next request.
    let metadata = model.metadata();
    let DecodedBody {
        mut request,
        raw,
        decode,
    } = decode_body(
        &parts.headers,
        body,
        &state.limits,
        &state.decode_options,
        metadata,
    )
    .await?;
    stages.body_read(decode);
    let binary = binary_outputs(&request, raw)?;
    let inputs = std::mem::take(&mut request.inputs);
    let tensors = compute::run(state, &model, inputs, &request.outputs, &mut stages).await?;
    let binary: Vec<bool> = tensors.iter().map(|t| binary(&t.name)).collect();

    let response = InferResponse {
        model_name: metadata.name.clone(),
        model_version: target.version.unwrap_or(&metadata.versions[0]).to_owned(),
        id: request.id,
        outputs: tensors,
    };
    let mut answer = timed(&mut stages.encode, || encode(&response, &binary));
    stages.stamp(&mut answer);
    Ok(answer)
}

/// The response for `response`: all JSON, or a JSON header and the raw
/// bytes of the outputs marked `binary`.
fn encode(response: &InferResponse, binary: &[bool]) -> Response<Body> {
    let mut body = Vec::new();
    if !binary.contains(&true) {
        wirespeed_json::encode_infer_response(response, &mut body);
        return response::json(body);
    }
    wirespeed_json::encode_infer_response_header(response, binary, &mut body);
    let header_len = body.len();
    let raw_bytes: usize = response
        .outputs
        .iter()
        .zip(binary)
        .filter(|(_, &b)| b)
        .map(|(t, _)| raw::raw_len(&t.data))
        .sum();
    body.reserve_exact(raw_bytes);
    for (tensor, _) in response.outputs.iter().zip(binary).filter(|(_, &b)| b) {
        raw::write_raw(&tensor.data, &mut body);
    }
    response::binary(body, header_len)
}

/// Which outputs go back as raw bytes: those asked for with `binary_data`,
/// or all of them with the request's `binary_data_output` (an output's own
/// setting wins), or all of them after a raw request body. Checked before
/// the model runs, so a bad setting costs no compute.
fn binary_outputs(request: &InferRequest, raw: bool) -> Result<impl Fn(&str) -> bool, Error> {
    let flag = |parameters: &Parameters, key: &str| -> Result<Option<bool>, Error> {
        match parameters.iter().find(|(k, _)| k == key) {
            None => Ok(None),
            Some((_, ParameterValue::Bool(b))) => Ok(Some(*b)),
            Some((_, other)) => Err(Error::invalid_input(format!(
                "parameter '{key}' must be a bool, found {other:?}"
            ))),
        }
    };
    let all = raw || flag(&request.parameters, "binary_data_output")?.unwrap_or(false);
    let mut own = Vec::new();
    for output in &request.outputs {
        if let Some(b) = flag(&output.parameters, "binary_data")? {
            own.push((output.name.clone(), b));
        }
    }
    Ok(move |name: &str| {
        own.iter()
            .find(|(n, _)| *n == name)
            .map_or(all, |&(_, b)| b)
    })
}
