//! What a run records and what it reports: HDR histograms of latency,
//! corrected and not, of the client's send / wait / receive split and of
//! the server's stages, plus errors by kind.
//!
//! Values are recorded in nanoseconds, at three significant digits; the
//! histograms grow as values arrive, so a 40 µs run and a 40 s stall cost
//! what they need.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The server stages of a `Server-Timing` header, in order.
pub const STAGES: [&str; 6] = ["read", "decode", "queue", "compute", "encode", "total"];

/// The client's time split of one exchange, where the protocol shows it.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// From the first byte of the request written to the last.
    pub send: Duration,
    /// From the last byte sent to the first byte of the response.
    pub wait: Duration,
    /// From the first byte of the response to the last.
    pub receive: Duration,
}

/// What a server's `Server-Timing` says of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerTiming {
    /// The stages' durations (see [`STAGES`]); zero when not sent.
    pub stages: [Duration; 6],
    /// The rows of the batch the request ran in (`batch;desc=N`), from a
    /// model that batches.
    pub batch: Option<u64>,
}

/// One answered request.
#[derive(Debug, Clone)]
pub struct Sample {
    /// From the request's intended send time to its answer.
    pub latency: Duration,
    /// From its actual send time to its answer.
    pub service: Duration,
    /// The split of `service`, on HTTP/1.
    pub phases: Option<Phases>,
    /// The server's stage times and batch, when it sent them.
    pub server: Option<ServerTiming>,
    /// Request bytes written.
    pub bytes_out: u64,
    /// Response bytes read.
    pub bytes_in: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is valid")
}

/// Histograms and counts of a set of requests. Recorders of different
/// threads, windows or rounds are [`merge`](Recorder::merge)d.
#[derive(Clone)]
pub struct Recorder {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    phases: [Histogram<u64>; 3],
    server: Vec<Histogram<u64>>,
    /// Batch sizes, in rows.
    batch: Histogram<u64>,
    errors: BTreeMap<String, u64>,
    bytes_out: u64,
    bytes_in: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            latency: histogram(),
            service: histogram(),
            phases: [histogram(), histogram(), histogram()],
            server: STAGES.iter().map(|_| histogram()).collect(),
            batch: histogram(),
            errors: BTreeMap::new(),
            bytes_out: 0,
            bytes_in: 0,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

impl Recorder {
    /// Records an answered request.
    pub fn record(&mut self, sample: &Sample) {
        self.latency
            .record(nanos(sample.latency))
            .expect("auto-resizing histograms take any u64");
        self.service
            .record(nanos(sample.service))
            .expect("auto-resizing histograms take any u64");
        if let Some(p) = sample.phases {
            for (h, d) in self.phases.iter_mut().zip([p.send, p.wait, p.receive]) {
                h.record(nanos(d))
                    .expect("auto-resizing histograms take any u64");
            }
        }
        if let Some(timing) = sample.server {
            if timing.stages.iter().any(|d| !d.is_zero()) {
                for (h, d) in self.server.iter_mut().zip(timing.stages) {
                    h.record(nanos(d))
                        .expect("auto-resizing histograms take any u64");
                }
            }
            if let Some(rows) = timing.batch {
                self.batch
                    .record(rows.max(1))
                    .expect("auto-resizing histograms take any u64");
            }
        }
        self.bytes_out += sample.bytes_out;
        self.bytes_in += sample.bytes_in;
    }

    /// Counts a failed request under `kind` (a short, stable description:
    /// `status 503`, `connect: connection refused`, `timeout`).
    pub fn error(&mut self, kind: impl Into<String>) {
        *self.errors.entry(kind.into()).or_default() += 1;
    }

    /// Adds `other`'s requests to these.
    pub fn merge(&mut self, other: &Recorder) {
        let add = |a: &mut Histogram<u64>, b: &Histogram<u64>| {
            a.add(b).expect("auto-resizing histograms always add")
        };
        add(&mut self.latency, &other.latency);
        add(&mut self.service, &other.service);
        for (a, b) in self.phases.iter_mut().zip(&other.phases) {
            add(a, b);
        }
        for (a, b) in self.server.iter_mut().zip(&other.server) {
            add(a, b);
        }
        add(&mut self.batch, &other.batch);
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += n;
        }
        self.bytes_out += other.bytes_out;
        self.bytes_in += other.bytes_in;
    }

    /// Answered requests.
    pub fn answered(&self) -> u64 {
        self.latency.len()
    }

    /// Failed requests.
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The corrected latency histogram, in nanoseconds.
    pub fn latency(&self) -> &Histogram<u64> {
        &self.latency
    }

