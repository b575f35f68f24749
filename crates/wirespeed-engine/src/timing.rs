//! Where a request's time went, stage by stage, told to the client in a
//! `Server-Timing` response header (REST) or `server-timing` response
//! metadata (gRPC), in the W3C Server Timing syntax:
//!
//! ```text
//! server-timing: read;dur=0.412, decode;dur=0.301, queue;dur=0.001, compute;dur=0.004, encode;dur=0.010, total;dur=0.430
//! ```
//!
//! Durations are in milliseconds. `read` is the wall time from the handler's
//! start until the body was read and decoded (it overlaps the network and
//! the decode); `decode` is the time spent in the decoder (JSON parsing, or
//! copying raw tensor bytes) alone; `queue` is the wait at the model's gate;
//! `compute` the model; `encode` the answer's body. `total` is the handler's
//! time, all but writing the answer to the socket. For a model that
//! batches, `batch;desc=N` says how many rows the batch it ran in had. `wirespeed bench` reads
//! these to split a latency into server stages.

use std::time::{Duration, Instant};

use wirespeed_core::{CpuPool, Error};

/// The header's name.
pub const SERVER_TIMING: &str = "server-timing";

/// One request's stage times.
pub struct Stages {
    start: Instant,
    /// Reading the body, decoding as it arrives.
    pub read: Duration,
    /// The time inside the decoder, part of `read`.
    pub decode: Duration,
    /// Waiting in the model's queue.
    pub queue: Duration,
    /// Running the model.
    pub compute: Duration,
    /// Writing the answer.
    pub encode: Duration,
    /// The rows of the batch the request ran in; 0 when the model does not
    /// batch.
    pub batch: usize,
    /// The bytes of the body (decompressed) or message that were decoded.
    pub body_bytes: u64,
    /// Triton's inferences in the request: its rows when the model has
    /// Triton's batch dimension (`max_batch_size`), else 1.
    pub inferences: u64,
}

impl Stages {
    /// Starts the clock of a request.
    pub fn start() -> Stages {
        Stages {
            start: Instant::now(),
            read: Duration::ZERO,
            decode: Duration::ZERO,
            queue: Duration::ZERO,
            compute: Duration::ZERO,
            encode: Duration::ZERO,
            batch: 0,
            body_bytes: 0,
            inferences: 1,
        }
    }

    /// Records the wait, the compute and the batch size of the request's
    /// turn in its model's scheduler.
    pub fn scheduled(&mut self, spent: wirespeed_scheduler::Spent) {
        self.queue = spent.queue;
        self.compute = spent.compute;
        self.batch = spent.batch;
    }

    /// Marks the end of reading the body of `bytes`, which took `decode`
    /// in the decoder: `read` is the time since the start.
    pub fn body_read(&mut self, decode: Duration, bytes: u64) {
        self.read = self.start.elapsed();
        self.decode = decode;
        self.body_bytes = bytes;
    }

    /// When the request's clock started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// The time since the request's clock started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The header's text, with `total` the time since the start. Every
    /// answer carries it, so it is written with integer formatting (whole
    /// microseconds as milliseconds with three decimals), not float
    /// formatting.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(112);
        let mut digits = itoa::Buffer::new();
        let stages = [
            ("read", self.read),
            ("decode", self.decode),
            ("queue", self.queue),
            ("compute", self.compute),
            ("encode", self.encode),
            ("total", self.start.elapsed()),
        ];
        for (i, (name, duration)) in stages.into_iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            let micros = duration.as_micros();
            text.push_str(name);
            text.push_str(";dur=");
            text.push_str(digits.format(micros / 1000));
            let fraction = digits.format(1000 + micros % 1000);
            text.push('.');
            text.push_str(&fraction[1..]);
        }
        if self.batch > 0 {
            text.push_str(", batch;desc=");
            text.push_str(digits.format(self.batch));
        }
        text
    }
}

/// Runs `f` and adds the time it took to `total`.
pub fn timed<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let value = f();
    *total += start.elapsed();
    value
}

/// Runs `work`, on the CPU pool when `offload` (work that would hold an
/// async worker too long), and adds the time it took to `spent`.
pub async fn timed_on<T: Send + 'static>(
    pool: &CpuPool,
    offload: bool,
    spent: &mut Duration,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    if !offload {
        return timed(spent, work);
    }
    let (done, result) = tokio::sync::oneshot::channel();
    pool.spawn(move || {
        let started = Instant::now();
        let value = work();
        let _ = done.send((value, started.elapsed()));
    });
    let (value, took) = result
        .await
        .map_err(|_| Error::internal("a job on the CPU pool ended without its result"))?;
    *spent += took;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_every_stage_in_milliseconds() {
        let mut stages = Stages::start();
        stages.decode = Duration::from_micros(1500);
        stages.compute = Duration::from_nanos(2_000_400);
        stages.queue = Duration::from_micros(7);
        stages.encode = Duration::from_micros(12_345_678);
        let text = stages.text();
        let parts: Vec<&str> = text.split(", ").collect();
        let names: Vec<&str> = parts.iter().map(|p| p.split(';').next().unwrap()).collect();
        assert_eq!(
            names,
            ["read", "decode", "queue", "compute", "encode", "total"]
        );
        assert!(parts.contains(&"decode;dur=1.500"), "{text}");
        assert!(parts.contains(&"compute;dur=2.000"), "{text}");
        assert!(parts.contains(&"queue;dur=0.007"), "{text}");
        assert!(parts.contains(&"encode;dur=12345.678"), "{text}");
        assert!(parts.contains(&"read;dur=0.000"), "{text}");
        // `total` runs from the start to the writing of the header: past
        // every stage this test set, as `wirespeed bench` relies on.
        std::thread::sleep(Duration::from_millis(2));
        let total: f64 = stages.text().split(", ").nth(5).unwrap()["total;dur=".len()..]
            .parse()
            .unwrap();
        assert!(total >= 2.0, "{text}");
    }

    #[test]
    fn timed_adds_up() {
        let mut total = Duration::from_millis(1);
        let v = timed(&mut total, || {
            std::thread::sleep(Duration::from_millis(2));
            7
        });
        assert_eq!(v, 7);
        assert!(total >= Duration::from_millis(3));
    }
}
