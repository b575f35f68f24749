//! Triton's statistics extension: per model, how many requests succeeded
//! and failed, and the cumulative time of each stage, as
//! `GET /v2/models[/{m}[/versions/{v}]]/stats` and gRPC `ModelStatistics`
//! report them.
//!
//! The pipeline counts every request that reached a model, once, when it
//! ends (`pipeline.rs`). A count is a handful of relaxed atomic additions
//! on the model's own counters: no lock and no allocation on the request
//! path. Triton's stages map onto wirespeed's: `queue` is the wait for a
//! compute slot, `compute_input` the decoding of the request into tensors,
//! `compute_infer` the model, `compute_output` the encoding of the answer;
//! `success` and `fail` are the whole request, from its first byte to its
//! answer. `inference_count` counts inferences as Triton does: a request's
//! rows for a model with Triton's batch dimension (`max_batch_size`), one
//! per request otherwise. Without batching every request is one execution,
//! so `execution_count` counts successes, and
//! `batch_stats` has the one batch size 1. With `[batching]`,
//! `execution_count` counts the model's executions and `batch_stats` has
//! one entry per batch size (rows) run, from the scheduler's counters:
//! `compute_input` is the joining of the requests' inputs, `compute_infer`
//! the model, `compute_output` the cutting of its outputs.
//!
//! The REST answer adds, per model, wirespeed's own counts under
//! `"wirespeed"`: answers given as the default outputs (`[slo]`), requests
//! whose queue timeout passed, and the adaptive batcher's size now.
//!
//! The same counters are what `/metrics` exports (`metrics/mod.rs`), with
//! failures split by Triton's reasons and, when metrics are on, latency
//! histograms observed here too: a request is counted in one place.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use wirespeed_proto::inference as pb;

use std::sync::Arc;

use wirespeed_core::ErrorKind;

use crate::metrics::{Buckets, Histogram};
use crate::timing::Stages;

/// Why a request failed, in the words of Triton's
/// `nv_inference_request_failure{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Refused by the scheduler: the queue was full, a queue timeout
    /// passed, the model was not ready.
    Rejected = 0,
    /// The client left or its deadline passed before the answer.
    Canceled = 1,
    /// The model (or the server behind it) failed.
    Backend = 2,
    /// Anything else: mostly requests the server could not accept.
    Other = 3,
}

impl FailureReason {
    /// Every reason, in the order of their numbers.
    pub const ALL: [FailureReason; 4] = [
        FailureReason::Rejected,
        FailureReason::Canceled,
        FailureReason::Backend,
        FailureReason::Other,
    ];

    /// The reason a failure with an error of `kind` counts under.
    pub fn of(kind: ErrorKind) -> FailureReason {
        match kind {
            ErrorKind::Overloaded | ErrorKind::Unavailable => FailureReason::Rejected,
            ErrorKind::GatewayTimeout => FailureReason::Canceled,
            ErrorKind::Internal | ErrorKind::ModelFailed | ErrorKind::BadGateway => {
                FailureReason::Backend
            }
            _ => FailureReason::Other,
        }
    }

    /// Its name as Triton's metric label.
    pub fn label(self) -> &'static str {
        match self {
            FailureReason::Rejected => "REJECTED",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
        }
    }
}

