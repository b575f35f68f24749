//! Send times for the open loop: when each request is due, and a timer
//! precise enough to send it then.
//!
//! tokio's timer wheel ticks once a millisecond, so `tokio::time::sleep`
//! wakes up to a millisecond late. At 5,000 requests a second, or against a
//! server that answers in 40 µs, that lateness would be most of what the
//! tool measures. [`PreciseTimer`] is one thread that sleeps on the
//! operating system's high-resolution timer (a futex wait: ~50–100 µs of
//! slack on Linux) and wakes the tasks whose time has come. Longer waits
//! first sleep on tokio's timer, so the thread only handles the last
//! stretch. No crate does this for tokio tasks; it is hand-written here.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use tokio::sync::oneshot;

/// How requests arrive in the open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Evenly spaced, as wrk2 sends.
    Constant,
    /// A Poisson process: exponential gaps with the same mean, as
    /// independent users send.
    Poisson,
}

/// The intended send times of one connection's requests, as offsets from
/// the start of the run.
pub struct Schedule {
    kind: ScheduleKind,
    next: Duration,
}

enum ScheduleKind {
    Constant(Duration),
    Poisson { gaps: Exp<f64>, rng: Box<StdRng> },
}

impl Schedule {
    /// Connection `index` of `connections` sharing a total `rate` (requests
    /// per second). Constant schedules are staggered, so the connections'
    /// requests interleave evenly rather than arriving in bursts of
    /// `connections`; Poisson schedules are seeded by `seed` and `index`,
    /// so a run can be repeated.
    pub fn new(arrival: Arrival, rate: f64, connections: usize, index: usize, seed: u64) -> Self {
        let per_connection = rate / connections as f64;
        let kind = match arrival {
            Arrival::Constant => {
                ScheduleKind::Constant(Duration::from_secs_f64(1.0 / per_connection))
            }
            Arrival::Poisson => ScheduleKind::Poisson {
                gaps: Exp::new(per_connection).expect("a positive rate"),
                rng: Box::new(StdRng::seed_from_u64(
                    seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                )),
            },
        };
        let next = match &kind {
            ScheduleKind::Constant(gap) => gap.mul_f64(index as f64 / connections as f64),
            ScheduleKind::Poisson { .. } => Duration::ZERO,
        };
        let mut schedule = Schedule { kind, next };
        if let ScheduleKind::Poisson { .. } = schedule.kind {
            schedule.next = schedule.gap();
        }
        schedule
    }

