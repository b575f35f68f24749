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

pub(crate) use histogram::Histogram;
pub use histogram::{Buckets, DEFAULT_BUCKETS};
pub(crate) use traffic::{InferProtocol, ListenerKind, Traffic};

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

use wirespeed_proto::inference as pb;

use crate::statistics::{self, FailureReason};
use crate::AppState;
use traffic::Refusal;

/// The content type of the text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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

/// The metrics of a running server.
pub(crate) struct Metrics {
    pub(crate) traffic: Arc<Traffic>,
    pub(crate) buckets: Option<Arc<Buckets>>,
    process: ProcessCollector,
}

impl Metrics {
    pub(crate) fn new(config: &MetricsConfig) -> Metrics {
        Metrics {
            traffic: Arc::new(Traffic::default()),
            buckets: config.buckets.clone().map(Arc::new),
            process: ProcessCollector::for_self(),
        }
    }
}

/// The scrape: every family, in the text format.
pub(crate) fn render(state: &AppState, metrics: &Metrics) -> String {
    let mut families = model_families(state);
    families.extend(traffic_families(&metrics.traffic));
    families.extend(metrics.process.collect());
    families.retain(|f| !f.get_metric().is_empty());
    let mut text = Vec::with_capacity(16 << 10);
    if let Err(e) = TextEncoder::new().encode(&families, &mut text) {
        tracing::error!(error = %e, "cannot write the metrics");
    }
    String::from_utf8(text).unwrap_or_default()
}

/// A family being filled.
struct Family(MetricFamily);

impl Family {
    fn new(name: &str, help: &str, kind: MetricType) -> Family {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_help(help.to_owned());
        f.set_field_type(kind);
        Family(f)
    }

    fn counter(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::COUNTER)
    }

    fn gauge(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::GAUGE)
    }

    fn histogram(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::HISTOGRAM)
    }

    /// Adds a sample with `labels`, whose value `set` puts in place.
    fn add(&mut self, labels: &[(&str, &str)], set: impl FnOnce(&mut proto::Metric)) {
        let mut metric = proto::Metric::default();
        metric.set_label(
            labels
                .iter()
                .map(|(name, value)| {
                    let mut pair = LabelPair::default();
                    pair.set_name((*name).to_owned());
                    pair.set_value((*value).to_owned());
                    pair
                })
                .collect(),
        );
        set(&mut metric);
        self.0.mut_metric().push(metric);
    }

    fn count(&mut self, labels: &[(&str, &str)], value: u64) {
        let kind = self.0.get_field_type();
        self.add(labels, |m| {
            if kind == MetricType::COUNTER {
                let mut c = proto::Counter::default();
                c.set_value(value as f64);
                m.set_counter(c);
            } else {
                let mut g = proto::Gauge::default();
                g.set_value(value as f64);
                m.set_gauge(g);
            }
        });
    }

    fn observed(&mut self, labels: &[(&str, &str)], histogram: &Histogram) {
        let snapshot = histogram.snapshot();
        self.add(labels, |m| {
            let mut h = proto::Histogram::default();
            h.set_sample_count(snapshot.count);
            h.set_sample_sum(snapshot.sum_seconds);
            h.set_bucket(
                snapshot
                    .cumulative
                    .iter()
                    .map(|&(bound, count)| {
                        let mut b = proto::Bucket::default();
                        b.set_upper_bound(bound);
                        b.set_cumulative_count(count);
                        b
                    })
                    .collect(),
            );
            m.set_histogram(h);
        });
    }
}

