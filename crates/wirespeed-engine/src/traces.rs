//! Distributed traces: the W3C trace context (`traceparent`,
//! `tracestate`) a client sends over HTTP or gRPC, passed on to the
//! servers a model calls (`backend = "upstream"`), and, with
//! `--otlp-endpoint`, OpenTelemetry spans exported over OTLP/gRPC.
//!
//! Each traced inference is one `infer` span (kind server, a child of the
//! client's span when it sent one) with a child span per stage: `read`,
//! `decode`, `queue`, `compute` and `encode`. The pipeline already times
//! each stage (`timing.rs` `Stages`), so the stage spans are made once the
//! request ends, from those times: a request the sampler skips costs one
//! sampling decision and no span. The sampler is parent-based: a client's
//! sampled trace is recorded, an unsampled one is not, and a request with
//! no trace context is recorded with probability `--trace-sample-ratio`.
//!
//! A request that runs no inference (a repository or shared-memory call)
//! records nothing: its span is only started when it is needed
//! ([`PendingSpan`]).
//!
//! Without `--otlp-endpoint`, nothing is recorded and a client's trace
//! context is passed on as it came. With it, upstream servers get this
//! server's `infer` span as their parent.
//!
//! The `opentelemetry` crates do the sampling, ids, batching and export;
//! what is written here is the mapping of the pipeline's stages to spans.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use wirespeed_core::{Error, TraceContext};

use crate::timing::Stages;

/// Where and how much to trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// The OTLP/gRPC collector, as `http://host:4317`.
    pub endpoint: String,
    /// The share of requests without a trace context that are recorded,
    /// from 0 to 1.
    pub sample_ratio: f64,
}

/// The tracer, when `--otlp-endpoint` is given.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// Starts the exporter; must be called inside the server's runtime
    /// (the gRPC client runs on it).
    pub fn start(config: &TracesConfig) -> Result<Traces, String> {
        if !(0.0..=1.0).contains(&config.sample_ratio) {
            return Err(format!(
                "--trace-sample-ratio is {}; it is a share of requests, from 0 to 1",
                config.sample_ratio
            ));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(config.endpoint.clone())
            .build()
            .map_err(|e| format!("--otlp-endpoint {}: {e}", config.endpoint))?;
        // OTEL_SERVICE_NAME, when set, names the service; else wirespeed.
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("wirespeed");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("wirespeed");
        Ok(Traces { provider, tracer })
    }

    /// Sends the spans not yet sent; at shutdown.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "cannot send the last traces");
        }
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// One request's trace.
#[derive(Default)]
pub enum RequestTrace {
    /// No trace context came, and none is recorded.
    #[default]
    None,
    /// Tracing is off: the client's context, passed on as it came.
    Passed(TraceContext),
    /// Tracing is on: this server's `infer` span, to be started.
    Span(Box<PendingSpan>),
}

/// A request's `infer` span, started (with the request's start time) when
/// something first needs it: its context, passed on to a server the model
/// calls, or the request's end (`RequestTrace::finish`). A request that
/// needs neither, one that runs no inference (a repository or
/// shared-memory call), starts none, so none is exported: the
/// OpenTelemetry SDK exports a span when it is dropped, ended or not.
pub struct PendingSpan {
    tracer: SdkTracer,
    parent: Context,
    start: SystemTime,
    span: OnceLock<Span>,
}

impl PendingSpan {
    /// The span, started now if it was not.
    fn span(&self) -> &Span {
        self.span
            .get_or_init(|| infer_span(&self.tracer, &self.parent, self.start))
    }

    /// The span, started now if it was not, and when the request started.
    fn into_span(self) -> (Span, SystemTime) {
        let PendingSpan {
            tracer,
            parent,
            start,
            span,
        } = self;
        let span = span
            .into_inner()
            .unwrap_or_else(|| infer_span(&tracer, &parent, start));
        (span, start)
    }
}

/// A request's `infer` span, from `start`.
fn infer_span(tracer: &SdkTracer, parent: &Context, start: SystemTime) -> Span {
    tracer
        .span_builder("infer")
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .start_with_context(tracer, parent)
}

