//! How the server serves one model, as its config sets it for every
//! backend alike: one typed value, read at load from `config.toml`'s
//! shared keys (`max_concurrency`, `max_queue`, `[batching]`, `[slo]`,
//! `[queue]`, `[sequence]`, `response_cache`; a `config.pbtxt`'s are
//! read into the same keys first), and handed to the engine, which starts
//! the model's scheduler, its sequences and its place in the response
//! cache from it.

use crate::scheduling::Scheduling;
use crate::sequence::Sequencing;

/// The serving policy of one model.
#[derive(Debug, Clone, Default)]
pub struct Serving {
    /// Requests computed at once, if the config says (else the model's
    /// own default, else the server's compute threads).
    pub max_concurrency: Option<usize>,
    /// Requests that may wait for a turn, if the config says (else 64 per
    /// unit of concurrency and row of a batch).
    pub max_queue: Option<usize>,
    /// Batching, latency objective and queue policy.
    pub scheduling: Scheduling,
    /// Its sequence batching, when it is a stateful model.
    pub sequencing: Option<Sequencing>,
    /// Its answers may come from the server's response cache.
    pub response_cache: bool,
}
