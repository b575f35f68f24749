//! The threads the package computes on: one pool per process, made at
//! first use, for large tree batches and large decodes, as the server's
//! one CPU pool is.

use std::sync::OnceLock;

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use wirespeed_core::CpuPool;

/// The pool: one thread per core, or
/// `WIRESPEED_THREADS` (read at first use; 1 keeps all work on the
/// calling thread).
pub(crate) fn pool() -> PyResult<&'static CpuPool> {
    static POOL: OnceLock<Result<CpuPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = match std::env::var("WIRESPEED_THREADS") {
            Ok(n) => n
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("WIRESPEED_THREADS={n:?} is not a positive number"))?,
            Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        CpuPool::new(threads).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| PyValueError::new_err(format!("no thread pool: {e}")))
}