    /// The figures of these requests, measured over `elapsed`.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let dist = |h: &Histogram<u64>| (!h.is_empty()).then(|| Dist::of(h));
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Summary {
            requests: self.answered() + self.failed(),
            answered: self.answered(),
            failed: self.failed(),
            errors: self.errors.clone(),
            seconds: elapsed.as_secs_f64(),
            throughput: self.answered() as f64 / seconds,
            latency: dist(&self.latency).unwrap_or_default(),
            uncorrected: dist(&self.service).unwrap_or_default(),
            send: dist(&self.phases[0]),
            wait: dist(&self.phases[1]),
            receive: dist(&self.phases[2]),
            server: STAGES
                .iter()
                .zip(&self.server)
                .filter_map(|(name, h)| Some(((*name).to_owned(), dist(h)?)))
                .collect(),
            batch: (!self.batch.is_empty()).then(|| BatchSizes {
                count: self.batch.len(),
                mean: self.batch.mean(),
                p50: self.batch.value_at_quantile(0.5),
                p99: self.batch.value_at_quantile(0.99),
                max: self.batch.max(),
            }),
            mb_out_per_s: self.bytes_out as f64 / seconds / 1e6,
            mb_in_per_s: self.bytes_in as f64 / seconds / 1e6,
        }
    }
}

/// The sizes of the batches requests ran in, in rows, one count per
/// request (a batch of 8 is counted by each of its 8 requests).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct BatchSizes {
    /// Requests that said.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// A latency distribution, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Dist {
    /// Requests counted.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// 99.99th percentile.
    pub p99_99: f64,
    /// Largest.
    pub max: f64,
}

impl Dist {
    /// The distribution of a histogram of nanoseconds.
    pub fn of(h: &Histogram<u64>) -> Dist {
        let ms = |ns: u64| ns as f64 / 1e6;
        let q = |q: f64| ms(h.value_at_quantile(q));
        Dist {
            count: h.len(),
            mean: h.mean() / 1e6,
            stdev: h.stdev() / 1e6,
            min: ms(h.min()),
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p99_9: q(0.999),
            p99_99: q(0.9999),
            max: ms(h.max()),
        }
    }
}

/// The figures of one measurement.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Summary {
    /// Requests finished, answered or failed.
    pub requests: u64,
    /// Requests answered with success.
    pub answered: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Measured time.
    pub seconds: f64,
    /// Answered requests per second.
    pub throughput: f64,
    /// Latency from each request's intended send time (corrected for
    /// coordinated omission); in a closed loop, the same as `uncorrected`.
    pub latency: Dist,
    /// Latency from each request's actual send time, as tools that ignore
    /// coordinated omission report it.
    pub uncorrected: Dist,
    /// Writing the request (HTTP/1 only).
    pub send: Option<Dist>,
    /// From the last request byte to the first response byte (HTTP/1 only).
    pub wait: Option<Dist>,
    /// Reading the response (HTTP/1 only).
    pub receive: Option<Dist>,
    /// The server's stages, from its `Server-Timing`.
    pub server: BTreeMap<String, Dist>,
    /// The batches requests ran in, from `Server-Timing`'s `batch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchSizes>,
    /// Request megabytes per second.
    pub mb_out_per_s: f64,
    /// Response megabytes per second.
    pub mb_in_per_s: f64,
}

/// The relative spread of `values`: (max − min) / median.
pub fn spread(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    if median <= 0.0 {
        return 0.0;
    }
    (sorted[sorted.len() - 1] - sorted[0]) / median
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(us: u64) -> Sample {
        Sample {
            latency: Duration::from_micros(us),
            service: Duration::from_micros(us),
            phases: None,
            server: None,
            bytes_out: 10,
            bytes_in: 20,
        }
    }

    #[test]
    fn merging_recorders_of_threads_equals_recording_in_one() {
        // Eight threads record disjoint parts of the same values; the merge
        // must equal one recorder that saw them all, percentile for percentile.
        let values: Vec<u64> = (1..=80_000u64).map(|i| (i * 7919) % 100_000 + 1).collect();
        let mut alone = Recorder::default();
        for &v in &values {
            alone.record(&sample(v));
        }
        let parts: Vec<Recorder> = std::thread::scope(|s| {
            let handles: Vec<_> = values
                .chunks(10_000)
                .map(|chunk| {
                    s.spawn(move || {
                        let mut r = Recorder::default();
                        for &v in chunk {
                            r.record(&sample(v));
                        }
                        r.error("status 503");
                        r
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut merged = Recorder::default();
        for part in &parts {
            merged.merge(part);
        }
        let (a, m) = (
            alone.summary(Duration::from_secs(1)),
            merged.summary(Duration::from_secs(1)),
        );
        assert_eq!(m.answered, 80_000);
        assert_eq!(m.latency, a.latency);
        assert_eq!(m.errors["status 503"], 8);
        assert_eq!(m.failed, 8);
        assert_eq!(m.requests, 80_008);
        assert!((m.mb_out_per_s - 0.8).abs() < 1e-9);
        // And the percentiles are those of the values, to 3 significant digits.
        let mut sorted = values.clone();
        sorted.sort();
        let exact_p99 = sorted[(0.99 * sorted.len() as f64) as usize - 1] as f64 / 1e3;
        assert!(
            (m.latency.p99 - exact_p99).abs() / exact_p99 < 2e-3,
            "{} vs {exact_p99}",
            m.latency.p99
        );
        assert!(
            m.latency.min <= m.latency.p50
                && m.latency.p50 <= m.latency.p99
                && m.latency.p99 <= m.latency.max
        );
    }

    #[test]
    fn spread_is_relative_to_the_median() {
        assert_eq!(spread(&[10.0, 11.0, 9.0]), 0.2);
        assert_eq!(spread(&[]), 0.0);
        assert_eq!(spread(&[5.0]), 0.0);
    }
}
