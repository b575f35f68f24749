//! How a model is scheduled, resolved and checked: its batching, its
//! latency objective with the default answer, and its queue's priority
//! levels. `wirespeed-models` reads them from a model's `config.toml`
//! (`[batching]`, `[slo]`, `[queue]`) and checks them against the model;
//! a program embedding the scheduler may build them itself.

use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::{Tensor, TensorData};

/// What happens to a request whose queue timeout passes before it runs.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TimeoutAction {
    /// It is answered with an error (503, UNAVAILABLE), as Triton's REJECT.
    #[default]
    Reject,
    /// It waits behind every request of its level (and above) that has not
    /// timed out, as Triton's DELAY.
    Delay,
}

/// How the server schedules one model: resolved and checked.
#[derive(Debug, Clone, Default)]
pub struct Scheduling {
    /// Requests joined into batches, if the model batches.
    pub batching: Option<Batching>,
    /// The latency objective and the answer given when it would be missed.
    pub slo: Option<Slo>,
    /// The queue's priority levels and their policies.
    pub queue: QueuePolicy,
}

/// `[batching]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Batching {
    /// Rows per call to the model, at most.
    pub max_batch_size: usize,
    /// Sizes sent as soon as the queue holds them; ascending.
    pub preferred_batch_sizes: Vec<usize>,
    /// How long the oldest request waits for a fuller batch.
    pub max_queue_delay: Duration,
    /// Clipper's AIMD on the batch size, in adaptive mode.
    pub adaptive: Option<Adaptive>,
}

/// Clipper's adaptive batching: the size grows by `step` rows while a
/// batch's latency stays within `objective`, and shrinks by `backoff`
/// (a fraction) when one goes over.
#[derive(Debug, Clone, PartialEq)]
pub struct Adaptive {
    /// The latency a batch must stay within.
    pub objective: Duration,
    /// Rows added after a full batch within the objective.
    pub step: usize,
    /// The fraction taken off after a batch over the objective.
    pub backoff: f64,
}

/// `[slo]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// From the request's first byte to its answer.
    pub latency: Duration,
    /// One default per output of the model.
    pub defaults: Vec<DefaultOutput>,
}

/// An output's default: one row's values, repeated for each row of the
/// request.
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultOutput {
    /// The output's name.
    pub name: String,
    /// Its shape in the metadata; a first dimension of `-1` takes the
    /// request's rows.
    pub shape: Vec<i64>,
    /// One row's elements.
    pub row: TensorData,
}

impl DefaultOutput {
    /// The default for a request of `rows` rows.
    pub fn tensor(&self, rows: usize) -> Tensor {
        let (shape, repeat): (Vec<usize>, usize) = match self.shape.split_first() {
            None => (Vec::new(), 1),
            Some((&first, rest)) => {
                let n = if first < 0 { rows } else { first as usize };
                let mut shape = vec![n];
                shape.extend(rest.iter().map(|&d| d as usize));
                (shape, n)
            }
        };
        macro_rules! repeated {
            ($($variant:ident),*) => {
                match &self.row {
                    $(TensorData::$variant(v) => TensorData::$variant(v.repeat(repeat)),)*
                    TensorData::Bytes(v) => TensorData::Bytes(
                        std::iter::repeat_n(v, repeat).flatten().cloned().collect(),
                    ),
                }
            };
        }
        let data = repeated!(
            Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Fp16, Fp32, Fp64, Bf16
        );
        Tensor {
            name: self.name.clone(),
            shape,
            data,
            parameters: Vec::new(),
        }
    }
}

/// The queue's levels, highest priority first (Triton's level 1).
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicy {
    /// One policy per level; one level when there are no priorities.
    pub levels: Vec<LevelPolicy>,
    /// The index in `levels` of requests that give no `priority` (or one
    /// outside the levels).
    pub default_level: usize,
}

impl Default for QueuePolicy {
    fn default() -> QueuePolicy {
        QueuePolicy {
            levels: vec![LevelPolicy::default()],
            default_level: 0,
        }
    }
}

impl QueuePolicy {
    /// The level of a request's `priority` parameter, as Triton reads it:
    /// 1 is the highest; 0 or a number past the levels is the default.
    pub fn level(&self, priority: u64) -> usize {
        match usize::try_from(priority) {
            Ok(p) if p >= 1 && p <= self.levels.len() => p - 1,
            _ => self.default_level,
        }
    }
}

/// The policy of one priority level.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelPolicy {
    /// Requests that may wait at this level; 0 for no bound but the
    /// model's `max_queue`.
    pub max_queue_size: usize,
    /// What happens when a request's queue timeout passes.
    pub timeout_action: TimeoutAction,
    /// The queue timeout of a request that gives none.
    pub default_timeout: Option<Duration>,
    /// Whether a request's `timeout` parameter applies (it may only
    /// shorten `default_timeout`).
    pub allow_timeout_override: bool,
}

impl Default for LevelPolicy {
    fn default() -> LevelPolicy {
        LevelPolicy {
            max_queue_size: 0,
            timeout_action: TimeoutAction::Reject,
            default_timeout: None,
            allow_timeout_override: true,
        }
    }
}

impl LevelPolicy {
    /// The queue timeout of a request that asks for `requested` (its
    /// `timeout` parameter), under this policy.
    pub fn timeout(&self, requested: Option<Duration>) -> Option<Duration> {
        match (
            self.default_timeout,
            requested.filter(|_| self.allow_timeout_override),
        ) {
            (Some(default), Some(asked)) => Some(default.min(asked)),
            (default, asked) => default.or(asked),
        }
    }
}