    fn gap(&mut self) -> Duration {
        match &mut self.kind {
            ScheduleKind::Constant(gap) => *gap,
            ScheduleKind::Poisson { gaps, rng } => Duration::from_secs_f64(gaps.sample(rng)),
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    /// The next request's offset from the start: never earlier than the
    /// previous one, and independent of when requests were really sent.
    fn next(&mut self) -> Option<Duration> {
        let due = self.next;
        let gap = self.gap();
        self.next += gap;
        Some(due)
    }
}

struct Entry {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Shared {
    due: Mutex<(BinaryHeap<Reverse<Entry>>, u64)>,
    stop: AtomicBool,
}

/// A timer thread that wakes tasks within the OS timer's slack; see the
/// module documentation. Dropping it stops the thread.
pub struct PreciseTimer {
    shared: Arc<Shared>,
    thread: Thread,
}

/// Below this, waits go to the timer thread alone; above, tokio's timer
/// takes the first part.
const COARSE: Duration = Duration::from_millis(3);

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn start() -> Arc<PreciseTimer> {
        let shared = Arc::new(Shared {
            due: Mutex::new((BinaryHeap::new(), 0)),
            stop: AtomicBool::new(false),
        });
        let worker = Arc::clone(&shared);
        let handle = thread::Builder::new()
            .name("bench-timer".into())
            .spawn(move || run(&worker))
            .expect("the timer thread starts");
        Arc::new(PreciseTimer {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Returns at `at`, give or take the OS timer's slack; at once if
    /// `at` has passed.
    pub async fn sleep_until(&self, at: Instant) {
        let now = Instant::now();
        if at <= now {
            return;
        }
        if at - now > COARSE {
            tokio::time::sleep_until((at - COARSE / 2).into()).await;
        }
        let (wake, woken) = oneshot::channel();
        let earliest = {
            let mut due = self.shared.due.lock().expect("the timer lock");
            let seq = due.1;
            due.1 += 1;
            due.0.push(Reverse(Entry { at, seq, wake }));
            due.0.peek().is_some_and(|e| e.0.seq == seq)
        };
        if earliest {
            self.thread.unpark();
        }
        let _ = woken.await;
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

fn run(shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        let wait = {
            let mut due = shared.due.lock().expect("the timer lock");
            let now = Instant::now();
            while due.0.peek().is_some_and(|e| e.0.at <= now) {
                let Reverse(entry) = due.0.pop().expect("peeked");
                let _ = entry.wake.send(());
            }
            due.0.peek().map(|e| e.0.at - now)
        };
        match wait {
            Some(wait) => thread::park_timeout(wait),
            None => thread::park_timeout(Duration::from_millis(100)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_schedules_are_even_and_staggered() {
        // 1,000 requests a second over 4 connections: each sends every 4 ms,
        // the connections 1 ms apart.
        let firsts: Vec<Vec<Duration>> = (0..4)
            .map(|i| {
                Schedule::new(Arrival::Constant, 1000.0, 4, i, 0)
                    .take(3)
                    .collect()
            })
            .collect();
        for (i, times) in firsts.iter().enumerate() {
            let ms = |k: u64| Duration::from_millis(k);
            assert_eq!(times, &[ms(i as u64), ms(i as u64 + 4), ms(i as u64 + 8)]);
        }
    }

    #[test]
    fn poisson_schedules_have_the_rate_and_exponential_gaps() {
        // 200 requests a second on one connection: over 20,000 requests the
        // mean gap is 5 ms within 3 %, and the gaps' spread is that of an
        // exponential (standard deviation = mean), not a constant's (0).
        let times: Vec<f64> = Schedule::new(Arrival::Poisson, 200.0, 1, 0, 7)
            .take(20_000)
            .map(|d| d.as_secs_f64())
            .collect();
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g >= 0.0));
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean - 0.005).abs() < 0.005 * 0.03, "mean gap {mean}");
        assert!((sd / mean - 1.0).abs() < 0.05, "sd/mean {}", sd / mean);
        // The same seed gives the same schedule; another connection, another.
        let again: Vec<Duration> = Schedule::new(Arrival::Poisson, 200.0, 1, 0, 7)
            .take(5)
            .collect();
        let other: Vec<Duration> = Schedule::new(Arrival::Poisson, 200.0, 2, 1, 7)
            .take(5)
            .collect();
        assert_eq!(
            again,
            times[..5]
                .iter()
                .map(|&s| Duration::from_secs_f64(s))
                .collect::<Vec<_>>()
        );
        assert_ne!(again, other);
    }

    #[test]
    fn the_schedule_does_not_move_when_sends_are_late() {
        // Intended times are a property of the schedule alone: reading them
        // late (a stalled server) yields the same times.
        let mut schedule = Schedule::new(Arrival::Constant, 100.0, 1, 0, 0);
        let first = schedule.next().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let second = schedule.next().unwrap();
        assert_eq!(second - first, Duration::from_millis(10));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_precise_timer_wakes_on_time_and_in_order() {
        let timer = PreciseTimer::start();
        let start = Instant::now();
        let mut lateness = Vec::new();
        for k in 1..=50u32 {
            let at = start + Duration::from_micros(400) * k;
            timer.sleep_until(at).await;
            let now = Instant::now();
            assert!(now >= at, "woke early");
            lateness.push(now - at);
        }
        lateness.sort();
        // A wake-up must come from the deadline, not from the thread's
        // 100 ms idle poll (a bound generous for a loaded CI machine).
        assert!(
            lateness[25] < Duration::from_millis(20),
            "median lateness {:?}",
            lateness[25]
        );
        // A time in the past returns at once.
        timer.sleep_until(start).await;
    }
}
