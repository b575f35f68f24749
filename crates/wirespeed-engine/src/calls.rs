//! Models calling models from their own code (Triton's BLS): the server's
//! [`ModelCaller`], which a backend reaches through its `ModelSource`. A
//! call is run as an ensemble's step is (`composite::call`): through the
//! callee's scheduler, under the caller's context (its deadline and
//! parameters), counted in the callee's statistics; a composite callee
//! runs the models it calls. Loads and unloads go through the repository,
//! as its API's do.
//!
//! A model whose code runs on a thread of its own (a Python model's
//! keeper) blocks that thread on the call, on the server's runtime: no
//! hand-over to another thread and back on the way.

use std::sync::{Arc, OnceLock, Weak};

use wirespeed_core::{Error, ErrorKind, Model, RequestedOutput, Tensor};
use wirespeed_models::{ModelCaller, Run};
use wirespeed_scheduler::CallContext;

use crate::composite;
use crate::model_control::{load_request, LoadValue, Repository};
use crate::served::ServedModels;

/// The server's caller: its models, and the repository that loads them.
pub struct Calls {
    models: Weak<ServedModels>,
    repository: OnceLock<Weak<Repository>>,
}

impl Calls {
    /// A caller of `models`.
    pub fn new(models: &Arc<ServedModels>) -> Calls {
        Calls {
            models: Arc::downgrade(models),
            repository: OnceLock::new(),
        }
    }

    /// The repository models load and unload models through
    /// (`pb_utils.load_model`), once the server has one.
    pub fn set_repository(&self, repository: &Arc<Repository>) {
        let _ = self.repository.set(Arc::downgrade(repository));
    }

    fn repository(&self) -> Result<Arc<Repository>, Error> {
        self.repository
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::new(ErrorKind::Unavailable, "the server is stopping"))
    }
}

/// The served models, while the server is up.
fn served(models: &Weak<ServedModels>) -> Result<Arc<ServedModels>, Error> {
    models
        .upgrade()
        .ok_or_else(|| Error::new(ErrorKind::Unavailable, "the server is stopping"))
}

impl ModelCaller for Calls {
    fn callee(&self, model: &str, version: Option<&str>) -> Result<Arc<dyn Model>, Error> {
        composite::callee_model(&*served(&self.models)?, model, version)
    }

    fn call<'a>(
        &'a self,
        model: &'a str,
        version: Option<&'a str>,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
    ) -> Run<'a, Vec<Tensor>> {
        Box::pin(async move {
            let models = served(&self.models)?;
            composite::call_named(&models, model, version, inputs, outputs, call, 0).await
        })
    }

    fn load_model<'a>(
        &'a self,
        model: &'a str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Run<'a, ()> {
        Box::pin(async move {
            let repository = self.repository()?;
            // Checked as the repository API checks a load's parameters.
            let config = config.map(|c| ("config".to_owned(), c));
            let parameters = config
                .iter()
                .map(|(key, text)| (key.as_str(), LoadValue::Text(text)))
                .chain(
                    files
                        .iter()
                        .map(|(key, bytes)| (key.as_str(), LoadValue::Bytes(bytes))),
                );
            let request = load_request(parameters)?;
            repository.load(model, request).await
        })
    }

    fn unload_model<'a>(&'a self, model: &'a str) -> Run<'a, ()> {
        Box::pin(async move { self.repository()?.unload(model).await })
    }
}
