//! The one pool of threads for CPU work: model compute that is too long for
//! an async worker, large decodes, and the helpers that split one large
//! decode or tree batch over the cores.
//!
//! A server makes one, sized in its configuration, and hands it to every
//! part that computes; none of them starts a thread of its own. So however
//! many large requests arrive at once, the process has the async workers,
//! this pool's threads and nothing more, and nested work (a decode on the
//! pool that asks the pool for helpers) shares the same threads instead of
//! multiplying them.
//!
//! It is rayon's pool: work-stealing, so a thread waiting in
//! [`CpuPool::scope`] runs other jobs meanwhile, and a panic in a job is
//! caught and reported rather than taking the process down.

use std::fmt;
use std::sync::Arc;

/// A shared pool of CPU threads. Clones share the same threads.
#[derive(Clone)]
pub struct CpuPool {
    pool: Arc<rayon::ThreadPool>,
}

impl CpuPool {
    /// A pool of `threads` threads (at least one), named `wirespeed-cpu-N`.
    pub fn new(threads: usize) -> std::io::Result<CpuPool> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("wirespeed-cpu-{i}"))
            // The default handler aborts the process. A job's panic has
            // already been printed by the panic hook; the job's caller
            // sees its answer channel close and reports a server error.
            .panic_handler(|_| {})
            .build()
            .map_err(std::io::Error::other)?;
        Ok(CpuPool {
            pool: Arc::new(pool),
        })
    }

    /// How many threads the pool has.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Whether the calling thread is one of the pool's.
    pub fn on_pool(&self) -> bool {
        self.pool.current_thread_index().is_some()
    }

    /// Runs `job` on the pool, without waiting for it.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        self.pool.spawn(job);
    }

    /// Runs `work`, whose spawned jobs may borrow from the caller, and
    /// returns once every job has finished. The calling thread takes part
    /// (`in_place`): on the pool it runs jobs; off it, it runs `work` and
    /// then waits.
    pub fn scope<'scope, R>(&self, work: impl FnOnce(&rayon::Scope<'scope>) -> R) -> R {
        self.pool.in_place_scope(work)
    }
}

impl fmt::Debug for CpuPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuPool")
            .field("threads", &self.threads())
            .finish()
    }
}

/// Two handles are equal when they share the same threads.
impl PartialEq for CpuPool {
    fn eq(&self, other: &CpuPool) -> bool {
        Arc::ptr_eq(&self.pool, &other.pool)
    }
}

impl Eq for CpuPool {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn scoped_jobs_borrow_and_finish_before_the_scope_returns() {
        let pool = CpuPool::new(2).unwrap();
        assert_eq!(pool.threads(), 2);
        assert!(!pool.on_pool());
        let done = AtomicUsize::new(0);
        pool.scope(|s| {
            for _ in 0..8 {
                s.spawn(|_| {
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(done.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        let pool = CpuPool::new(1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let lost = tx.clone();
        pool.spawn(move || {
            let _keep = lost;
            panic!("a model bug");
        });
        pool.spawn(move || tx.send(7).unwrap());
        assert_eq!(rx.recv(), Ok(7));
        assert_eq!(pool.clone(), pool);
    }
}
