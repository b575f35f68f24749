//! `ModelInfer` and `ModelStreamInfer`: the Open Inference Protocol's gRPC
//! codecs of the one pipeline. Inputs come as typed `contents` or
//! `raw_input_contents` (`convert.rs`); outputs go back as
//! `raw_output_contents`, as Triton answers.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Response, Status};
use wirespeed_core::{Error, InferRequest, InferResponse, TraceContext};

use super::convert;
use crate::protocols::Front;
use pb::infer_parameter::ParameterChoice;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec, RequestContext, Target};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::{timed_on, Stages, SERVER_TIMING};
use wirespeed_proto::inference as pb;

/// Raw input bytes above this are converted on the CPU pool: copying them
/// takes long enough to hold up other requests on the async worker.
const OFFLOAD_RAW_BYTES: usize = 1 << 20;

/// Triton's request parameter asking that each stream response say
/// whether it is the request's last, and the response parameter that says.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";
const FINAL_RESPONSE: &str = "triton_final_response";

/// Marks a `ModelInfer` answer made of the model's default outputs:
/// `GrpcService` adds `wirespeed-default: true` to its trailing metadata.
#[derive(Clone, Copy)]
pub(crate) struct DefaultAnswer;

/// The gRPC status for `error`, whose client-facing text is `message`.
pub(crate) fn status(error: &Error, message: &str) -> Status {
    Status::new(Code::from_i32(error.kind().grpc_code()), message)
}

/// Answers one `ModelInfer` call, its message read by tonic or from its
/// frames (`grpc_frames.rs`). A deadline that passes drops the request
/// where it is: a queued one leaves the queue uncomputed; one computing
/// finishes, holding its slot, and its answer is dropped.
pub(crate) async fn model_infer(
    front: &Front,
    mut received: convert::Received,
    metadata: tonic::metadata::MetadataMap,
) -> Result<Response<pb::ModelInferResponse>, Status> {
    let deadline = crate::protocols::grpc::deadline(&metadata);
    let trace = crate::protocols::trace_context(metadata.as_ref());
    let context = RequestContext::new(&front.engine, "grpc", trace).within(deadline);
    let name = std::mem::take(&mut received.message.model_name);
    let version = std::mem::take(&mut received.message.model_version);
    let target = Target::new(&name, (!version.is_empty()).then_some(version.as_str()));
    let codec = GrpcInfer {
        front,
        message: Some(received),
        metadata,
        typed: false,
    };
    let answer = front.engine.infer(context, target, codec);
    match deadline {
        Some(after) => tokio::time::timeout(after, answer)
            .await
            .unwrap_or_else(|_| {
                let e = Error::new(
                    wirespeed_core::ErrorKind::Timeout,
                    format!("the client's deadline of {after:?} passed before the answer"),
                );
                Err(crate::protocols::grpc::status(&e))
            }),
        None => answer.await,
    }
}

/// What one request of a `ModelStreamInfer` stream is answered: one
/// message, or a decoupled model's responses, each a message; or, for an
/// MLServer model, an error that ends the stream, as MLServer's do.
pub(super) enum StreamAnswer {
    One(pb::ModelStreamInferResponse),
    Many(Responses),
    Failed(Status),
}

/// A decoupled model's responses to one request of a stream, as messages.
pub(super) struct Responses {
    stream: ResponseStream,
    flag_final: bool,
    /// The model flagged a response final, or the stream has ended.
    ended: bool,
    /// The request's id and model, for the empty final response.
    model_name: String,
    model_version: String,
    /// The model is MLServer's: each response goes out unwrapped, and an
    /// error ends the stream.
    plain: bool,
}

