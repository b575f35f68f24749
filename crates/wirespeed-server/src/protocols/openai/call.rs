//! One OpenAI request's codec, whatever model it names: the model is
//! looked up once, by the engine, and the codec then becomes the one that
//! model needs: the relay for a model on an upstream's OpenAI API
//! (`relay.rs`), else the endpoint's own (`embeddings.rs`,
//! `completions.rs`), which checks the request's fields for it.

use std::sync::Arc;

use hyper::Response;
use wirespeed_core::{Error, InferRequest, InferResponse};

use super::completions::{self, Completions};
use super::embeddings::{self, Embeddings};
use super::relay::{self, Relay};
use super::request::Request;
use super::{error_with, Endpoint};
use crate::protocols::http::response::{self, Body};
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::Codec;
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::Stages;

/// The codec of one request: until the model is known, the request as
/// read; then the model's codec.
pub(super) struct Call {
    endpoint: Endpoint,
    /// The request's number, for a completion's id.
    id: u64,
    state: State,
}

enum State {
    Read(Box<Request>),
    Relay(Relay),
    Embeddings(Embeddings),
    Completions(Box<Completions>),
    /// A field refused: the field it names.
    Refused(Option<&'static str>),
}

impl Call {
    pub(super) fn new(endpoint: Endpoint, id: u64, request: Request) -> Call {
        Call {
            endpoint,
            id,
            state: State::Read(Box::new(request)),
        }
    }

    /// The codec `model` needs.
    fn become_for(&mut self, model: &ServedModel) -> Result<(), Error> {
        let State::Read(request) = std::mem::replace(&mut self.state, State::Refused(None)) else {
            return Err(Error::internal("an OpenAI request decoded twice"));
        };
        let mut request = *request;
        let name = std::mem::take(&mut request.model);
        self.state = if model.model.text().is_some_and(|t| t.forwards()) {
            let stream = request.streams();
            State::Relay(relay::codec(self.endpoint, request.body, stream))
        } else {
            let codec = match self.endpoint {
                Endpoint::Embeddings => {
                    embeddings::codec(name, &request.fields).map(State::Embeddings)
                }
                Endpoint::ChatCompletions | Endpoint::Completions => {
                    completions::codec(name, self.endpoint, &mut request, self.id)
                        .map(|c| State::Completions(Box::new(c)))
                }
            };
            match codec {
                Ok(state) => state,
                Err((error, param)) => {
                    self.state = State::Refused(param);
                    return Err(error);
                }
            }
        };
        Ok(())
    }
}

impl Codec for Call {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::OpenAi;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        self.become_for(model)?;
        match &mut self.state {
            State::Relay(codec) => codec.decode(model, stages).await,
            State::Embeddings(codec) => codec.decode(model, stages).await,
            State::Completions(codec) => codec.decode(model, stages).await,
            State::Read(_) | State::Refused(_) => {
                Err(Error::internal("an OpenAI request without its codec"))
            }
        }
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        match &mut self.state {
            State::Relay(codec) => codec.encode(response),
            State::Embeddings(codec) => codec.encode(response),
            State::Completions(codec) => codec.encode(response),
            State::Read(_) | State::Refused(_) => {
                Err(Error::internal("an OpenAI answer without its codec"))
            }
        }
    }

    async fn encode_stream(&mut self, stream: ResponseStream) -> Result<Response<Body>, Error> {
        match &mut self.state {
            State::Relay(codec) => codec.encode_stream(stream).await,
            State::Embeddings(codec) => codec.encode_stream(stream).await,
            State::Completions(codec) => codec.encode_stream(stream).await,
            State::Read(_) | State::Refused(_) => {
                Err(Error::internal("an OpenAI answer without its codec"))
            }
        }
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        match &self.state {
            State::Relay(codec) => codec.error(error, message),
            State::Embeddings(codec) => codec.error(error, message),
            State::Completions(codec) => codec.error(error, message),
            State::Refused(param) => error_with(error, message, *param),
            State::Read(_) => error_with(error, message, None),
        }
    }
}