impl RequestTrace {
    /// The trace of a request that came with `incoming` (the client's
    /// `traceparent` and `tracestate`, if any).
    pub fn begin(traces: Option<&Traces>, incoming: Option<TraceContext>) -> RequestTrace {
        let Some(traces) = traces else {
            return incoming.map_or(RequestTrace::None, RequestTrace::Passed);
        };
        let parent = match &incoming {
            Some(context) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(context.trace_id),
                SpanId::from_bytes(context.parent_id),
                TraceFlags::new(context.flags),
                true,
                // A tracestate that does not parse is dropped, as W3C says.
                context
                    .tracestate
                    .as_deref()
                    .and_then(|s| s.parse::<TraceState>().ok())
                    .unwrap_or_default(),
            )),
            None => Context::new(),
        };
        RequestTrace::Span(Box::new(PendingSpan {
            tracer: traces.tracer.clone(),
            parent,
            start: SystemTime::now(),
            span: OnceLock::new(),
        }))
    }

    /// The context to pass on to a server the model calls.
    pub fn outgoing(&self) -> Option<TraceContext> {
        match self {
            RequestTrace::None => None,
            RequestTrace::Passed(context) => Some(context.clone()),
            RequestTrace::Span(pending) => {
                let context = pending.span().span_context();
                if !context.is_valid() {
                    return None;
                }
                let state = context.trace_state();
                Some(TraceContext {
                    trace_id: context.trace_id().to_bytes(),
                    parent_id: context.span_id().to_bytes(),
                    flags: context.trace_flags().to_u8(),
                    tracestate: (state != &TraceState::NONE).then(|| state.header()),
                })
            }
        }
    }

    /// Ends the trace of a request that took `stages`: when it is
    /// recorded, the `infer` span and one span per stage, with the request's
    /// model, protocol and outcome.
    pub fn finish(self, traces: Option<&Traces>, stages: &Stages, request: Finished<'_>) {
        let (RequestTrace::Span(pending), Some(traces)) = (self, traces) else {
            return;
        };
        let (mut span, start) = pending.into_span();
        if !span.is_recording() {
            return;
        }
        // The stages are timed from the request's start, a moment before
        // the span's: they are laid out from the span's start.
        let end = SystemTime::now().max(start + stages.elapsed());
        span.set_attributes([
            KeyValue::new("wirespeed.request_id", request.id as i64),
            KeyValue::new("wirespeed.protocol", request.protocol),
            KeyValue::new("model.name", request.model.to_owned()),
            KeyValue::new("model.version", request.version.to_owned()),
            KeyValue::new("wirespeed.body_bytes", stages.body_bytes as i64),
        ]);
        if stages.batch > 0 {
            span.set_attribute(KeyValue::new("wirespeed.batch_rows", stages.batch as i64));
        }
        if let Err(error) = request.outcome {
            span.set_status(Status::error(error.message().to_owned()));
            span.set_attribute(KeyValue::new("error.type", format!("{:?}", error.kind())));
        }
        let parent = Context::new().with_remote_span_context(span.span_context().clone());
        let child = |name: &'static str, from: SystemTime, took: Duration| {
            if took.is_zero() {
                return;
            }
            let mut stage = traces
                .tracer
                .span_builder(Cow::Borrowed(name))
                .with_kind(SpanKind::Internal)
                .with_start_time(from)
                .start_with_context(&traces.tracer, &parent);
            stage.end_with_timestamp(from + took);
        };
        // The body is decoded as it arrives: decoding is the decoder's
        // share of the read, shown at its end.
        child("read", start, stages.read);
        let read_end = start + stages.read;
        child(
            "decode",
            read_end.checked_sub(stages.decode).unwrap_or(start),
            stages.decode,
        );
        child("queue", read_end, stages.queue);
        child("compute", read_end + stages.queue, stages.compute);
        child(
            "encode",
            read_end + stages.queue + stages.compute,
            stages.encode,
        );
        span.end_with_timestamp(end);
    }
}

/// What the `infer` span says of a request that ended.
pub struct Finished<'a> {
    /// The request's number.
    pub id: u64,
    /// The protocol it came in, as metrics label it.
    pub protocol: &'static str,
    /// The model it named.
    pub model: &'a str,
    /// The version it named; empty for the served one.
    pub version: &'a str,
    /// How it ended.
    pub outcome: Result<(), &'a Error>,
}
