//! Prometheus metrics, on `--metrics ADDR` and on `/metrics` of the REST
//! port, so that one scrape port serves a pod.
//!
//! Nothing here counts a request: the pipeline counts each one once, in
//! its model's statistics (`statistics.rs`, which also feeds Triton's
//! statistics API) and its scheduler (`scheduler/mod.rs` `Counters`), and
//! the server's own traffic in [`Traffic`]. A scrape reads those counters
//! and writes them in the Prometheus text format (0.0.4) with the
//! `prometheus` crate's data model and text encoder, and its process
//! collector for CPU and memory. That crate writes counters under the
//! names given (Triton's have no `_total`); `prometheus-client` would
//! append `_total` (OpenMetrics), and the `metrics` exporter would keep a
//! second copy of every count in its registry.
//!
//! What is exported (`docs/metrics.md` has the full list):
//!
//! - Triton's per-model families, with `model` and `version` labels:
//!   `nv_inference_request_success`, `nv_inference_request_failure`
//!   (`reason`: REJECTED, CANCELED, BACKEND, OTHER), `nv_inference_count`,
//!   `nv_inference_exec_count`, `nv_inference_pending_request_count`, and
//!   the cumulative durations in microseconds
//!   `nv_inference_{request,queue,compute_input,compute_infer,compute_output}_duration_us`.
//! - Latency histograms per model, `wirespeed_inference_request_duration_seconds`,
//!   `..._queue_duration_seconds` and `..._compute_infer_duration_seconds`
//!   (`histogram.rs`), with the `--metrics-buckets` bounds.
//! - wirespeed's own: infer requests and bytes decoded per protocol,
//!   connections per listener, refusals at a limit, default answers, queue
//!   timeouts, the adaptive batch size; and `process_*`.

mod histogram;
mod shards;
mod traffic;

pub use histogram::Histogram;
pub use histogram::{Buckets, DEFAULT_BUCKETS};
pub use traffic::{InferProtocol, Refusal, Traffic};

use std::net::SocketAddr;

/// How metrics are served, when they are on.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// A listener of their own (`--metrics ADDR`, 127.0.0.1:8002 in the
    /// `wirespeed` command), besides `/metrics` on the REST port. None by
    /// default: a program embedding the server opens no port it did not
    /// ask for.
    pub addr: Option<SocketAddr>,
    /// The latency histograms' bounds; no histograms when `None`.
    pub buckets: Option<Buckets>,
}

impl Default for MetricsConfig {
    fn default() -> MetricsConfig {
        MetricsConfig {
            addr: None,
            buckets: Some(Buckets::default()),
        }
    }
}
