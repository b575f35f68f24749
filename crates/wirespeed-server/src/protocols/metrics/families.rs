//! The Prometheus text format (0.0.4) of every counter: Triton's
//! per-model families from the statistics and schedulers, the latency
//! histograms, the server's own traffic and connections, and `process_*`.
//! Written with the `prometheus` crate's data model and text encoder
//! (`wirespeed-engine/src/metrics/mod.rs` says why).

use std::sync::atomic::Ordering;

use prometheus::core::Collector;
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use wirespeed_proto::inference as pb;

use super::Scrape;
use crate::net::counts::{Connections, ListenerKind};
use wirespeed_engine::metrics::{Histogram, InferProtocol, Refusal, Traffic};
use wirespeed_engine::statistics::FailureReason;
use wirespeed_engine::Engine;

/// The content type of the text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The scrape: every family, in the text format.
pub(crate) fn render(
    engine: &Engine,
    mirrors: &[std::sync::Arc<wirespeed_storage::Mirror>],
    traffic: &Traffic,
    scrape: &Scrape,
) -> String {
    let mut families = model_families(engine);
    families.push(storage_family(mirrors));
    #[cfg(feature = "python")]
    families.extend(custom_families());
    families.extend(traffic_families(traffic, &scrape.connections));
    families.extend(scrape.process.collect());
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

    /// Adds a sample with `labels`, whose value `set` puts in place. The
    /// labels are written in the order of their names, as Triton's
    /// (prometheus-cpp's) are: scrapers that match a sample's text
    /// (`{model="m",reason="BACKEND",version="1"}`) find it.
    fn add(&mut self, labels: &[(&str, &str)], set: impl FnOnce(&mut proto::Metric)) {
        let mut metric = proto::Metric::default();
        let mut labels = labels.to_vec();
        labels.sort_by_key(|(name, _)| *name);
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

    fn gauge_value(&mut self, labels: &[(&str, &str)], value: f64) {
        self.add(labels, |m| {
            let mut g = proto::Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
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
fn model_families(engine: &Engine) -> Vec<MetricFamily> {
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
    let mut first_hist = Family::histogram(
        "wirespeed_time_to_first_token_seconds",
        "A streaming (decoupled) model's first response, from the request's first byte: an LLM's time to first token",
    );
    let mut between_hist = Family::histogram(
        "wirespeed_inter_token_latency_seconds",
        "Between a streaming model's responses: an LLM's inter-token latency",
    );
    let mut running = Family::gauge(
        "wirespeed_inference_running_requests",
        "Executions of the model holding a compute slot now (beside nv_inference_pending_request_count, the queue)",
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
    let mut cache_hits = Family::counter(
        "nv_cache_num_hits_per_model",
        "Number of response cache hits per model",
    );
    let mut cache_misses = Family::counter(
        "nv_cache_num_misses_per_model",
        "Number of response cache misses per model",
    );
    let mut cache_hit_us = Family::counter(
        "nv_cache_hit_duration_per_model",
        "Cumulative time requests spent retrieving a cached response per model on cache hits (microseconds)",
    );
    let mut cache_miss_us = Family::counter(
        "nv_cache_miss_duration_per_model",
        "Cumulative time requests spent looking up and inserting responses into the cache on a cache miss (microseconds)",
    );

    for (name, served) in engine.models.all() {
        let version = served.version().to_owned();
        let labels = [("model", name.as_str()), ("version", version.as_str())];
        let stats = wirespeed_engine::counting::snapshot(&name, &served);
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
        let scheduler = served.scheduler();
        pending.count(&labels, scheduler.map_or(0, |s| s.waiting()) as u64);
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
            if served.model.decoupled() {
                first_hist.observed(&labels, &latencies.first_response);
                between_hist.observed(&labels, &latencies.between_responses);
            }
        }
        running.count(&labels, scheduler.map_or(0, |s| s.running()) as u64);
        let (defaulted, timed_out) = scheduler.map_or((0, 0), |s| {
            let counters = s.counters();
            (
                counters.defaults.load(Ordering::Relaxed),
                counters.timeouts.load(Ordering::Relaxed),
            )
        });
        defaults.count(&labels, defaulted);
        timeouts.count(&labels, timed_out);
        if let Some(size) = stats.batch_size {
            batch_size.count(&labels, size as u64);
        }
        if served.cache.is_some() {
            let hit = inference.cache_hit.unwrap_or_default();
            let miss = inference.cache_miss.unwrap_or_default();
            cache_hits.count(&labels, hit.count);
            cache_misses.count(&labels, miss.count);
            cache_hit_us.count(&labels, hit.ns / 1000);
            cache_miss_us.count(&labels, miss.ns / 1000);
        }
    }
    let mut cache_bytes = Family::gauge(
        "wirespeed_response_cache_bytes",
        "Bytes the response cache holds now (--cache-config)",
    );
    let mut cache_entries = Family::gauge(
        "wirespeed_response_cache_entries",
        "Answers the response cache holds now",
    );
    if let Some(cache) = engine.models.cache() {
        let (bytes, entries) = cache.usage();
        cache_bytes.count(&[], bytes as u64);
        cache_entries.count(&[], entries as u64);
    }
    let mut families = vec![success.0, failure.0, count.0, executions.0, pending.0];
    families.extend(selection_families(engine));
    families.extend(duration_families.into_iter().map(|f| f.0));
    families.extend([
        request_hist.0,
        queue_hist.0,
        infer_hist.0,
        first_hist.0,
        between_hist.0,
        running.0,
        defaults.0,
        timeouts.0,
        batch_size.0,
        cache_hits.0,
        cache_misses.0,
        cache_hit_us.0,
        cache_miss_us.0,
        cache_bytes.0,
        cache_entries.0,
    ]);
    families
}

/// Every inference graph's routes (`wirespeed_models::InferenceGraph`), by node and step;
/// every application's decisions (`wirespeed_models::Application`): by candidate,
/// how often it was chosen, its weight now (in the state of queries
/// without a key), its answers cut at the objective; by application, the
/// feedback learned from and the users with a state of their own.
fn selection_families(engine: &Engine) -> Vec<MetricFamily> {
    let mut selections = Family::counter(
        "wirespeed_selection_total",
        "Queries of an application its policy gave to a candidate (every candidate of an exp4 blend)",
    );
    let mut weights = Family::gauge(
        "wirespeed_selection_weight",
        "The probability (exp3, weighted) or share of the blend (exp4) of a candidate now, for queries without a key",
    );
    let mut stragglers = Family::counter(
        "wirespeed_selection_stragglers_total",
        "Answers of a candidate left out of an exp4 blend: cut at the latency objective, or failed",
    );
    let mut feedback = Family::counter(
        "wirespeed_selection_feedback_total",
        "Feedback calls an application learned from (POST /{app}/update)",
    );
    let mut keys = Family::gauge(
        "wirespeed_selection_keys",
        "Keys (users) with a selection state of their own",
    );
    let mut evicted = Family::counter(
        "wirespeed_selection_keys_evicted_total",
        "Keys whose selection state was dropped for a newer one (max_keys, least recently used)",
    );
    for (name, served) in engine.models.all() {
        let Some(application) = served.composite_as::<wirespeed_models::Application>() else {
            continue;
        };
        let selector = application.selector();
        let report = selector.report();
        let app = [("application", name.as_str()), ("policy", report.policy)];
        feedback.count(&app, report.feedback);
        keys.count(&app, report.keys);
        evicted.count(&app, report.evicted);
        for (i, candidate) in selector.candidates().iter().enumerate() {
            let model = candidate.to_string();
            let labels = [app[0], ("model", model.as_str())];
            selections.count(&labels, report.selections[i]);
            weights.gauge_value(&labels, report.weights[i]);
            stragglers.count(&labels, report.stragglers[i]);
        }
    }
    let mut routes = Family::counter(
        "wirespeed_graph_steps_total",
        "Requests an inference graph's node routed to a step (a model or another node)",
    );
    for (name, served) in engine.models.all() {
        let Some(graph) = served.composite_as::<wirespeed_models::InferenceGraph>() else {
            continue;
        };
        for (node_name, node) in &graph.graph().nodes {
            for (i, step) in node.steps.iter().enumerate() {
                let target = match &step.target {
                    wirespeed_models::StepTarget::Model(m)
                    | wirespeed_models::StepTarget::Node(m) => m,
                };
                let index = i.to_string();
                let label = step.name.as_deref().unwrap_or(&index);
                let labels = [
                    ("graph", name.as_str()),
                    ("node", node_name.as_str()),
                    ("step", label),
                    ("target", target.as_str()),
                ];
                routes.count(&labels, step.taken.get());
            }
        }
    }
    vec![
        routes.0,
        selections.0,
        weights.0,
        stragglers.0,
        feedback.0,
        keys.0,
        evicted.0,
    ]
}

/// The Python models' own families (`pb_utils.MetricFamily`), as they
/// made them.
#[cfg(feature = "python")]
fn custom_families() -> Vec<MetricFamily> {
    use wirespeed_models::{MetricKind, SeriesValue};
    wirespeed_models::custom_metrics()
        .into_iter()
        .map(|custom| {
            let mut family = match custom.kind {
                MetricKind::Counter => Family::counter(&custom.name, &custom.help),
                MetricKind::Gauge => Family::gauge(&custom.name, &custom.help),
                MetricKind::Histogram => Family::histogram(&custom.name, &custom.help),
            };
            for (labels, value) in &custom.series {
                let labels: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let kind = custom.kind;
                family.add(&labels, |m| match value {
                    SeriesValue::Value(v) if kind == MetricKind::Counter => {
                        let mut c = proto::Counter::default();
                        c.set_value(*v);
                        m.set_counter(c);
                    }
                    SeriesValue::Value(v) => {
                        let mut g = proto::Gauge::default();
                        g.set_value(*v);
                        m.set_gauge(g);
                    }
                    SeriesValue::Histogram {
                        buckets,
                        count,
                        sum,
                    } => {
                        let mut h = proto::Histogram::default();
                        h.set_sample_count(*count);
                        h.set_sample_sum(*sum);
                        h.set_bucket(
                            buckets
                                .iter()
                                .map(|&(bound, n)| {
                                    let mut b = proto::Bucket::default();
                                    b.set_upper_bound(bound);
                                    b.set_cumulative_count(n);
                                    b
                                })
                                .collect(),
                        );
                        m.set_histogram(h);
                    }
                });
            }
            family.0
        })
        .collect()
}

/// Failed listings and fetches of each repository in object storage.
fn storage_family(mirrors: &[std::sync::Arc<wirespeed_storage::Mirror>]) -> MetricFamily {
    let mut failures = Family::counter(
        "wirespeed_repository_storage_failures_total",
        "Listings and model fetches of a repository in object storage that failed",
    );
    for mirror in mirrors {
        failures.count(&[("repository", mirror.url())], mirror.failures());
    }
    failures.0
}

/// The server's own families.
fn traffic_families(traffic: &Traffic, connections: &Connections) -> Vec<MetricFamily> {
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
        accepted.count(&labels, connections.accepted(listener));
        open.count(&labels, connections.open(listener));
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
