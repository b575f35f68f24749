//! The models this server serves: each loaded model together with its
//! scheduler, in one map, so the two can never disagree.

use std::collections::BTreeMap;
use std::sync::Arc;

use wirespeed_core::{CpuPool, Error, ErrorKind, Model, ModelMetadata};
use wirespeed_models::{is_valid_model_name, LoadedModel, OutputLabels};

use crate::scheduler::Scheduler;
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
    models: BTreeMap<String, ServedModel>,
}

impl ServedModels {
    /// Gives each loaded model its scheduler: `max_concurrency` defaults to
    /// what the model asks for, else the CPU pool's threads; `max_queue`
    /// to 64 per unit of concurrency.
    pub(crate) fn start(loaded: Vec<LoadedModel>, pool: &CpuPool) -> ServedModels {
        let models = loaded
            .into_iter()
            .map(|loaded| {
                let concurrency = loaded
                    .max_concurrency
                    .or(loaded.model.default_concurrency())
                    .unwrap_or(pool.threads())
                    .max(1);
                let queue = loaded.max_queue.unwrap_or(64 * concurrency);
                let scheduler =
                    Scheduler::start(Arc::clone(&loaded.model), concurrency, queue, pool.clone());
                let served = ServedModel {
                    model: loaded.model,
                    scheduler,
                    stats: ModelStats::default(),
                    backend: loaded.backend,
                    max_concurrency: concurrency,
                    max_queue: queue,
                    labels: loaded.labels,
                };
                (loaded.name, served)
            })
            .collect();
        ServedModels { models }
    }

    /// Every served model, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &ServedModel)> {
        self.models
            .iter()
            .map(|(name, served)| (name.as_str(), served))
    }

    /// The model `name` in `version` (any served version when `None`), or a
    /// not-found error that says which part did not match.
    pub(crate) fn get(&self, name: &str, version: Option<&str>) -> Result<&ServedModel, Error> {
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
        let served = self.models.get(name).ok_or_else(|| {
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
