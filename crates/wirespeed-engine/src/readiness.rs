//! Whether the server and each model can answer, as Triton's and KServe's
//! readiness mean: on REST and gRPC, and in the repository index.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::served::{ServedModel, ServedModels};

/// The server's own part of readiness; the models say the rest.
pub struct Readiness {
    /// False once shutdown begins.
    engine: AtomicBool,
    /// False while an upstream's models are still to be listed
    /// (`--upstream` without `--upstream-models`).
    listed: AtomicBool,
    /// Models that failed to load at start and are not served since
    /// (Triton's `--exit-on-error=false`): the server is not ready while
    /// any is, as Triton's strict readiness has it.
    failed: Mutex<BTreeSet<String>>,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            engine: AtomicBool::new(true),
            listed: AtomicBool::new(true),
            failed: Mutex::new(BTreeSet::new()),
        }
    }
}

impl Readiness {
    /// Shutdown has begun: nothing is ready any more.
    pub fn stop_serving(&self) {
        self.engine.store(false, Ordering::Release);
    }

    /// Not ready until [`Readiness::listed`]: the upstream's models are to
    /// be listed.
    #[cfg(feature = "upstream")]
    pub fn wait_for_listing(&self) {
        self.listed.store(false, Ordering::Release);
    }

    /// The upstream's models are listed; true if they were already.
    #[cfg(feature = "upstream")]
    pub fn listed(&self) -> bool {
        self.listed.swap(true, Ordering::AcqRel)
    }

    /// Model `name` failed to load at start: the server is not ready
    /// until it is served, or unloaded.
    pub fn failed(&self, name: &str) {
        self.failed_models().insert(name.to_owned());
    }

    /// Model `name` is served, or unloaded: it no longer keeps the server
    /// from being ready.
    pub fn settled(&self, name: &str) {
        self.failed_models().remove(name);
    }

    fn failed_models(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ready while serving with every model ready, and none failed at
    /// start.
    pub fn server_ready(&self, models: &ServedModels) -> bool {
        self.engine.load(Ordering::Acquire)
            && self.listed.load(Ordering::Acquire)
            && self.failed_models().is_empty()
            && models
                .all()
                .iter()
                .all(|(_, served)| served.model.ready().is_ok())
    }

    /// Whether `served` can answer now, or why not.
    pub fn model_ready(&self, served: &ServedModel) -> Result<(), String> {
        if !self.engine.load(Ordering::Acquire) {
            return Err("the server is shutting down".to_owned());
        }
        served.model.ready()
    }
}
