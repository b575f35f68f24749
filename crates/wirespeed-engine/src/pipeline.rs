//! The one path every infer request takes, whatever protocol it came in.
//!
//! A front end is a [`Codec`]: it reads its protocol's request into an
//! [`InferRequest`], and writes an [`InferResponse`] (or an [`Error`]) as
//! its protocol's answer. [`Engine::infer`] does everything in between,
//! once for all of them: the request id and tracing span, the model lookup,
//! `admit` (decode through the codec, and take what is the server's: queue
//! parameters, sequences, shared memory, classification), then `stream` (a
//! decoupled model) or `answer` (the response cache and scheduler, or a
//! composite's runner), the stage timings and their `Server-Timing` text,
//! and the logging of server errors (whose text never reaches the client).
//! So the same request gives the same outputs, and the same mistake the
//! same error, through V2 JSON, V2 binary, raw bodies, TF Serving, Clipper,
//! OpenAI and gRPC. What only some protocols have stays in their codecs
//! (Clipper's version in the body); what a model reads from a request's
//! headers (an application's key) each protocol with headers gives the
//! same way ([`Codec::header`]).
//!
//! The spans, enabled with `--log-level debug`: `request` (with its id and
//! protocol) around `read` (which decodes as the body arrives, and records
//! the time inside the decoder as `decode_us`), `queue`, `compute` and
//! `encode`; the compute span follows the request onto the CPU pool.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};
use wirespeed_core::{
    Error, ErrorKind, InferRequest, InferResponse, ParameterValue, Parameters, TraceContext,
};

use crate::classification;
use crate::composite;
use crate::counting::Counting;
use crate::metrics::InferProtocol;
use crate::regions;
use crate::reserved_parameters;
use crate::sequences;
use crate::served::ServedModel;
pub use crate::served::Target;
use crate::statistics::FailureReason;
use crate::stream::ResponseStream;
use crate::timing::{timed, timed_on, Stages};
use crate::traces::{Finished, RequestTrace};
use crate::Engine;
use wirespeed_scheduler::{CallContext, Spent, DEFAULT_EXPLANATION};

/// One request's number, span and clock, from the moment a front end took
/// it.
pub struct RequestContext {
    /// The number in server errors and in the log.
    pub id: u64,
    /// The `request` span its stages are recorded under.
    pub span: Span,
    /// Its stage timings, started when the front end took it.
    pub stages: Stages,
    /// When the client stops waiting: `--request-timeout` after the start,
    /// or sooner when a gRPC client's `grpc-timeout` says so. A model that
    /// calls another server passes it on.
    pub deadline: Instant,
    /// The answer is the model's default outputs.
    pub default_answer: bool,
    /// Its distributed trace (`traces.rs`).
    pub trace: RequestTrace,
}

impl RequestContext {
    /// Numbers a new request of `protocol` that came with the trace
    /// context `trace`, and starts its clock.
    pub fn new(
        engine: &Engine,
        protocol: &'static str,
        trace: Option<TraceContext>,
    ) -> RequestContext {
        let id = engine.next_request_id();
        let stages = Stages::start();
        RequestContext {
            id,
            span: tracing::debug_span!("request", id, protocol),
            deadline: stages.started() + engine.request_timeout,
            default_answer: false,
            trace: RequestTrace::begin(engine.traces.as_ref(), trace),
            stages,
        }
    }

    /// Brings the deadline forward to `timeout` from now, if that is
    /// sooner: the client's own deadline.
    pub fn within(mut self, timeout: Option<Duration>) -> RequestContext {
        if let Some(deadline) = timeout.and_then(|t| Instant::now().checked_add(t)) {
            self.deadline = self.deadline.min(deadline);
        }
        self
    }
}

/// Request parameters that ask something of the server (how to answer,
/// how to queue), not of the model: never passed on to a model.
const SERVER_PARAMETERS: &[&str] = &[
    "binary_data_output",
    "triton_enable_empty_final_response",
    "priority",
    "timeout",
];

/// The request's parameters that a model gets.
fn model_parameters(parameters: Parameters) -> Parameters {
    let mut parameters = parameters;
    parameters.retain(|(key, _)| !SERVER_PARAMETERS.contains(&key.as_str()));
    parameters
}

/// A request of more rows than the model's Triton `max_batch_size` is
/// refused, in Triton's words.
fn check_batch_size(served: &ServedModel, name: &str, request: &InferRequest) -> Result<(), Error> {
    let max = served.max_batch_size;
    if max == 0 {
        return Ok(());
    }
    match request.inputs.iter().find_map(|t| t.shape.first().copied()) {
        Some(rows) if rows > max => Err(Error::invalid_input(format!(
            "inference request batch-size must be <= {max} for '{name}'"
        ))),
        _ => Ok(()),
    }
}

