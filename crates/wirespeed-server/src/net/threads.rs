//! The I/O threads themselves: started when the server serves, or taken
//! from those a process reserved as its first threads ([`IoThreads`]).
//!
//! Why reserve them: glibc gives a thread its malloc arena at the
//! thread's first allocation, a new one while the process has fewer than
//! its limit, else one that other threads already use. Started after the
//! compute pool, the schedulers' thread and the Python workers' keepers,
//! the two I/O threads of a 2-core server shared one arena in about half
//! the starts, and then waited on its lock for every allocation past their
//! own caches: the Titanic `POST` at `wrk -c32` ran at 56-72 k req/s in
//! those starts against 87-98 k in the others (8 of 16 starts; `perf`:
//! `__lll_lock_wait_private` under `_int_free`, `calloc`). Started first,
//! each takes an arena of its own, and the `wirespeed` binary's limit
//! (`malloc.rs`) leaves room for them and for the rest.

use std::sync::mpsc;
use std::sync::Arc;

use crate::net::connection::Answers;
use crate::net::listen::{IoThread, Place, Sockets, Spread};

/// What a reserved thread is given to run.
type Job = Box<dyn FnOnce() + Send>;

/// Threads started before the rest of the process, each waiting for the
/// I/O work it will do ([`crate::Server::serve`] hands it out). Dropped
/// unused, they end.
pub struct IoThreads {
    waiting: Vec<(mpsc::Sender<Job>, std::thread::JoinHandle<()>)>,
}

impl IoThreads {
    /// Starts `count` threads named as the I/O threads are, and returns
    /// once each has made its first allocation (and so taken its arena).
    /// Call it before any other thread starts; a thread that cannot start
    /// is left out, and the server starts one in its place when it serves.
    pub fn reserve(count: usize) -> IoThreads {
        let mut waiting = Vec::with_capacity(count);
        for i in 0..count {
            let (give, take) = mpsc::channel::<Job>();
            let (started, has_started) = mpsc::channel::<()>();
            let spawned = std::thread::Builder::new()
                .name(io_thread_name(i))
                .spawn(move || {
                    // This thread's first allocation, if its start made none.
                    std::hint::black_box(Box::new(0_u64));
                    let _ = started.send(());
                    if let Ok(job) = take.recv() {
                        job();
                    }
                });
            match spawned {
                Ok(handle) => {
                    let _ = has_started.recv();
                    waiting.push((give, handle));
                }
                Err(e) => tracing::warn!(error = %e, "cannot reserve I/O thread {i}"),
            }
        }
        IoThreads { waiting }
    }

    /// Runs `job` on the next reserved thread, or on a new one when none
    /// is left.
    fn run(&mut self, name: String, job: Job) -> std::io::Result<std::thread::JoinHandle<()>> {
        let mut job = job;
        while !self.waiting.is_empty() {
            let (give, handle) = self.waiting.remove(0);
            match give.send(job) {
                Ok(()) => return Ok(handle),
                // That thread is gone: the next one, with the job back.
                Err(mpsc::SendError(back)) => job = back,
            }
        }
        std::thread::Builder::new().name(name).spawn(job)
    }

    /// No thread reserved: the server starts its own when it serves.
    pub fn none() -> IoThreads {
        IoThreads {
            waiting: Vec::new(),
        }
    }
}

fn io_thread_name(i: usize) -> String {
    format!("wirespeed-io-{i}")
}

/// Starts `count` I/O threads (the reserved ones first), each with its own
/// copy of `sockets` in what `make` gives it to serve them with; a thread
/// that cannot start is logged, and the others serve.
pub(crate) fn start_io_threads<R, G, M>(
    count: usize,
    mut reserved: IoThreads,
    sockets: &Sockets,
    make: impl Fn(Sockets) -> IoThread<R, G, M>,
) -> Vec<std::thread::JoinHandle<()>>
where
    R: Answers,
    G: Answers,
    M: Answers,
{
    let mut threads = Vec::new();
    let spread = Arc::new(Spread::new(count));
    for i in 0..count {
        let thread = match sockets.try_clone() {
            Ok(sockets) => IoThread {
                place: Place {
                    spread: Arc::clone(&spread),
                    index: i,
                },
                ..make(sockets)
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot start I/O thread {i}");
                spread.absent(i);
                continue;
            }
        };
        match reserved.run(io_thread_name(i), Box::new(move || thread.run())) {
            Ok(handle) => threads.push(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start I/O thread {i}");
                spread.absent(i);
            }
        }
    }
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_thread_runs_its_job_and_a_missing_one_is_started() {
        let mut reserved = IoThreads::reserve(1);
        let (done, finished) = mpsc::channel();
        for _ in 0..2 {
            let done = done.clone();
            let handle = reserved
                .run(
                    "test".into(),
                    Box::new(move || {
                        let _ = done.send(std::thread::current().name().map(str::to_owned));
                    }),
                )
                .unwrap();
            handle.join().unwrap();
        }
        let names: Vec<_> = finished.try_iter().collect();
        assert_eq!(
            names,
            [Some("wirespeed-io-0".to_owned()), Some("test".to_owned())]
        );
    }

    #[test]
    fn unused_reserved_threads_end_when_dropped() {
        let reserved = IoThreads::reserve(2);
        let handles: Vec<_> = reserved.waiting.into_iter().map(|(_, h)| h).collect();
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
