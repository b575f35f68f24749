//! Latency histograms: Prometheus's cumulative buckets, counted per thread.
//!
//! Triton exports its latencies as counters of total microseconds (and as
//! summaries, on request), so a p99 cannot be aggregated across replicas,
//! and its summaries cost throughput. These are histograms: an observation
//! is two relaxed additions on its thread's shard (`shards.rs`), the bucket
//! found by a binary search of the bounds in nanoseconds. The crate's own
//! `prometheus::Histogram` makes every thread add to the same lines, with a
//! compare-and-swap loop for the sum.
//!
//! The count is the sum of the buckets (and the overflow), so a scrape
//! always has `_count` equal to the `+Inf` bucket, as Prometheus requires.

use std::sync::Arc;
use std::time::Duration;

use super::shards::Shards;

/// The most bucket bounds a histogram may have.
pub(crate) const MAX_BUCKETS: usize = 30;

/// Per shard: a counter per bucket, the overflow past the last bound, the
/// sum in nanoseconds.
const SLOTS: usize = MAX_BUCKETS + 2;
const SUM: usize = MAX_BUCKETS + 1;

/// The bucket bounds every latency histogram uses, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    seconds: Vec<f64>,
    nanos: Vec<u64>,
}

/// From 100 µs, where a Titanic row answers, to 10 s, past an upstream's
/// slowest: about three buckets a decade.
pub const DEFAULT_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets::new(&DEFAULT_BUCKETS).expect("the default buckets are valid")
    }
}

impl Buckets {
    /// Bounds in seconds: 1 to 30 of them, positive, finite, each larger
    /// than the one before, and at least a nanosecond apart.
    pub fn new(seconds: &[f64]) -> Result<Buckets, String> {
        if seconds.is_empty() || seconds.len() > MAX_BUCKETS {
            return Err(format!(
                "give 1 to {MAX_BUCKETS} bucket bounds, in seconds; there are {}",
                seconds.len()
            ));
        }
        let mut nanos = Vec::with_capacity(seconds.len());
        for &s in seconds {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "bucket bound {s} is not a positive number of seconds"
                ));
            }
            let ns = (s * 1e9).round() as u64;
            if nanos.last().is_some_and(|&last| ns <= last) {
                return Err(format!(
                    "bucket bound {s} is not larger than the one before it: give them in increasing order"
                ));
            }
            nanos.push(ns.max(1));
        }
        Ok(Buckets {
            seconds: seconds.to_vec(),
            nanos,
        })
    }

    /// The bounds, in seconds.
    pub fn seconds(&self) -> &[f64] {
        &self.seconds
    }
}

/// One latency histogram.
pub struct Histogram {
    buckets: Arc<Buckets>,
    shards: Shards<SLOTS>,
}

/// A histogram as a scrape reads it.
pub struct Snapshot {
    /// Per bound: the observations at or under it.
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    /// An empty histogram over `buckets`.
    pub fn new(buckets: Arc<Buckets>) -> Histogram {
        Histogram {
            buckets,
            shards: Shards::default(),
        }
    }

    #[inline]
    /// Counts one observation of `took`.
    pub fn observe(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // The first bound at or over `ns`; past the last, the overflow.
        let bucket = self.buckets.nanos.partition_point(|&bound| bound < ns);
        let slot = if bucket < self.buckets.nanos.len() {
            bucket
        } else {
            MAX_BUCKETS
        };
        self.shards.add(slot, 1);
        self.shards.add(SUM, ns);
    }

    /// The counts so far, cumulative per bucket as Prometheus reads them.
    pub fn snapshot(&self) -> Snapshot {
        let mut running = 0;
        let cumulative = self
            .buckets
            .seconds
            .iter()
            .enumerate()
            .map(|(i, &bound)| {
                running += self.shards.get(i);
                (bound, running)
            })
            .collect();
        Snapshot {
            cumulative,
            count: running + self.shards.get(MAX_BUCKETS),
            sum_seconds: self.shards.get(SUM) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_in_the_first_bucket_at_or_over_them() {
        let h = Histogram::new(Arc::new(Buckets::new(&[0.001, 0.01]).unwrap()));
        for us in [1, 1000, 1001, 10_000, 10_001, 5_000_000] {
            h.observe(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.cumulative, [(0.001, 2), (0.01, 4)]);
        assert_eq!(s.count, 6);
        assert!((s.sum_seconds - 5.022003).abs() < 1e-9, "{}", s.sum_seconds);
    }

    #[test]
    fn bounds_must_increase() {
        assert!(Buckets::new(&[]).is_err());
        assert!(Buckets::new(&[0.1, 0.1])
            .unwrap_err()
            .contains("increasing"));
        assert!(Buckets::new(&[-1.0]).unwrap_err().contains("positive"));
        assert!(Buckets::new(&[f64::NAN]).is_err());
        assert!(Buckets::new(&[1.0; 31]).unwrap_err().contains("1 to 30"));
        assert_eq!(Buckets::default().seconds().len(), 16);
    }
}
