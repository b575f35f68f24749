//! The protocols, one module per family, each owning its REST and gRPC
//! faces together: the Open Inference Protocol with Triton's extensions
//! (`v2/`), TF Serving's REST and gRPC APIs, which KServe v1 shares
//! (`tfserving/`), and Clipper's REST API (`clipper.rs`). Each infer
//! endpoint is a `Codec` of the engine's one pipeline
//! (`wirespeed-engine/src/pipeline.rs`).
//!
//! `rest.rs` is the REST listener's service (the router, `router.rs`, and
//! the bearer-token check, `auth.rs`); `grpc.rs` is the gRPC listener's
//! (tonic's routes for every protocol's services); `metrics.rs` answers
//! Prometheus scrapes; `http/` is what every REST face shares: the body
//! reader, compression and answers.

pub(crate) mod auth;
pub(crate) mod clipper;
pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod openai;
pub(crate) mod rest;
pub(crate) mod router;
pub(crate) mod tfserving;
pub(crate) mod v2;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use wirespeed_http::RequestBody;

use auth::Auth;
use http::response::Body;
use wirespeed_engine::model_control::Repository;
use wirespeed_engine::Engine;

/// What every protocol's endpoints share: the serving layer's handle and
/// what only the protocols use.
pub(crate) struct Front {
    /// The pipeline's handle: models, pool, decoding, regions, traces.
    pub(crate) engine: Arc<Engine>,
    /// What a request's head, body or message may be.
    pub(crate) limits: MessageLimits,
    /// The bearer token, when requests must carry one.
    pub(crate) auth: Auth,
    /// The model repository: index, loads and unloads while serving.
    pub(crate) repository: Arc<Repository>,
    /// What a metrics scrape reads beyond the serving layer, when metrics
    /// are on.
    pub(crate) scrape: Option<metrics::Scrape>,
    /// TF Serving's `Predict` answers numbers in `tensor_content`, not in
    /// the typed fields.
    pub(crate) tf_tensor_content: bool,
    /// Clipper's query ids, counted from server start.
    pub(crate) clipper_queries: AtomicU64,
    /// Where a REST request for none of the protocols' endpoints goes: the
    /// transcoded gRPC services (`wirespeed proxy`), if any.
    pub(crate) fallback: Option<Arc<dyn Fallback>>,
    /// The headers and metadata copied into a V2 request's parameters.
    pub(crate) header_forward: v2::parameters::HeaderForward,
    /// The name server metadata answers, and its REST body.
    pub(crate) server_name: String,
    pub(crate) server_metadata: bytes::Bytes,
}

/// The sizes and times the protocols hold a request to (`Limits` gives
/// them).
#[derive(Debug, Clone)]
pub(crate) struct MessageLimits {
    /// The largest REST request body, in bytes.
    pub(crate) max_body_bytes: usize,
    /// The largest gRPC message, in bytes.
    pub(crate) max_grpc_message_bytes: usize,
    /// The most bytes of request headers.
    pub(crate) max_header_bytes: usize,
    /// The longest pause between two pieces of a request body.
    pub(crate) body_timeout: Duration,
    /// Time to receive a whole request body.
    pub(crate) request_timeout: Duration,
}

impl MessageLimits {
    /// What a REST body may be.
    pub(crate) fn body(&self) -> wirespeed_http::BodyLimits {
        wirespeed_http::BodyLimits {
            max_bytes: self.max_body_bytes,
            idle: self.body_timeout,
            total: self.request_timeout,
        }
    }
}

/// An answer being made.
pub(crate) type Answering<'a> =
    Pin<Box<dyn Future<Output = Option<hyper::Response<Body>>> + Send + 'a>>;

/// A REST face beyond the protocols' endpoints, asked about any request
/// whose path names none of them (the transcoding proxy's routes).
pub(crate) trait Fallback: Send + Sync {
    /// Whether a route of its own has `path`: then the request is its own,
    /// even where a protocol's endpoint has the same path (a proxy serves
    /// its services' routes first, its own health and metrics where they
    /// leave the path free).
    fn serves(&self, method: &hyper::Method, path: &str) -> bool;

    /// The answer to `request`, or `None` when no route of its own matches
    /// either (the router's 404 is answered then).
    fn answer(&self, request: hyper::Request<RequestBody>) -> Answering<'_>;
}

/// The trace context of a request's headers (HTTP headers, or gRPC
/// metadata, which are HTTP/2 headers): `traceparent`, and `tracestate`
/// with it. One that does not parse is ignored.
pub(crate) fn trace_context(headers: &hyper::HeaderMap) -> Option<wirespeed_core::TraceContext> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let tracestate = headers.get("tracestate").and_then(|v| v.to_str().ok());
    wirespeed_core::TraceContext::parse(traceparent, tracestate)
}
