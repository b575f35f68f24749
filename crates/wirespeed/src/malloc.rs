//! One glibc malloc arena for the server, so memory is the tensors in
//! flight and not every tensor that ever was.
//!
//! glibc gives threads their own arenas (up to eight per core). A large
//! tensor is allocated on whichever thread decoded it and freed on another,
//! and every arena keeps the hole a freed tensor leaves: with tokio's
//! blocking threads, rayon's and tokio's workers each holding one, the
//! server's peak RSS over sixty 262144x8 FP32 requests (an 8 MiB tensor)
//! grew from 23 MB after the first to 41 MB, and stayed there. With one
//! arena it peaked at 27 MB and fell back to 11 MB between requests, with
//! no loss of throughput on small requests (64 connections of `GET /v2`,
//! 16 of Titanic JSON: within run-to-run noise). Small allocations do not
//! contend for the arena's lock: glibc serves them from per-thread caches.
//!
//! `MALLOC_ARENA_MAX` in the environment still wins: it is left alone when
//! set. Other allocators (musl, or a platform without glibc) are untouched.
//! This needs `mallopt`, hence the one `unsafe` block.

/// Limits glibc to one malloc arena, unless `MALLOC_ARENA_MAX` says otherwise.
/// Call it before any other thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn one_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    // SAFETY: `mallopt` sets an allocator parameter and has no other effect;
    // `M_ARENA_MAX` is one glibc documents. It runs before the server starts
    // any thread, so no allocation is in progress elsewhere.
    let done = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    if done != 1 {
        tracing::debug!("mallopt(M_ARENA_MAX, 1) was refused; glibc keeps its own arena count");
    }
}

/// Elsewhere the platform's allocator is left as it is.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn one_arena() {}