/// One protocol's side of an infer request.
///
/// Its futures are not required to be `Send`: a codec is driven on its
/// connection's task, inside [`infer`], never spawned.
#[allow(async_fn_in_trait)]
pub trait Codec {
    /// What the protocol answers with: an HTTP response, a gRPC message.
    type Answer;

    /// The protocol, as metrics count it.
    const PROTOCOL: InferProtocol;

    /// Reads and decodes the request for `model`, recording the read and
    /// decode times in `stages`. Anything the answer needs later (the
    /// format the request came in, which outputs go back as binary) stays
    /// in the codec. A protocol whose body names the version (Clipper's
    /// `version`) puts that version in `model`: the request runs on it.
    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error>;

    /// The request header (HTTP) or call metadata (gRPC) `name`, for a
    /// model that reads one ([`ServedModel::header_parameters`]); `None`
    /// where the protocol has none.
    fn header(&self, _name: &str) -> Option<String> {
        None
    }

    /// The request names no served model: finish with what is left of it
    /// (a body to read and drop), and return the error as the protocol
    /// words it.
    async fn refuse(&mut self, error: Error) -> Error {
        error
    }

    /// The protocol's answer for `response`.
    fn encode(&mut self, response: InferResponse) -> Result<Self::Answer, Error>;

    /// The protocol's answer for a decoupled model's stream of responses
    /// (`stream.rs`). By default the protocol answers once, as Triton's
    /// `generate` does: the stream's one response, or an error when the
    /// model sent none or several. A protocol that streams (gRPC
    /// `ModelStreamInfer`, `generate_stream`) writes each as it comes.
    async fn encode_stream(&mut self, stream: ResponseStream) -> Result<Self::Answer, Error> {
        let response = stream.only().await?;
        self.encode(response)
    }

    /// Adds the stage timings (`Server-Timing` text) to a success, and
    /// flags one whose outputs are the model's defaults (`default`: it
    /// would have missed its latency objective) where the protocol has
    /// room outside the body: a header, gRPC trailing metadata. The body
    /// says it too where its format can (V2's response parameters,
    /// Clipper's `default`).
    fn stamp(answer: &mut Self::Answer, timing: &str, default: bool);

    /// The protocol's answer for `error`, whose client-facing text is
    /// `message`.
    fn error(&self, error: &Error, message: &str) -> Self::Answer;
}

impl Engine {
    /// Runs one infer request through `codec`'s protocol: look the model
    /// up, decode, queue, compute, encode, stamp; or answer the error.
    /// Every protocol's infer endpoint comes here.
    ///
    /// Not an `async fn`, nor is the function it returns: each would be
    /// one more future around the request's, made and copied whole
    /// (memcpy) as the request starts.
    pub fn infer<'a, C: Codec + 'a>(
        &'a self,
        context: RequestContext,
        target: Target<'a>,
        codec: C,
    ) -> impl Future<Output = C::Answer> + use<'a, C> {
        infer(self, context, target, codec)
    }
}

fn infer<'a, C: Codec + 'a>(
    engine: &'a Engine,
    mut context: RequestContext,
    target: Target<'a>,
    mut codec: C,
) -> impl Future<Output = C::Answer> + use<'a, C> {
    let span = context.span.clone();
    async move {
        let result = run(engine, &mut context, target, &mut codec).await;
        if let Some(traffic) = &engine.traffic {
            traffic.request(C::PROTOCOL, context.stages.body_bytes);
            if let Err(e) = &result {
                traffic.refused(e.kind());
            }
        }
        std::mem::take(&mut context.trace).finish(
            engine.traces.as_ref(),
            &context.stages,
            Finished {
                id: context.id,
                protocol: C::PROTOCOL.label(),
                model: target.name,
                version: target.version.unwrap_or_default(),
                outcome: result.as_ref().map(|_| ()),
            },
        );
        match result {
            Ok(mut answer) => {
                C::stamp(&mut answer, &context.stages.text(), context.default_answer);
                answer
            }
            Err(error) => {
                let message = public_message(&error, context.id);
                codec.error(&error, &message)
            }
        }
    }
    .instrument(span)
}

async fn run<C: Codec>(
    engine: &Engine,
    context: &mut RequestContext,
    target: Target<'_>,
    codec: &mut C,
) -> Result<C::Answer, Error> {
    let served = match engine.models.target(&target) {
        Ok(served) => served,
        Err(e) => return Err(codec.refuse(e).await),
    };
    if let Err(reason) = served.model.ready() {
        let error = Error::new(
            ErrorKind::Unavailable,
            format!("model '{}' is not ready: {reason}", target.name),
        );
        served
            .stats
            .failure(context.stages.elapsed(), FailureReason::Rejected);
        return Err(codec.refuse(error).await);
    }
    // Every request that reached a model is counted, once, as it ends,
    // against the version that ran it; one whose client left first (the
    // future dropped) as canceled.
    let mut counting = Counting::new(served, context.stages.started());
    let result = compute(engine, &mut counting.served, context, target, codec).await;
    counting.finish(result.as_ref().map(drop), &context.stages);
    result
}

