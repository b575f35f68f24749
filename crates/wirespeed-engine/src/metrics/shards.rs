//! Counters that many threads add to at once without sharing a cache line.
//!
//! Each thread adds to one of a few shards, chosen once per thread; every
//! shard is a cache line (or several) of its own, so the I/O threads do not
//! take turns owning the line, as they would with one atomic per counter.
//! A scrape sums the shards. A count is one relaxed addition on a line the
//! thread almost always has to itself.
//!
//! The lines are allocated at the first addition: a histogram is 2 KiB of
//! them, a model has five, and a repository of 10,000 models, most never
//! asked (or never streaming), took 100 MiB and half a second to zero them
//! at start.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many shards: more than the I/O threads of most machines; past that,
/// threads share a shard, which stays correct.
const SHARDS: usize = 8;

/// The shard of the current thread.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// `N` counters of one shard, alone on their cache lines.
#[repr(align(128))]
struct Shard<const N: usize>([AtomicU64; N]);

/// `N` counters, sharded by thread; no memory until the first addition.
pub(crate) struct Shards<const N: usize> {
    shards: OnceLock<Box<[Shard<N>; SHARDS]>>,
}

impl<const N: usize> Default for Shards<N> {
    fn default() -> Self {
        Shards {
            shards: OnceLock::new(),
        }
    }
}

impl<const N: usize> Shards<N> {
    /// Adds `n` to counter `i`.
    #[inline]
    pub(crate) fn add(&self, i: usize, n: u64) {
        let shards = self.shards.get_or_init(|| {
            Box::new(std::array::from_fn(|_| {
                Shard(std::array::from_fn(|_| AtomicU64::new(0)))
            }))
        });
        shards[shard()].0[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i`, summed over the shards.
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.shards.get().map_or(0, |shards| {
            shards
                .iter()
                .map(|s| s.0[i].load(Ordering::Relaxed))
                .fold(0, u64::wrapping_add)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_what_every_thread_added() {
        let shards = Arc::new(Shards::<3>::default());
        let threads: Vec<_> = (0..12)
            .map(|t| {
                let shards = Arc::clone(&shards);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        shards.add(t % 3, 2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            (0..3).map(|i| shards.get(i)).collect::<Vec<_>>(),
            [8000, 8000, 8000]
        );
    }

    #[test]
    fn untouched_counters_read_zero_and_hold_no_lines() {
        let shards = Shards::<4>::default();
        assert_eq!(shards.get(3), 0);
        assert!(shards.shards.get().is_none());
        shards.add(3, 5);
        assert_eq!(shards.get(3), 5);
    }
}
