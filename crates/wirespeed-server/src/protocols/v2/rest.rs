//! `POST /v2/models/{name}[/versions/{v}]/infer`, the Open Inference
//! Protocol's REST codec: a JSON body, a JSON header followed by raw tensor
//! bytes (Triton's binary tensor data extension), or a raw body, in; JSON or
//! JSON and raw bytes out. The pipeline does the rest.

use std::sync::Arc;

use bytes::Bytes;
use hyper::{Request, Response};
use wirespeed_core::{raw, Error, InferRequest, InferResponse, ParameterValue, Parameters};
use wirespeed_http::RequestBody;

use crate::protocols::http::body::{decode_body, DecodedBody, RestRequest};
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::Target;
use wirespeed_engine::pipeline::{Codec, RequestContext};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::timing::Stages;

/// Answers one V2 REST infer request. The engine's future itself, not one
/// around it (see [`wirespeed_engine::Engine::infer`]).
pub(crate) fn infer<'a>(
    front: &'a Front,
    context: RequestContext,
    target: Target<'a>,
    request: Request<RequestBody>,
) -> impl std::future::Future<Output = Response<Body>> + use<'a> {
    let codec = V2Rest {
        request: RestRequest::new(front, request),
        binary: BinaryOutputs::default(),
    };
    front.engine.infer(context, target, codec)
}

/// The V2 REST codec of one request.
struct V2Rest<'a> {
    request: RestRequest<'a>,
    binary: BinaryOutputs,
}

impl Codec for V2Rest<'_> {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::V2Rest;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        let (front, body) = (self.request.front, self.request.take_body());
        // MLServer's runtimes take its clients' BYTES shapes.
        let options = if model.dialect == wirespeed_core::Dialect::Mlserver {
            std::borrow::Cow::Owned(wirespeed_json::DecodeOptions {
                bytes_length_dimension: true,
                ..front.engine.decode_options.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(&front.engine.decode_options)
        };
        // The body is decoded as it arrives, and read to its end before any
        // error is answered, so the connection stays clean for the next
        // request.
        let DecodedBody {
            request,
            raw,
            decode,
            bytes,
        } = decode_body(
            &self.request.headers,
            body,
            &front.limits,
            &options,
            &front.engine.pool,
            model.metadata(),
        )
        .await?;
        stages.body_read(decode, bytes);
        self.binary = BinaryOutputs::of(&request, raw)?;
        let mut request = request;
        super::parameters::refuse_reserved_rest(&request.parameters)?;
        super::parameters::forward(
            front.header_forward.http.as_ref(),
            &mut request.parameters,
            self.request
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes())),
        );
        Ok(request)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }

    async fn refuse(&mut self, error: Error) -> Error {
        self.request.refuse(error).await
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        // An output in shared memory has no bytes in the answer.
        let binary: Vec<bool> = response
            .outputs
            .iter()
            .enumerate()
            .map(|(i, t)| response.shared_output(i).is_none() && self.binary.of_output(&t.name))
            .collect();
        // A JSON string holds text: bytes that are not UTF-8 are refused
        // by name, never replaced.
        for (i, tensor) in response.outputs.iter().enumerate() {
            let json = !binary[i] && response.shared_output(i).is_none();
            if let Some(at) = json
                .then(|| wirespeed_json::non_utf8_element(&tensor.data))
                .flatten()
            {
                return Err(Error::invalid_input(format!(
                    "output '{}' element {at} holds bytes that are not UTF-8, which a JSON \
                     string cannot carry; ask for the output as binary data \
                     (\"parameters\": {{\"binary_data\": true}} on the output, or \
                     \"binary_data_output\": true on the request)",
                    tensor.name
                )));
            }
        }
        Ok(encode(response, &binary))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        response::error_with(error, message)
    }
}

/// The response for `response`: all JSON, or a JSON header and the raw
/// bytes of the outputs marked `binary`. A large output's bytes are its own
/// buffer, sent as it is; small ones are copied after the header.
fn encode(response: InferResponse, binary: &[bool]) -> Response<Body> {
    let mut body = Vec::new();
    if !binary.contains(&true) {
        wirespeed_json::encode_infer_response(&response, &mut body);
        return response::json(body);
    }
    wirespeed_json::encode_infer_response_header(&response, binary, &mut body);
    let header_len = body.len();
    let mut parts = Vec::new();
    for (tensor, _) in response.outputs.into_iter().zip(binary).filter(|(_, &b)| b) {
        if raw::raw_len(&tensor.data) < OWN_BUFFER_BYTES {
            raw::write_raw(&tensor.data, &mut body);
        } else {
            parts.push(Bytes::from(std::mem::take(&mut body)));
            parts.push(raw::into_raw(tensor.data));
        }
    }
    // Only outputs under the size: one buffer, as a JSON answer is.
    let body = if parts.is_empty() {
        Body::new(body)
    } else {
        parts.push(Bytes::from(body));
        Body::chunks(parts)
    };
    response::binary(body, header_len)
}

/// An output's raw bytes from this size up go as their own buffer; under
/// it, a copy costs less than one more write.
const OWN_BUFFER_BYTES: usize = 16 * 1024;

/// Which outputs go back as raw bytes: those asked for with `binary_data`,
/// or all of them with the request's `binary_data_output` (an output's own
/// setting wins), or all of them after a raw request body.
#[derive(Debug, Default)]
struct BinaryOutputs {
    all: bool,
    own: Vec<(String, bool)>,
}

impl BinaryOutputs {
    /// Reads the request's settings, before the model runs, so a bad one
    /// costs no compute.
    fn of(request: &InferRequest, raw: bool) -> Result<BinaryOutputs, Error> {
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
        Ok(BinaryOutputs { all, own })
    }

    /// Whether output `name` goes back as raw bytes.
    fn of_output(&self, name: &str) -> bool {
        self.own
            .iter()
            .find(|(n, _)| n == name)
            .map_or(self.all, |&(_, b)| b)
    }
}