async fn compute<C: Codec>(
    engine: &Engine,
    model: &mut Arc<ServedModel>,
    context: &mut RequestContext,
    target: Target<'_>,
    codec: &mut C,
) -> Result<C::Answer, Error> {
    let admitted = admit(engine, model, context, target, codec).await?;
    if model.model.decoupled() {
        let stream = stream(model, admitted, target, &mut context.stages).await?;
        return codec.encode_stream(stream).await;
    }
    let response = answer(engine, model, admitted, context, target).await?;
    let _encoding = tracing::debug_span!("encode").entered();
    timed(&mut context.stages.encode, || codec.encode(response))
}

/// A decoded request with what the server took of it, ready to run.
struct Admitted {
    /// The inputs, the outputs asked for and the id; its parameters are
    /// the call's.
    request: InferRequest,
    /// What the model's scheduler gets with the inputs.
    call: CallContext,
    /// A stateful model's turn in its sequence.
    turn: Option<sequences::Turn>,
    /// The outputs to answer as classes.
    classify: Vec<classification::Classify>,
    /// The outputs to write to shared memory.
    placements: regions::Placements,
}

/// Decodes the request through `codec` and takes what is the server's
/// of it: its queueing and sequence parameters, its inputs in shared
/// memory, its classification and output placements, its batch size
/// checked; a stateful model's request waits here for its sequence's
/// turn.
async fn admit<C: Codec>(
    engine: &Engine,
    model: &mut Arc<ServedModel>,
    context: &mut RequestContext,
    target: Target<'_>,
    codec: &mut C,
) -> Result<Admitted, Error> {
    let stages = &mut context.stages;
    // Reading and decoding overlap (the body is decoded as it arrives): one
    // span for the read, with the time inside the decoder as a field.
    let reading = tracing::debug_span!("read", decode_us = tracing::field::Empty);
    let request = codec
        .decode(model, stages)
        .instrument(reading.clone())
        .await;
    reading.record("decode_us", stages.decode.as_micros() as u64);
    drop(reading);
    let mut request = request?;
    let served: &ServedModel = model;
    for (header, parameter) in &served.header_parameters {
        if let Some(value) = codec.header(header) {
            request
                .parameters
                .push((parameter.clone(), ParameterValue::String(value)));
        }
    }
    let queueing = reserved_parameters::read(&request.parameters)?;
    let sequence = sequences::flags(&mut request.parameters)?;
    // Inputs in shared memory are read as part of decoding the request;
    // what the outputs ask for is checked before the model runs.
    let shm = &engine.shared_memory;
    let copies = shm.resolve_inputs(&mut request)?;
    let classify = classification::requested(&request.outputs, served.metadata())?;
    let placements = shm.placements(&request.outputs)?;
    if !copies.is_empty() {
        let max_element = engine.decode_options.limits.max_string_bytes;
        let offload = copies.bytes() > regions::OFFLOAD_COPY_BYTES;
        request = timed_on(&engine.pool, offload, &mut stages.decode, move || {
            copies.copy(&mut request, max_element).map(|()| request)
        })
        .await?;
    }
    check_batch_size(served, target.name, &request)?;
    // A stateful model's request waits for its sequence's turn, and gets
    // the sequence's controls and state.
    let turn = match (&served.sequences, sequence) {
        // An iterative sequence is its one request: nothing to wait for.
        (Some(sequences), None) if sequences.sequencing().iterative => None,
        (Some(sequences), flags) => Some(sequences.admit(&mut request, flags).await?),
        (None, Some(flags)) => {
            return Err(Error::invalid_input(format!(
                "sequence_id {} was given to model '{}', which has no sequence batching (it \
                 keeps no state between requests); leave sequence_* out",
                flags.id, target.name
            )))
        }
        (None, None) => None,
    };
    if served.max_batch_size > 0 {
        // Triton counts each row of a batched request as an inference.
        stages.inferences = request
            .inputs
            .iter()
            .find_map(|t| t.shape.first().copied())
            .unwrap_or(1) as u64;
    }
    let mut parameters = model_parameters(std::mem::take(&mut request.parameters));
    if let Some(turn) = &turn {
        turn.add_parameters(&mut parameters);
    }
    let call = CallContext {
        started: stages.started(),
        parameters,
        deadline: Some(context.deadline),
        priority: queueing.priority,
        timeout: queueing.timeout,
        trace: context.trace.outgoing(),
        responses: None,
        input_parameters: std::mem::take(&mut request.input_parameters),
    };
    Ok(Admitted {
        request,
        call,
        turn,
        classify,
        placements,
    })
}

