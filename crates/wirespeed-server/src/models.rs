//! The models this server serves: each loaded model together with its
//! scheduler, in one map, so the two can never disagree. Models can join,
//! be replaced and leave while serving (those an upstream lists in
//! whole-server mode; loads, reloads and unloads of the repository API and
//! polling, `repository.rs`); a request holds its model by an `Arc`, taken
//! under a read lock.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use wirespeed_core::{CpuPool, Error, ErrorKind, Model, ModelMetadata};
use wirespeed_models::{is_valid_model_name, LoadedModel, OutputLabels};

use crate::metrics::Buckets;
use crate::scheduler::{QueueThread, Scheduler};
use crate::statistics::ModelStats;

/// One served model.
pub(crate) struct ServedModel {
    pub(crate) model: Arc<dyn Model>,
    pub(crate) scheduler: Scheduler,
    /// Its requests' counts and times.
    pub(crate) stats: ModelStats,
    /// The backend that loaded it, by its registry name.
    pub(crate) backend: String,
    /// Requests computed at once.
    pub(crate) max_concurrency: usize,
    /// Requests that may wait for a turn.
    pub(crate) max_queue: usize,
    /// The labels of the outputs that have them.
    labels: Vec<OutputLabels>,
}

impl ServedModel {
    pub(crate) fn metadata(&self) -> &ModelMetadata {
        self.model.metadata()
    }

    /// The class labels of `output`, if its config names a labels file.
    pub(crate) fn labels(&self, output: &str) -> Option<&OutputLabels> {
        self.labels.iter().find(|l| l.output == output)
    }

    /// The version a request answered by this model reports.
    pub(crate) fn version(&self) -> &str {
        &self.metadata().versions[0]
    }
}

/// Every served model, by name.
pub(crate) struct ServedModels {
    models: RwLock<BTreeMap<String, Arc<ServedModel>>>,
    pool: CpuPool,
    /// Where every model's queue is kept.
    queues: QueueThread,
    /// The latency histograms' bounds, when metrics are on.
    buckets: Option<Arc<Buckets>>,
}

impl ServedModels {
    /// Gives each loaded model its scheduler: `max_concurrency` defaults to
    /// what the model asks for, else the CPU pool's threads; `max_queue`
    /// to 64 batches per unit of concurrency (a batch is one request when
    /// the model does not batch).
    pub(crate) fn start(
        loaded: Vec<LoadedModel>,
        pool: &CpuPool,
        buckets: Option<Arc<Buckets>>,
    ) -> std::io::Result<ServedModels> {
        let models = ServedModels {
            models: RwLock::new(BTreeMap::new()),
            pool: pool.clone(),
            queues: QueueThread::start()?,
            buckets,
        };
        for loaded in loaded {
            models.add(loaded);
        }
        Ok(models)
    }

    /// Serves `loaded` from now on, unless a model of that name is served
    /// already; says whether it was added.
    pub(crate) fn add(&self, loaded: LoadedModel) -> bool {
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        if models.contains_key(&loaded.name) {
            return false;
        }
        let name = loaded.name.clone();
        models.insert(name, self.serve(loaded));
        true
    }

    /// Serves `loaded` from now on, in place of the model of that name if
    /// one is served, which is returned. The swap is one map insertion
    /// under the write lock: a request holds the model it found by an
    /// `Arc`, so requests in flight (queued ones too) finish on the old
    /// model and scheduler, and later ones find the new one.
    pub(crate) fn replace(&self, loaded: LoadedModel) -> Option<Arc<ServedModel>> {
        let name = loaded.name.clone();
        let served = self.serve(loaded);
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.insert(name, served)
    }

    /// Stops serving model `name`, returning it; requests in flight finish.
    pub(crate) fn remove(&self, name: &str) -> Option<Arc<ServedModel>> {
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.remove(name)
    }

    /// `loaded` with its scheduler and counters.
    fn serve(&self, loaded: LoadedModel) -> Arc<ServedModel> {
        let pool = &self.pool;
        let concurrency = loaded
            .max_concurrency
            .or(loaded.model.default_concurrency())
            .unwrap_or(pool.threads())
            .max(1);
        // A batch takes up to max_batch_size requests at a time.
        let per_turn = loaded
            .scheduling
            .batching
            .as_ref()
            .map_or(1, |b| b.max_batch_size);
        let queue = loaded
            .max_queue
            .unwrap_or(64usize.saturating_mul(concurrency).saturating_mul(per_turn));
        let scheduler = Scheduler::start(
            Arc::clone(&loaded.model),
            concurrency,
            queue,
            loaded.scheduling,
            pool.clone(),
            &self.queues,
        );
        Arc::new(ServedModel {
            model: loaded.model,
            scheduler,
            stats: ModelStats::new(self.buckets.as_ref()),
            backend: loaded.backend,
            max_concurrency: concurrency,
            max_queue: queue,
            labels: loaded.labels,
        })
    }

    /// Every served model, in name order, as they are now.
    pub(crate) fn all(&self) -> Vec<(String, Arc<ServedModel>)> {
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models
            .iter()
            .map(|(name, served)| (name.clone(), Arc::clone(served)))
            .collect()
    }

    /// The model `name` in `version` (any served version when `None`), or a
    /// not-found error that says which part did not match.
    pub(crate) fn get(&self, name: &str, version: Option<&str>) -> Result<Arc<ServedModel>, Error> {
        // Names come from URLs and messages; this is a map, so nothing can
        // reach a file, but a name that could never be a model folder's is
        // refused as such rather than looked up.
        if !is_valid_model_name(name) {
            let shown: String = name.chars().take(64).collect();
            return Err(Error::malformed(format!(
                "'{}' cannot be a model name: names use only letters, digits, '_', '-' and '.', and are not '.' or '..'",
                shown.escape_debug()
            )));
        }
        let served = self
            .models
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| {
                Error::new(ErrorKind::ModelNotFound, format!("unknown model '{name}'"))
            })?;
        if let Some(v) = version {
            let versions = &served.metadata().versions;
            if !versions.iter().any(|served| served == v) {
                return Err(Error::new(
                    ErrorKind::VersionNotFound,
                    format!(
                        "model '{name}' has no version '{v}'; it serves {}",
                        versions.join(", ")
                    ),
                ));
            }
        }
        Ok(served)
    }
}
