//! Counting the requests of served models, and reading their statistics:
//! [`Counting`] counts one request, once, however it ends; [`snapshot`]
//! and [`select`] read a model's counts (`statistics.rs` keeps them) with
//! its scheduler's, as Triton's statistics extension answers them.

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::time::Instant;

use wirespeed_core::Error;
use wirespeed_proto::inference as pb;

use crate::served::{ServedModel, ServedModels};
use crate::statistics::{FailureReason, Snapshot};
use crate::timing::Stages;

/// Counts one request to a served model, once, as it ends: a success with
/// its stage times, a failure by its kind, or, when its caller went away
/// first (the future dropped), a cancellation. The one count of the
/// pipeline's requests and of the calls composites and models make.
pub struct Counting<M: Deref<Target = ServedModel>> {
    /// The model (the version) that answers: the one counted.
    pub served: M,
    started: Instant,
    done: bool,
}

impl<M: Deref<Target = ServedModel>> Counting<M> {
    /// A request to `served` that started at `started`.
    pub fn new(served: M, started: Instant) -> Counting<M> {
        Counting {
            served,
            started,
            done: false,
        }
    }

    /// Counts how the request ended.
    pub fn finish(mut self, outcome: Result<(), &Error>, stages: &Stages) {
        let stats = &self.served.stats;
        match outcome {
            Ok(()) => stats.success(stages),
            Err(e) => stats.failure(stages.elapsed(), FailureReason::of(e.kind())),
        }
        self.done = true;
    }
}

impl<M: Deref<Target = ServedModel>> Drop for Counting<M> {
    fn drop(&mut self) {
        if !self.done {
            self.served
                .stats
                .failure(self.started.elapsed(), FailureReason::Canceled);
        }
    }
}

/// The statistics of `served`, called `name`.
pub fn snapshot(name: &str, served: &ServedModel) -> Snapshot {
    let mut triton = served.stats.snapshot(name, served.version());
    // A composite has no scheduler of its own: it counts no executions,
    // defaults or timeouts.
    let Some(counters) = served.scheduler().map(|s| s.counters()) else {
        return Snapshot {
            triton,
            defaults: 0,
            timeouts: 0,
            batch_size: None,
        };
    };
    let batching = served.scheduling.batching.is_some();
    if let (true, Some(executions)) = (batching, served.model.executions()) {
        // A model that gathers its batches itself counted them.
        let tallies = executions.tallies();
        triton.execution_count = tallies.iter().map(|t| t.1).sum();
        let d = |count: u64, ns: u64| Some(pb::StatisticDuration { count, ns });
        triton.batch_stats = tallies
            .into_iter()
            .map(|(rows, count, ns)| pb::InferBatchStatistics {
                batch_size: rows as u64,
                compute_input: d(count, 0),
                compute_infer: d(count, ns),
                compute_output: d(count, 0),
            })
            .collect();
    } else if batching {
        triton.execution_count = counters.executions.load(Ordering::Relaxed);
        let batches = counters.batches.lock().unwrap_or_else(|e| e.into_inner());
        let d = |count: u64, ns: u64| Some(pb::StatisticDuration { count, ns });
        triton.batch_stats = batches
            .iter()
            .map(|(&rows, t)| pb::InferBatchStatistics {
                batch_size: rows as u64,
                compute_input: d(t.count, t.input_ns),
                compute_infer: d(t.count, t.infer_ns),
                compute_output: d(t.count, t.output_ns),
            })
            .collect();
    }
    Snapshot {
        triton,
        defaults: counters.defaults.load(Ordering::Relaxed),
        timeouts: counters.timeouts.load(Ordering::Relaxed),
        batch_size: batching.then(|| counters.batch_size.load(Ordering::Relaxed)),
    }
}

/// The statistics of model `name` (every model when empty) in `version`
/// (every served one when `None`, as Triton's), or why there are none.
pub fn select(
    models: &ServedModels,
    name: &str,
    version: Option<&str>,
) -> Result<Vec<Snapshot>, Error> {
    if name.is_empty() {
        return Ok(models
            .all()
            .iter()
            .map(|(name, m)| snapshot(name, m))
            .collect());
    }
    let served = models.get(name, version)?;
    if version.is_none() {
        return Ok(models
            .versions(name)
            .iter()
            .map(|m| snapshot(name, m))
            .collect());
    }
    Ok(vec![snapshot(name, &served)])
}
