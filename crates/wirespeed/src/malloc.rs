//! glibc malloc for the server: an arena for each I/O thread and one per
//! core for the rest, and freed tensors of up to 16 MiB kept for the next
//! request rather than given back and faulted in again.
//!
//! ## Arenas
//!
//! Few, so memory is the tensors in flight and not every tensor that ever
//! was; and no two I/O threads on one, so they never queue for its lock.
//!
//! glibc gives threads their own arenas (up to eight per core). A large
//! tensor is allocated on whichever thread decoded it and freed on another,
//! and every arena keeps the hole a freed tensor leaves: with one arena per
//! thread, the server's peak RSS over sixty 262144x8 FP32 requests (an 8
//! MiB tensor) grew from 23 MB after the first to 41 MB, and stayed there.
//!
//! One arena for the whole process fixed that, but every allocation then
//! took the same lock: small requests allocate on one worker and free on
//! the other, past glibc's per-thread cache, and with two workers a fifth
//! of the server's time went to waking and waiting on that lock
//! (`perf`: `__lll_lock_wait_private`/`__lll_lock_wake_private`; `GET /v2`
//! 114 k req/s with one arena, 123 k with one per core; Titanic JSON 70 k
//! and 88 k).
//!
//! One arena per core was the next answer, and it was right only by luck:
//! a thread takes its arena at its first allocation, a new one while there
//! are fewer than the limit and else one another thread has. The compute
//! pool and the schedulers' thread start before the I/O threads, so in
//! about half the starts the two I/O threads of a 2-core server shared an
//! arena, and the Titanic `POST` ran at 56-72 k req/s against 87-98 k
//! (sixteen starts, `wrk -t1 -c32`; with glibc's own limit, eight starts
//! of eight were fast). Now the I/O threads start first, each taking a
//! new arena (`wirespeed_server::IoThreads`), and the limit ([`arenas`])
//! is the main thread's, one per I/O thread, and one per core shared by
//! the compute pool, the schedulers and the Python workers' keepers.
//!
//! ## Large buffers
//!
//! A request with 1 MiB tensors allocates a few buffers of 1 MiB (the
//! gRPC message, the tensor, the answer) and frees them when it is
//! answered. glibc's own thresholds follow the last large free: it then
//! keeps at most twice that size free at an arena's top and gives the rest
//! back to the kernel, so with four such requests in flight the same pages
//! went back and came again on every request, each faulted in and zeroed
//! by the kernel: 43% of the server's CPU in `perf` (`clear_page_erms`
//! under `exc_page_fault`), 1.9 ms of CPU per 1 MiB identity over gRPC.
//! Buffers under [`MMAP_THRESHOLD`] come from the arenas, and an arena
//! gives back what is free at its top past [`TRIM_THRESHOLD`]: 1.4 ms per
//! inference (`benchmarks/scripts/triton.py --only mb4` has the figures).
//! The threshold is 16 MiB so that 8 MiB tensors (262144x8 FP32) are
//! kept too: with one of 4 MiB they were mapped afresh for each request,
//! and a raw gRPC request of one to a Python row sum took 33.0 ms at the
//! median of 21 alternated requests, against 26.7 ms now; the 42.5 MB
//! JSON request of the same tensor, 87.4 against 85.1 ms. The price is memory
//! kept after large requests: 14-22 MiB more resident after them, at most
//! [`TRIM_THRESHOLD`] an arena. Larger tensors are mapped and unmapped
//! whole, as before.
//!
//! `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`
//! in the environment still win: each is left alone when set. Other
//! allocators (musl, or a platform without glibc) are untouched. This needs
//! `mallopt`, hence the `unsafe` block.

/// Allocations from this size up are mapped on their own (glibc's
/// `M_MMAP_THRESHOLD`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: usize = 16 << 20;

/// Free memory at an arena's top past this goes back to the kernel (glibc's
/// `M_TRIM_THRESHOLD`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: usize = 32 << 20;

/// The malloc arenas a server keeps: the main thread's (start-up, the
/// schedulers), one for each of its `io_threads` I/O threads, and one per
/// core for the other threads.
pub(crate) fn arenas(io_threads: usize, cores: usize) -> usize {
    1 + io_threads + cores
}

/// Limits glibc to `arenas` malloc arenas and sets its thresholds for
/// large buffers, each unless the environment says otherwise. Call it
/// before any other thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn configure(arenas: usize) {
    set(
        "MALLOC_ARENA_MAX",
        libc::M_ARENA_MAX,
        "M_ARENA_MAX",
        arenas.max(1),
    );
    set(
        "MALLOC_MMAP_THRESHOLD_",
        libc::M_MMAP_THRESHOLD,
        "M_MMAP_THRESHOLD",
        MMAP_THRESHOLD,
    );
    set(
        "MALLOC_TRIM_THRESHOLD_",
        libc::M_TRIM_THRESHOLD,
        "M_TRIM_THRESHOLD",
        TRIM_THRESHOLD,
    );
}

/// Sets glibc's malloc parameter `parameter` (named `name`) to `value`,
/// unless the environment variable `variable` sets it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set(variable: &str, parameter: libc::c_int, name: &str, value: usize) {
    if std::env::var_os(variable).is_some() {
        return;
    }
    let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` sets an allocator parameter and has no other effect;
    // the parameters set here are ones glibc documents. It runs before the
    // server starts any thread, so no allocation is in progress elsewhere.
    let done = unsafe { libc::mallopt(parameter, value) };
    if done != 1 {
        tracing::debug!("mallopt({name}, {value}) was refused; glibc keeps its own");
    }
}

/// Elsewhere the platform's allocator is left as it is.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn configure(_: usize) {}
