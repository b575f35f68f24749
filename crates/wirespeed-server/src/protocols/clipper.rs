//! Clipper's query frontend: `POST /{app}/predict`, where the application
//! is the model of the same name. `{"input": ...}` is one query and
//! `{"input_batch": [...]}` one query per row; `"version"` picks the model
//! version. The answer is the model's first output for each query: one
//! object for one query (a batch of one included), `batch_predictions` for
//! several, as Clipper's query frontend answers.
//!
//! Clipper's input types are datatypes here: `doubles` FP64, `floats`
//! FP32, `ints` INT32, `strings` BYTES, and `bytes` UINT8, whose queries
//! are base64 strings. Clipper refused integer literals for float inputs;
//! wirespeed takes them. Errors are Clipper's `{"error", "cause"}`: a
//! request Clipper would not parse is a `Json error`, any other failure a
//! `Query processing error`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::{Request, Response, StatusCode};
use serde_json::json;
use wirespeed_core::{Error, ErrorKind, InferRequest, InferResponse, ParameterValue};
use wirespeed_http::RequestBody;
use wirespeed_json::{Format, RequestDecoder};

use crate::protocols::http::body::RestRequest;
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::composite::Composing;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec, RequestContext, Target};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::timing::Stages;
use wirespeed_models::Application;

/// `POST /{app}/predict`, answering errors in Clipper's own shape.
pub(crate) async fn predict(
    front: &Front,
    context: RequestContext,
    app: &str,
    request: Request<RequestBody>,
) -> Response<Body> {
    let codec = ClipperQuery {
        request: RestRequest::new(front, request),
        app,
        format: Format::ClipperOne,
    };
    let target = Target::new(app, None);
    front.engine.infer(context, target, codec).await
}

/// `POST /{app}/update`: feedback for an application, Clipper's
/// `{"uid", "input", "label"}`. The policy learns from the loss of its
/// candidates' predictions on `input` against `label`
/// (`wirespeed_models::Application::feedback`); the answer is Clipper's,
/// `Feedback received? 1`.
pub(crate) async fn update(
    front: &Front,
    context: RequestContext,
    app: &str,
    request: Request<RequestBody>,
) -> Response<Body> {
    let id = context.id;
    match learn(front, context, app, request).await {
        Ok(()) => {
            let mut answer = Response::new(Body::new("Feedback received? 1".to_owned()));
            answer.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            answer
        }
        Err(e) => error(&e, id),
    }
}

async fn learn(
    front: &Front,
    mut context: RequestContext,
    app: &str,
    request: Request<RequestBody>,
) -> Result<(), Error> {
    let mut request = RestRequest::new(front, request);
    let served = match front.engine.models.get(app, None) {
        Ok(served) => served,
        Err(e) => {
            let e = Error::new(e.kind(), format!("no application '{app}': {}", e.message()));
            return Err(request.refuse(e).await);
        }
    };
    let Some(application) = served.composite_as::<Application>() else {
        let e = Error::invalid_input(format!(
            "'{app}' is a model, not an application: it has no selection policy to learn              (backend = \"application\")"
        ));
        return Err(request.refuse(e).await);
    };
    let metadata = served.metadata();
    let [input] = metadata.inputs.as_slice() else {
        let e = Error::invalid_input(format!(
            "application '{app}' has {} inputs; Clipper's feedback feeds one",
            metadata.inputs.len()
        ));
        return Err(request.refuse(e).await);
    };
    let decoder = Box::new(RequestDecoder::clipper(
        front.engine.decode_options.clone(),
        (input.name.clone(), input.datatype),
    ));
    let (mut decoded, format) = request.decode_json(decoder, &mut context.stages).await?;
    if format != Format::ClipperOne {
        return Err(Error::invalid_input(
            "feedback takes one 'input' and its 'label', not an 'input_batch'",
        ));
    }
    let label = match take(&mut decoded, "label") {
        Some(ParameterValue::String(text)) => text
            .parse::<f64>()
            .map_err(|_| Error::invalid_input(format!("'label' must be a number, found {text}")))?,
        _ => {
            return Err(Error::invalid_input(
                "'label' is missing: feedback is an input and its true label",
            ))
        }
    };
    let call = wirespeed_scheduler::CallContext {
        started: context.stages.started(),
        parameters: decoded.parameters,
        deadline: Some(context.deadline),
        priority: 0,
        timeout: None,
        trace: context.trace.outgoing(),
        responses: None,
        input_parameters: Vec::new(),
    };
    application
        .feedback(
            decoded.inputs,
            &[label],
            call,
            &Composing::new(&front.engine.models),
        )
        .await
}