impl Responses {
    /// The next message; `None` after the last. Each response says
    /// whether it is the last (`triton_final_response`, which Triton 2.51
    /// sets whether asked or not); with
    /// `triton_enable_empty_final_response`, a stream that ended without a
    /// response flagged final ends with an empty one that is, as Triton's
    /// do.
    pub(super) async fn next(&mut self) -> Option<Result<pb::ModelStreamInferResponse, Status>> {
        if self.ended {
            return None;
        }
        let Some(item) = self.stream.next().await else {
            self.ended = true;
            if !self.flag_final || self.plain {
                return None;
            }
            let mut response = pb::ModelInferResponse {
                model_name: self.model_name.clone(),
                model_version: self.model_version.clone(),
                id: self.stream.id().unwrap_or_default().to_owned(),
                ..Default::default()
            };
            flag(&mut response, true);
            return Some(Ok(answered(response, false)));
        };
        self.ended = item.last && self.flag_final;
        Some(match item.response {
            Ok(response) => {
                let mut response = convert::response(response);
                if !self.plain {
                    flag(&mut response, item.last);
                }
                Ok(answered(response, self.plain))
            }
            Err(error) if self.plain => {
                self.ended = true;
                Err(status(&error, &pipeline::public_message(&error, 0)))
            }
            Err(error) => Ok(pb::ModelStreamInferResponse {
                error_message: pipeline::public_message(&error, 0),
                infer_response: Some(pb::ModelInferResponse {
                    id: self.stream.id().unwrap_or_default().to_owned(),
                    ..Default::default()
                }),
                plain: false,
            }),
        })
    }
}

/// A stream's answer: wrapped as Triton's, or `plain` as MLServer's.
fn answered(response: pb::ModelInferResponse, plain: bool) -> pb::ModelStreamInferResponse {
    pb::ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(response),
        plain,
    }
}

/// Sets Triton's `triton_final_response` on a stream's response.
fn flag(response: &mut pb::ModelInferResponse, last: bool) {
    response.parameters.insert(
        FINAL_RESPONSE.to_owned(),
        pb::InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(last)),
        },
    );
}

/// Answers one request of a `ModelStreamInfer` stream: a failed request
/// gets its error in `error_message`, and the stream goes on, as Triton
/// does.
pub(super) async fn stream_infer(
    front: &Front,
    mut message: pb::ModelInferRequest,
    metadata: tonic::metadata::MetadataMap,
    trace: Option<TraceContext>,
) -> StreamAnswer {
    let context = RequestContext::new(&front.engine, "grpc-stream", trace);
    let name = std::mem::take(&mut message.model_name);
    let version = std::mem::take(&mut message.model_version);
    let target = Target::new(&name, (!version.is_empty()).then_some(version.as_str()));
    let id = message.id.clone();
    let flag_final = message
        .parameters
        .get(EMPTY_FINAL_RESPONSE)
        .is_some_and(|p| p.parameter_choice == Some(ParameterChoice::BoolParam(true)));
    let codec = GrpcStreamInfer {
        unary: GrpcInfer {
            front,
            message: Some(message.into()),
            metadata,
            typed: false,
        },
        id,
        flag_final,
        model_name: name.clone(),
        model_version: version.clone(),
        plain: false,
    };
    front.engine.infer(context, target, codec).await
}

/// The `ModelInfer` codec of one call.
struct GrpcInfer<'a> {
    front: &'a Front,
    /// Until it is decoded.
    message: Option<convert::Received>,
    /// The call's metadata (an application keyed by a header reads it).
    metadata: tonic::metadata::MetadataMap,
    /// Answer in each output's typed `contents`: an MLServer model asked
    /// with no raw bytes, as MLServer answers.
    typed: bool,
}