/// Triton's per-model families and wirespeed's per-model additions.
fn model_families(state: &AppState) -> Vec<MetricFamily> {
    let mut success = Family::counter(
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
    );
    let mut failure = Family::counter(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes, by reason",
    );
    let mut count = Family::counter("nv_inference_count", "Number of inferences performed");
    let mut executions = Family::counter(
        "nv_inference_exec_count",
        "Number of model executions performed",
    );
    let mut pending = Family::gauge(
        "nv_inference_pending_request_count",
        "Instantaneous number of requests waiting for a compute slot",
    );
    let durations = [
        (
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds, successful requests",
        ),
        (
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds",
        ),
        (
            "nv_inference_compute_input_duration_us",
            "Cumulative compute input duration in microseconds (decoding the request)",
        ),
        (
            "nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration in microseconds",
        ),
        (
            "nv_inference_compute_output_duration_us",
            "Cumulative inference compute output duration in microseconds (encoding the answer)",
        ),
    ];
    let mut duration_families: Vec<Family> = durations
        .iter()
        .map(|(name, help)| Family::counter(name, help))
        .collect();
    let mut request_hist = Family::histogram(
        "wirespeed_inference_request_duration_seconds",
        "Latency of successful inference requests, from the first byte to the answer",
    );
    let mut queue_hist = Family::histogram(
        "wirespeed_inference_queue_duration_seconds",
        "Time successful inference requests waited for a compute slot",
    );
    let mut infer_hist = Family::histogram(
        "wirespeed_inference_compute_infer_duration_seconds",
        "Time the model took on successful inference requests",
    );
    let mut defaults = Family::counter(
        "wirespeed_default_outputs_total",
        "Requests answered with the model's default outputs ([slo])",
    );
    let mut timeouts = Family::counter(
        "wirespeed_queue_timeouts_total",
        "Requests whose queue timeout passed while they waited",
    );
    let mut batch_size = Family::gauge(
        "wirespeed_adaptive_batch_size",
        "The adaptive batcher's batch size now, in rows",
    );

    for (name, served) in state.models.all() {
        let version = served.version().to_owned();
        let labels = [("model", name.as_str()), ("version", version.as_str())];
        let stats = statistics::snapshot(&name, &served);
        let triton = &stats.triton;
        let inference = triton.inference_stats.unwrap_or_default();
        let us = |d: Option<pb::StatisticDuration>| d.unwrap_or_default().ns / 1000;
        success.count(&labels, inference.success.unwrap_or_default().count);
        for reason in FailureReason::ALL {
            let with_reason = [labels[0], labels[1], ("reason", reason.label())];
            failure.count(&with_reason, served.stats.failures(reason));
        }
        count.count(&labels, triton.inference_count);
        executions.count(&labels, triton.execution_count);
        pending.count(&labels, served.scheduler.waiting() as u64);
        for (family, d) in duration_families.iter_mut().zip([
            inference.success,
            inference.queue,
            inference.compute_input,
            inference.compute_infer,
            inference.compute_output,
        ]) {
            family.count(&labels, us(d));
        }
        if let Some(latencies) = served.stats.latencies() {
            request_hist.observed(&labels, &latencies.request);
            queue_hist.observed(&labels, &latencies.queue);
            infer_hist.observed(&labels, &latencies.compute_infer);
        }
        let counters = served.scheduler.counters();
        defaults.count(&labels, counters.defaults.load(Ordering::Relaxed));
        timeouts.count(&labels, counters.timeouts.load(Ordering::Relaxed));
        if let Some(size) = stats.batch_size {
            batch_size.count(&labels, size as u64);
        }
    }
    let mut families = vec![success.0, failure.0, count.0, executions.0, pending.0];
    families.extend(duration_families.into_iter().map(|f| f.0));
    families.extend([
        request_hist.0,
        queue_hist.0,
        infer_hist.0,
        defaults.0,
        timeouts.0,
        batch_size.0,
    ]);
    families
}

/// The server's own families.
fn traffic_families(traffic: &Traffic) -> Vec<MetricFamily> {
    let mut requests = Family::counter(
        "wirespeed_infer_requests_total",
        "Infer requests by the protocol they came in",
    );
    let mut bytes = Family::counter(
        "wirespeed_decoded_bytes_total",
        "Bytes of infer request bodies (decompressed) and gRPC messages decoded, by protocol",
    );
    for protocol in InferProtocol::ALL {
        let labels = [("protocol", protocol.label())];
        requests.count(&labels, traffic.requests(protocol));
        bytes.count(&labels, traffic.decoded_bytes(protocol));
    }
    let mut accepted = Family::counter(
        "wirespeed_connections_total",
        "Connections accepted, by listener",
    );
    let mut open = Family::gauge(
        "wirespeed_open_connections",
        "Connections open now, by listener",
    );
    for listener in ListenerKind::ALL {
        let (api, transport) = listener.labels();
        let labels = [("api", api), ("transport", transport)];
        accepted.count(&labels, traffic.accepted(listener));
        open.count(&labels, traffic.open(listener));
    }
    let mut refused = Family::counter(
        "wirespeed_refused_requests_total",
        "Requests refused at a limit before any model saw them: headers, body size, request limits, body timeouts",
    );
    for refusal in Refusal::ALL {
        refused.count(&[("limit", refusal.label())], traffic.refusals(refusal));
    }
    vec![requests.0, bytes.0, accepted.0, open.0, refused.0]
}