/// Runs a decoupled model: its run and its responses overlap, and the
/// stream starts with its first response.
async fn stream(
    model: &Arc<ServedModel>,
    admitted: Admitted,
    target: Target<'_>,
    stages: &mut Stages,
) -> Result<ResponseStream, Error> {
    let Admitted {
        request,
        mut call,
        turn,
        classify,
        placements,
    } = admitted;
    if !classify.is_empty() || !placements.is_empty() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "model '{}' is decoupled: its outputs cannot be classified or placed in \
                 shared memory",
                target.name
            ),
        ));
    }
    let (sender, receiver) = wirespeed_core::response_channel();
    call.responses = Some(sender);
    let running = Arc::clone(model);
    let requested = request.outputs;
    let run = Box::pin(async move {
        let mut spent = Spent::default();
        let ran = match running.scheduler() {
            Some(scheduler) => scheduler
                .run(request.inputs, &requested, call, &mut spent)
                .await
                .map(drop),
            None => Err(Error::internal(format!(
                "decoupled model '{}' has no scheduler",
                running.metadata().name
            ))),
        };
        // A sequence's next request waits until the model has taken
        // this one.
        drop(turn);
        ran
    });
    let compute = Instant::now();
    let stream = ResponseStream::first(
        receiver,
        run,
        model.metadata().name.clone(),
        target.version.unwrap_or(model.version()).to_owned(),
        answer_id(model, request.id),
        model.dialect,
    )
    .await;
    stages.compute = compute.elapsed();
    Ok(stream?.timed(Arc::clone(model), stages.started()))
}

/// Runs the model once (through its response cache and scheduler, or a
/// composite's runner) and makes its response: the sequence's next state
/// kept, the default and straggler flags, classes, outputs placed in
/// shared memory.
async fn answer(
    engine: &Engine,
    served: &ServedModel,
    admitted: Admitted,
    context: &mut RequestContext,
    target: Target<'_>,
) -> Result<InferResponse, Error> {
    let Admitted {
        request,
        call,
        turn,
        classify,
        placements,
    } = admitted;
    let stages = &mut context.stages;
    let answer = composite::answer(
        &engine.models,
        served,
        request.inputs,
        &request.outputs,
        call,
        stages,
        0,
    )
    .await?;
    let stragglers = answer.stragglers;
    let mut outputs = answer.outputs;
    if let Some(turn) = turn {
        turn.finish(&mut outputs)?;
    }
    if !served.output_parameters.is_empty() {
        for output in outputs.iter_mut().filter(|o| o.parameters.is_empty()) {
            output.parameters = served.output_parameters.clone();
        }
    }
    context.default_answer = answer.default;
    let mut parameters = if answer.default {
        vec![
            ("default".to_owned(), ParameterValue::Bool(true)),
            (
                "default_explanation".to_owned(),
                ParameterValue::String(DEFAULT_EXPLANATION.to_owned()),
            ),
        ]
    } else {
        Vec::new()
    };
    if stragglers > 0 {
        // An application's blend made without some of its candidates.
        parameters.push((
            "stragglers".to_owned(),
            ParameterValue::Int(stragglers as i64),
        ));
    }
    wirespeed_core::lift_response_parameters(&mut outputs, &mut parameters);
    let id = answer_id(served, request.id);
    classification::apply(&mut outputs, &classify, served)?;
    let mut shared_outputs = Vec::new();
    if !placements.is_empty() {
        let offload = placements.bytes() > regions::OFFLOAD_COPY_BYTES;
        (outputs, shared_outputs) =
            timed_on(&engine.pool, offload, &mut stages.encode, move || {
                placements.write(&outputs).map(|written| (outputs, written))
            })
            .await?;
    }
    Ok(InferResponse {
        model_name: served.metadata().name.clone(),
        model_version: target.version.unwrap_or(served.version()).to_owned(),
        id,
        parameters,
        outputs,
        shared_outputs,
        dialect: served.dialect,
    })
}

/// An MLServer or KServe model's answer has an id, a UUID when the
/// request gave none, as those servers make one.
fn answer_id(served: &ServedModel, id: Option<String>) -> Option<String> {
    use wirespeed_core::Dialect;
    match (served.dialect, id) {
        (Dialect::Mlserver | Dialect::Kserve, None) => Some(uuid::Uuid::new_v4().to_string()),
        (_, id) => id,
    }
}

/// What the client is told of `error`: the message of a client error; for
/// a server error, only that it happened and the request id, which the log
/// line (written here) also carries.
pub fn public_message(error: &Error, id: u64) -> String {
    if error.kind().is_client_error() {
        return error.message().to_owned();
    }
    tracing::error!(request_id = id, error = %error, "request failed");
    format!("internal server error (request id {id}); the server log has the details")
}
