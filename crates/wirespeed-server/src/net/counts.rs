//! Connections counted per listener: accepted since start, and open now,
//! for the metrics scrape (`wirespeed_connections_total`,
//! `wirespeed_open_connections`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A listener: its API and its transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerKind {
    RestTcp = 0,
    RestUnix = 1,
    GrpcTcp = 2,
    GrpcUnix = 3,
    Metrics = 4,
}

impl ListenerKind {
    pub(crate) const ALL: [ListenerKind; 5] = [
        ListenerKind::RestTcp,
        ListenerKind::RestUnix,
        ListenerKind::GrpcTcp,
        ListenerKind::GrpcUnix,
        ListenerKind::Metrics,
    ];

    /// The `api` and `transport` labels.
    pub(crate) fn labels(self) -> (&'static str, &'static str) {
        match self {
            ListenerKind::RestTcp => ("rest", "tcp"),
            ListenerKind::RestUnix => ("rest", "unix"),
            ListenerKind::GrpcTcp => ("grpc", "tcp"),
            ListenerKind::GrpcUnix => ("grpc", "unix"),
            ListenerKind::Metrics => ("metrics", "tcp"),
        }
    }
}

/// Per listener: connections accepted, and open now.
#[derive(Default)]
pub(crate) struct Connections {
    accepted: [AtomicU64; ListenerKind::ALL.len()],
    open: [AtomicU64; ListenerKind::ALL.len()],
}

impl Connections {
    /// Counts a connection accepted on `listener`, open until the guard
    /// drops.
    pub(crate) fn opened(self: &Arc<Self>, listener: ListenerKind) -> OpenConnection {
        self.accepted[listener as usize].fetch_add(1, Ordering::Relaxed);
        self.open[listener as usize].fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            counts: Arc::clone(self),
            listener,
        }
    }

    pub(crate) fn accepted(&self, listener: ListenerKind) -> u64 {
        self.accepted[listener as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn open(&self, listener: ListenerKind) -> u64 {
        self.open[listener as usize].load(Ordering::Relaxed)
    }
}

/// A connection counted as open.
pub(crate) struct OpenConnection {
    counts: Arc<Connections>,
    listener: ListenerKind,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.counts.open[self.listener as usize].fetch_sub(1, Ordering::Relaxed);
    }
}