/// A count and the nanoseconds it took in all.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Tally {
    fn add(&self, took: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(nanos(took), Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The latency histograms of a model's successful requests.
pub struct Latencies {
    /// From the request's first byte to its answer.
    pub request: Histogram,
    /// Waiting for a compute slot (or a batch).
    pub queue: Histogram,
    /// The model.
    pub compute_infer: Histogram,
    /// A streaming (decoupled) model's first response, from the
    /// request's first byte: an LLM's time to first token.
    pub first_response: Histogram,
    /// Between a streaming model's responses: an LLM's inter-token
    /// latency.
    pub between_responses: Histogram,
}

/// One model's counters.
#[derive(Default)]
pub struct ModelStats {
    success: Tally,
    /// By [`FailureReason`].
    fail: [Tally; 4],
    /// When metrics are on.
    latencies: Option<Latencies>,
    /// Stage times of successful requests (their count is `success`'s).
    queue_ns: AtomicU64,
    input_ns: AtomicU64,
    infer_ns: AtomicU64,
    output_ns: AtomicU64,
    /// Milliseconds since the epoch of the last success.
    last_inference: AtomicU64,
    /// Triton's `inference_count`: the successes' rows, for a model with
    /// Triton's batch dimension (a request of 8 rows is 8 inferences).
    inferences: AtomicU64,
    /// Requests the response cache answered, and the time looking.
    cache_hit: Tally,
    /// Requests it did not, and the time looking and keeping the answer.
    cache_miss: Tally,
}

impl ModelStats {
    /// Counters, with latency histograms on `buckets` if given.
    pub fn new(buckets: Option<&Arc<Buckets>>) -> ModelStats {
        ModelStats {
            latencies: buckets.map(|b| Latencies {
                request: Histogram::new(Arc::clone(b)),
                queue: Histogram::new(Arc::clone(b)),
                compute_infer: Histogram::new(Arc::clone(b)),
                first_response: Histogram::new(Arc::clone(b)),
                between_responses: Histogram::new(Arc::clone(b)),
            }),
            ..ModelStats::default()
        }
    }

    /// Counts a request answered with success, with its stage times.
    pub fn success(&self, stages: &Stages) {
        let took = stages.elapsed();
        if let Some(latencies) = &self.latencies {
            latencies.request.observe(took);
            latencies.queue.observe(stages.queue);
            latencies.compute_infer.observe(stages.compute);
        }
        self.queue_ns
            .fetch_add(nanos(stages.queue), Ordering::Relaxed);
        self.input_ns
            .fetch_add(nanos(stages.decode), Ordering::Relaxed);
        self.infer_ns
            .fetch_add(nanos(stages.compute), Ordering::Relaxed);
        self.output_ns
            .fetch_add(nanos(stages.encode), Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.last_inference.fetch_max(now, Ordering::Relaxed);
        self.inferences
            .fetch_add(stages.inferences, Ordering::Relaxed);
        // Last, so a reader that sees the count sees the times it covers
        // (give or take requests ending while it reads).
        self.success.add(took);
    }

    /// Counts a request that reached the model and failed after `took`,
    /// for `reason`.
    pub fn failure(&self, took: Duration, reason: FailureReason) {
        self.fail[reason as usize].add(took);
    }

    /// Counts a request the response cache answered, after `took` looking.
    pub fn cache_hit(&self, took: Duration) {
        self.cache_hit.add(took);
    }

    /// Counts a request the response cache did not answer, after `took`
    /// looking and keeping the model's answer.
    pub fn cache_miss(&self, took: Duration) {
        self.cache_miss.add(took);
    }

    /// Counts a streaming model's response that came `after` the request
    /// began (its first) or the response before it.
    pub fn streamed(&self, first: bool, after: Duration) {
        if let Some(latencies) = &self.latencies {
            if first {
                latencies.first_response.observe(after);
            } else {
                latencies.between_responses.observe(after);
            }
        }
    }

    /// The latency histograms, when metrics are on.
    pub fn latencies(&self) -> Option<&Latencies> {
        self.latencies.as_ref()
    }

    /// The failures for `reason`.
    pub fn failures(&self, reason: FailureReason) -> u64 {
        self.fail[reason as usize].count.load(Ordering::Relaxed)
    }

    /// The counters in Triton's message, for model `name` version
    /// `version`.
    pub(crate) fn snapshot(&self, name: &str, version: &str) -> pb::ModelStatistics {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let success = load(&self.success.count);
        // As Triton counts them: an answer from the cache is a success,
        // not an execution, and has no compute times.
        let hits = load(&self.cache_hit.count);
        let executed = success.saturating_sub(hits);
        let duration = |count: u64, ns: &AtomicU64| {
            Some(pb::StatisticDuration {
                count,
                ns: load(ns),
            })
        };
        let batch = pb::InferBatchStatistics {
            batch_size: 1,
            compute_input: duration(executed, &self.input_ns),
            compute_infer: duration(executed, &self.infer_ns),
            compute_output: duration(executed, &self.output_ns),
        };
        pb::ModelStatistics {
            name: name.to_owned(),
            version: version.to_owned(),
            last_inference: load(&self.last_inference),
            inference_count: load(&self.inferences),
            execution_count: executed,
            inference_stats: Some(pb::InferStatistics {
                success: duration(success, &self.success.ns),
                fail: Some(pb::StatisticDuration {
                    count: self.fail.iter().map(|t| load(&t.count)).sum(),
                    ns: self.fail.iter().map(|t| load(&t.ns)).sum(),
                }),
                queue: duration(success, &self.queue_ns),
                compute_input: duration(executed, &self.input_ns),
                compute_infer: duration(executed, &self.infer_ns),
                compute_output: duration(executed, &self.output_ns),
                cache_hit: duration(hits, &self.cache_hit.ns),
                cache_miss: duration(load(&self.cache_miss.count), &self.cache_miss.ns),
            }),
            batch_stats: if executed > 0 {
                vec![batch]
            } else {
                Vec::new()
            },
            memory_usage: Vec::new(),
            response_stats: Default::default(),
        }
    }
}

/// One model's statistics: Triton's message, and wirespeed's own counts.
pub struct Snapshot {
    /// Triton's statistics message for the model.
    pub triton: pb::ModelStatistics,
    pub(crate) defaults: u64,
    pub(crate) timeouts: u64,
    /// The batch size now, when the model batches.
    pub batch_size: Option<usize>,
}

/// The REST answer for `stats`: Triton's JSON, the message's fields by
/// their proto names, and wirespeed's own counts.
pub fn to_json(stats: &[Snapshot]) -> Value {
    let d = |d: &Option<pb::StatisticDuration>| {
        let d = d.unwrap_or_default();
        json!({ "count": d.count, "ns": d.ns })
    };
    let models: Vec<Value> = stats
        .iter()
        .map(|snapshot| {
            let m = &snapshot.triton;
            let s = m.inference_stats.unwrap_or_default();
            json!({
                "name": m.name,
                "version": m.version,
                "last_inference": m.last_inference,
                "inference_count": m.inference_count,
                "execution_count": m.execution_count,
                "inference_stats": {
                    "success": d(&s.success),
                    "fail": d(&s.fail),
                    "queue": d(&s.queue),
                    "compute_input": d(&s.compute_input),
                    "compute_infer": d(&s.compute_infer),
                    "compute_output": d(&s.compute_output),
                    "cache_hit": d(&s.cache_hit),
                    "cache_miss": d(&s.cache_miss),
                },
                "response_stats": {},
                "batch_stats": m.batch_stats.iter().map(|b| json!({
                    "batch_size": b.batch_size,
                    "compute_input": d(&b.compute_input),
                    "compute_infer": d(&b.compute_infer),
                    "compute_output": d(&b.compute_output),
                })).collect::<Vec<_>>(),
                "memory_usage": [],
                "wirespeed": {
                    "default_outputs": snapshot.defaults,
                    "queue_timeouts": snapshot.timeouts,
                    "batch_size": snapshot.batch_size,
                },
            })
        })
        .collect();
    json!({ "model_stats": models })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_and_failures_are_counted_apart() {
        let stats = ModelStats::default();
        let mut stages = Stages::start();
        stages.queue = Duration::from_nanos(5);
        stages.decode = Duration::from_nanos(7);
        stages.compute = Duration::from_nanos(11);
        stages.encode = Duration::from_nanos(13);
        stats.success(&stages);
        stats.success(&stages);
        stats.failure(Duration::from_nanos(60), FailureReason::Rejected);
        stats.failure(Duration::from_nanos(40), FailureReason::Other);
        let s = stats.snapshot("m", "1");
        assert_eq!((s.inference_count, s.execution_count), (2, 2));
        let i = s.inference_stats.unwrap();
        assert_eq!(i.success.unwrap().count, 2);
        assert_eq!(i.fail.unwrap(), pb::StatisticDuration { count: 2, ns: 100 });
        assert_eq!(stats.failures(FailureReason::Rejected), 1);
        assert_eq!(i.queue.unwrap(), pb::StatisticDuration { count: 2, ns: 10 });
        assert_eq!(i.compute_infer.unwrap().ns, 22);
        assert_eq!(s.batch_stats[0].batch_size, 1);
        assert!(s.last_inference > 0);
        let j = to_json(&[Snapshot {
            triton: stats.snapshot("m", "1"),
            defaults: 3,
            timeouts: 0,
            batch_size: None,
        }]);
        assert_eq!(j["model_stats"][0]["wirespeed"]["default_outputs"], 3);
        assert_eq!(
            j["model_stats"][0]["inference_stats"]["compute_output"]["ns"],
            26
        );
    }
}