/// Takes parameter `key` out of `request`.
fn take(request: &mut InferRequest, key: &str) -> Option<ParameterValue> {
    let at = request.parameters.iter().position(|(k, _)| k == key)?;
    Some(request.parameters.remove(at).1)
}

/// Clipper's codec of one query.
struct ClipperQuery<'a> {
    request: RestRequest<'a>,
    app: &'a str,
    /// One query or a batch; the answer follows it.
    format: Format,
}

impl ClipperQuery<'_> {
    /// The application's version `version`, when it is served and ready.
    fn version(&self, version: &str) -> Result<Arc<ServedModel>, Error> {
        let other = self
            .request
            .front
            .engine
            .models
            .get(self.app, Some(version))
            .map_err(|e| {
                if e.kind() != ErrorKind::VersionNotFound {
                    return e;
                }
                // Clipper's words.
                Error::new(
                    ErrorKind::VersionNotFound,
                    format!(
                        "Requested version: {version} does not exist for model: {}",
                        self.app
                    ),
                )
            })?;
        if let Err(reason) = other.model.ready() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "model '{}' version {version} is not ready: {reason}",
                    self.app
                ),
            ));
        }
        Ok(other)
    }
}

impl Codec for ClipperQuery<'_> {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::Clipper;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let metadata = model.metadata();
        let [input] = metadata.inputs.as_slice() else {
            let e = Error::invalid_input(format!(
                "application '{}' is model '{}', which has {} inputs; Clipper queries feed one",
                self.app,
                metadata.name,
                metadata.inputs.len()
            ));
            return Err(self.request.refuse(e).await);
        };
        let decoder = Box::new(RequestDecoder::clipper(
            self.request.front.engine.decode_options.clone(),
            (input.name.clone(), input.datatype),
        ));
        let (mut request, format) = self.request.decode_json(decoder, stages).await?;
        self.format = format;
        // A query's `uid` keys an application's state; a model that is no
        // application has none, and a `label` is feedback's, not a query's.
        take(&mut request, "label");
        if model.composite_as::<Application>().is_none() {
            take(&mut request, "uid");
        }
        // Clipper's `version`, which the decoder keeps as a parameter: the
        // query runs on that version.
        if let Some(ParameterValue::String(version)) = take(&mut request, "version") {
            if version != model.version() {
                *model = self.version(&version)?;
            }
        }
        Ok(request)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }

    async fn refuse(&mut self, error: Error) -> Error {
        let error = Error::new(
            error.kind(),
            format!("no application '{}': {}", self.app, error.message()),
        );
        self.request.refuse(error).await
    }

    fn encode(&mut self, mut response: InferResponse) -> Result<Response<Body>, Error> {
        if response.outputs.is_empty() {
            return Err(Error::internal(format!(
                "model '{}' produced no output",
                response.model_name
            )));
        }
        let output = response.outputs.swap_remove(0);
        let rows = output.shape.first().copied().unwrap_or(1) as u64;
        let first_id = self
            .request
            .front
            .clipper_queries
            .fetch_add(rows, Ordering::Relaxed);
        let default = response
            .parameters
            .iter()
            .any(|(k, v)| k == "default" && *v == ParameterValue::Bool(true))
            .then_some(wirespeed_scheduler::DEFAULT_EXPLANATION);
        let mut out = Vec::new();
        wirespeed_json::encode_clipper_response(&output, self.format, first_id, default, &mut out);
        Ok(response::json(out))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        error_with(error, message)
    }
}

/// Clipper's error body for `error` to request `id`.
pub(crate) fn error(e: &Error, id: u64) -> Response<Body> {
    error_with(e, &pipeline::public_message(e, id))
}

/// Clipper's error body: its title and the cause. Clipper has two titles:
/// `Json error` for a body it cannot read into queries, `Query processing
/// error` for the rest. The status is Clipper's 400 for a version it does
/// not have, and wirespeed's own for what Clipper had no error for
/// (overload, an unavailable model, limits).
fn error_with(e: &Error, cause: &str) -> Response<Body> {
    let kind = e.kind();
    let title = match kind {
        ErrorKind::MalformedRequest | ErrorKind::InvalidInput => "Json error",
        _ => "Query processing error",
    };
    let status = match kind {
        ErrorKind::VersionNotFound => StatusCode::BAD_REQUEST,
        _ => StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    response::json_with_status(
        status,
        json!({ "error": title, "cause": cause }).to_string(),
    )
}
