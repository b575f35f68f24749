//! An OpenAI request to a model on another server's OpenAI API
//! (`backend = "upstream"` with an OpenAI URL; `wirespeed-upstream`'s
//! `backend/openai.rs`): forwarded as its client wrote it, so every field
//! the upstream takes (vLLM's own sampling fields, `n`, `logprobs`) works
//! through wirespeed as it does there, and answered as the upstream
//! answered, with `model` renamed to ours.
//!
//! The request still takes the one pipeline (`wirespeed-engine/src/pipeline.rs`): it
//! queues within the model's concurrency, is counted, timed (a stream's
//! events as its tokens: time to the first, between the others) and
//! traced, and a client that leaves cancels it, which closes the upstream
//! connection. A stream's events are written as each arrives from the
//! upstream, then `data: [DONE]`; a failure before the first is OpenAI's
//! error answer with the status it means, one after is an `error` event.

use std::sync::Arc;

use hyper::Response;
use serde_json::json;
use wirespeed_core::{
    Error, InferRequest, InferResponse, ParameterValue, Tensor, TensorData, JSON_BODY,
    JSON_ENDPOINT,
};

use super::{error_with, Endpoint};
use crate::protocols::http::events;
use crate::protocols::http::response::{self, Body};
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::Stages;

/// The codec that forwards one request, its `body` as the client wrote
/// it, to a model on an upstream's OpenAI API.
pub(super) fn codec(endpoint: Endpoint, body: Vec<u8>, stream: bool) -> Relay {
    Relay {
        endpoint,
        body: Some(body),
        stream,
    }
}

/// The codec of one forwarded request.
pub(super) struct Relay {
    endpoint: Endpoint,
    /// Until it is decoded.
    body: Option<Vec<u8>>,
    stream: bool,
}

/// The upstream's answer (or event) in a response.
fn answer_bytes(response: &InferResponse) -> Result<&[u8], Error> {
    response
        .outputs
        .iter()
        .find(|t| t.name == JSON_BODY)
        .and_then(|t| match &t.data {
            TensorData::Bytes(items) => items.first().map(Vec::as_slice),
            _ => None,
        })
        .ok_or_else(|| {
            Error::internal(format!(
                "model '{}' forwarded a request and answered no '{JSON_BODY}'",
                response.model_name
            ))
        })
}

/// An `error` event, OpenAI's shape, for a failure after the stream began.
fn error_event(error: &Error, out: &mut Vec<u8>) {
    let message = pipeline::public_message(error, 0);
    let body = json!({ "error": { "message": message, "type": "server_error", "param": null, "code": null } });
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(body.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl Codec for Relay {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::OpenAi;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        _stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        if !model.model.text().is_some_and(|t| t.forwards()) {
            return Err(Error::new(
                wirespeed_core::ErrorKind::Unavailable,
                format!(
                    "model '{}' was reloaded while its request was read; send it again",
                    model.metadata().name
                ),
            ));
        }
        let endpoint = match self.endpoint {
            Endpoint::Embeddings => "embeddings",
            Endpoint::ChatCompletions => "chat/completions",
            Endpoint::Completions => "completions",
        };
        Ok(InferRequest {
            inputs: vec![Tensor {
                name: JSON_BODY.to_owned(),
                shape: vec![1],
                data: TensorData::Bytes(vec![self.body.take().unwrap_or_default()]),
                parameters: Vec::new(),
            }],
            parameters: vec![(
                JSON_ENDPOINT.to_owned(),
                ParameterValue::String(endpoint.to_owned()),
            )],
            ..InferRequest::default()
        })
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        Ok(response::json(answer_bytes(&response)?.to_vec()))
    }

    async fn encode_stream(&mut self, mut stream: ResponseStream) -> Result<Response<Body>, Error> {
        if !self.stream {
            // One answer: the first response (the upstream's whole body).
            let Some(item) = stream.next().await else {
                return Err(Error::internal(
                    "the upstream model ended without an answer",
                ));
            };
            return self.encode(item.response?);
        }
        let encode: events::EncodeEvents = Box::new(move |item, out| match item.response {
            Ok(response) => match answer_bytes(&response) {
                Ok(data) => {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(data);
                    out.extend_from_slice(b"\n\n");
                }
                Err(e) => error_event(&e, out),
            },
            Err(e) => error_event(&e, out),
        });
        let end: events::End = Box::new(|out| out.extend_from_slice(b"data: [DONE]\n\n"));
        Ok(events::answer_with_end(stream, encode, Some(end)))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        error_with(error, message, None)
    }
}
