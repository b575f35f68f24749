//! The models this server serves: each loaded model together with its
//! scheduler, in one map, so the two can never disagree.

use std::collections::BTreeMap;
use std::sync::Arc;

use wirespeed_core::{CpuPool, Error, ErrorKind, Model, ModelMetadata};
use wirespeed_models::{is_valid_model_name, LoadedModel};

use crate::scheduler::Scheduler;

/// One served model.
pub(crate) struct ServedModel {
    pub(crate) model: Arc<dyn Model>,
    pub(crate) scheduler: Scheduler,
}

impl ServedModel {
    pub(crate) fn metadata(&self) -> &ModelMetadata {
        self.model.metadata()
    }
}

/// Every served model, by name.
pub(crate) struct ServedModels {
    models: BTreeMap<String, ServedModel>,
}

impl ServedModels {
    /// Gives each loaded model its scheduler: `max_concurrency` defaults to
    /// the CPU pool's threads, `max_queue` to 64 per unit of concurrency.
    pub(crate) fn start(loaded: Vec<LoadedModel>, pool: &CpuPool) -> ServedModels {
        let models = loaded
            .into_iter()
            .map(|loaded| {
                let concurrency = loaded.max_concurrency.unwrap_or(pool.threads()).max(1);
                let queue = loaded.max_queue.unwrap_or(64 * concurrency);
                let scheduler =
                    Scheduler::start(Arc::clone(&loaded.model), concurrency, queue, pool.clone());
                let served = ServedModel {
                    model: loaded.model,
                    scheduler,
                };
                (loaded.name, served)
            })
            .collect();
        ServedModels { models }
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
