//! glibc malloc arenas for the server: one per core, so memory is the
//! tensors in flight and not every tensor that ever was, and the async
//! workers do not queue for one arena's lock.
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
//! and 88 k). One arena per core keeps both: the lock is rarely contended,
//! and the holes are at most one per core (`docs/performance.md` has the
//! memory figures).
//!
//! `MALLOC_ARENA_MAX` in the environment still wins: it is left alone when
//! set. Other allocators (musl, or a platform without glibc) are untouched.
//! This needs `mallopt`, hence the one `unsafe` block.

/// Limits glibc to `arenas` malloc arenas, unless `MALLOC_ARENA_MAX` says
/// otherwise. Call it before any other thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn limit_arenas(arenas: usize) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let arenas = libc::c_int::try_from(arenas.max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` sets an allocator parameter and has no other effect;
    // `M_ARENA_MAX` is one glibc documents. It runs before the server starts
    // any thread, so no allocation is in progress elsewhere.
    let done = unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    if done != 1 {
        tracing::debug!(
            "mallopt(M_ARENA_MAX, {arenas}) was refused; glibc keeps its own arena count"
        );
    }
}

/// Elsewhere the platform's allocator is left as it is.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn limit_arenas(_: usize) {}