impl GrpcInfer<'_> {
    /// Converts the message to the core request, on the CPU pool when it
    /// carries many raw bytes, with the call's forwarded metadata among its
    /// parameters.
    async fn convert(
        &mut self,
        model: &ServedModel,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let message = self.message.take().expect("a message is decoded once");
        super::parameters::refuse_reserved_grpc(message.message.parameters.keys())?;
        let raw_bytes = message.raw_len();
        self.typed = model.dialect == wirespeed_core::Dialect::Mlserver && message.raw.is_empty();
        let bytes = if self.front.engine.traffic.is_some() {
            message.encoded_len() as u64
        } else {
            0
        };
        let limits = self.front.engine.decode_options.limits.clone();
        let mut decode = Duration::ZERO;
        let offload = raw_bytes > OFFLOAD_RAW_BYTES;
        let name = model.metadata().name.clone();
        let length_dimension = model.dialect == wirespeed_core::Dialect::Mlserver;
        let mut request = timed_on(&self.front.engine.pool, offload, &mut decode, move || {
            convert::request(message, &name, &limits, length_dimension)
        })
        .await?;
        stages.body_read(decode, bytes);
        super::parameters::forward(
            self.front.header_forward.grpc.as_ref(),
            &mut request.parameters,
            self.metadata.iter().filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(name, value) => {
                    Some((name.as_str(), value.as_bytes()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            }),
        );
        Ok(request)
    }
}

impl Codec for GrpcInfer<'_> {
    type Answer = Result<Response<pb::ModelInferResponse>, Status>;
    const PROTOCOL: InferProtocol = InferProtocol::V2Grpc;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        self.convert(model, stages).await
    }

    fn header(&self, name: &str) -> Option<String> {
        let value = self.metadata.get(name)?.to_str().ok()?;
        Some(value.to_owned())
    }

    fn encode(&mut self, response: InferResponse) -> Result<Self::Answer, Error> {
        Ok(Ok(Response::new(convert::response_as(
            response, self.typed,
        ))))
    }

    fn stamp(answer: &mut Self::Answer, timing: &str, default: bool) {
        if let Ok(response) = answer {
            if let Ok(value) = timing.parse() {
                response.metadata_mut().insert(SERVER_TIMING, value);
            }
            if default {
                response.extensions_mut().insert(DefaultAnswer);
            }
        }
    }

    fn error(&self, error: &Error, message: &str) -> Self::Answer {
        Err(status(error, message))
    }
}

/// The codec of one request of a `ModelStreamInfer` stream.
struct GrpcStreamInfer<'a> {
    unary: GrpcInfer<'a>,
    /// The request's id, echoed with an error.
    id: String,
    /// The request set `triton_enable_empty_final_response`: each response
    /// says whether it is the request's last (`triton_final_response`), as
    /// Triton's do. A model that answers once: it always is.
    flag_final: bool,
    /// The model as the request names it, for a stream's empty final
    /// response.
    model_name: String,
    model_version: String,
    /// The model is MLServer's: its answers go out as MLServer's stream
    /// sends them (unwrapped; an error ends the stream).
    plain: bool,
}

impl Codec for GrpcStreamInfer<'_> {
    type Answer = StreamAnswer;
    const PROTOCOL: InferProtocol = InferProtocol::V2Grpc;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        self.plain = model.dialect == wirespeed_core::Dialect::Mlserver;
        self.unary.convert(model, stages).await
    }

    fn encode(&mut self, response: InferResponse) -> Result<Self::Answer, Error> {
        let mut response = convert::response_as(response, self.unary.typed);
        if !self.plain {
            flag(&mut response, true);
        }
        Ok(StreamAnswer::One(answered(response, self.plain)))
    }

    async fn encode_stream(&mut self, stream: ResponseStream) -> Result<Self::Answer, Error> {
        Ok(StreamAnswer::Many(Responses {
            model_name: self.model_name.clone(),
            model_version: self.model_version.clone(),
            stream,
            flag_final: self.flag_final,
            ended: false,
            plain: self.plain,
        }))
    }

    /// Stream messages carry no metadata of their own.
    fn stamp(_: &mut Self::Answer, _: &str, _: bool) {}

    fn error(&self, error: &Error, message: &str) -> Self::Answer {
        if self.plain {
            return StreamAnswer::Failed(status(error, message));
        }
        StreamAnswer::One(pb::ModelStreamInferResponse {
            error_message: message.to_owned(),
            infer_response: Some(pb::ModelInferResponse {
                id: self.id.clone(),
                ..Default::default()
            }),
            plain: false,
        })
    }
}
