//! Models calling models from their own code (Triton's BLS): the server's
//! [`ModelCaller`], which a backend reaches through its `ModelSource`. A
//! call is run as an ensemble's step is (`composite::call`): through the
//! callee's scheduler, with the caller's deadline and parameters, counted
//! in the callee's statistics; a composite callee runs the models it
//! calls.
//!
//! The caller's thread (a Python model's keeper, never a thread of the
//! runtime) runs the call itself, blocking on it: no hand-over to another
//! thread and back on the way.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use wirespeed_core::{Error, ErrorKind, Parameters, RequestedOutput, Tensor};
use wirespeed_models::{CallerGone, ModelCaller};
use wirespeed_scheduler::CallContext;

use crate::composite;
use crate::model_control::{load_request, LoadValue, Repository};
use crate::served::ServedModels;

/// The server's caller: its models, the repository that loads them, and
/// the runtime calls run on.
pub struct Calls {
    models: Weak<ServedModels>,
    repository: OnceLock<Weak<Repository>>,
    runtime: tokio::runtime::Handle,
}

impl Calls {
    /// A caller of `models`, running calls on the current runtime.
    pub fn new(models: &Arc<ServedModels>) -> Calls {
        Calls {
            models: Arc::downgrade(models),
            repository: OnceLock::new(),
            runtime: tokio::runtime::Handle::current(),
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

/// The callee a call names, ready to answer (`composite::callee`), while
/// the server is up.
fn callee(
    models: &Weak<ServedModels>,
    model: &str,
    version: Option<&str>,
) -> Result<(Arc<ServedModels>, Arc<crate::served::ServedModel>), Error> {
    let models = models
        .upgrade()
        .ok_or_else(|| Error::new(ErrorKind::Unavailable, "the server is stopping"))?;
    let served = composite::callee(&models, model, version)?;
    Ok((models, served))
}

fn requested(outputs: Vec<String>) -> Vec<RequestedOutput> {
    outputs
        .into_iter()
        .map(|name| RequestedOutput {
            name,
            parameters: Vec::new(),
        })
        .collect()
}

fn context(parameters: Parameters, deadline: Option<Instant>) -> CallContext {
    CallContext {
        parameters,
        deadline,
        ..CallContext::now()
    }
}

fn caller_gone(model: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "calling model '{model}': the calling request's client left; the call is cancelled"
        ),
    )
}

fn past_deadline(model: &str) -> Error {
    Error::new(
        ErrorKind::GatewayTimeout,
        format!("calling model '{model}': the request's deadline passed"),
    )
}

impl ModelCaller for Calls {
    fn ready(&self, model: &str, version: Option<&str>) -> bool {
        callee(&self.models, model, version).is_ok()
    }

    fn load_model(
        &self,
        model: &str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Error> {
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
        self.runtime.block_on(repository.load(model, request))
    }

    fn unload_model(&self, model: &str) -> Result<(), Error> {
        let repository = self.repository()?;
        self.runtime.block_on(repository.unload(model))
    }

    fn call_stream(
        &self,
        model: &str,
        version: Option<&str>,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        parameters: Parameters,
        deadline: Option<Instant>,
        mut gone: CallerGone<'_>,
        each: &mut dyn FnMut(Result<Vec<Tensor>, Error>, bool),
    ) -> Result<(), Error> {
        let (models, served) = callee(&self.models, model, version)?;
        if !served.model.decoupled() {
            each(
                self.call(model, version, inputs, outputs, parameters, deadline, gone),
                true,
            );
            return Ok(());
        }
        let requested = requested(outputs);
        let (sender, mut receiver) = wirespeed_core::response_channel();
        let mut call = context(parameters, deadline);
        call.responses = Some(sender);
        // The callee's run and its responses overlap, as for a client's
        // stream (`stream.rs`); each response is handed on as it comes.
        let run = composite::call(&models, &served, inputs, &requested, call, 0);
        let _entered = self.runtime.enter();
        let streamed = async {
            tokio::pin!(run);
            let mut running = true;
            loop {
                tokio::select! {
                    ran = &mut run, if running => {
                        running = false;
                        ran?;
                    }
                    item = receiver.next() => match item {
                        Some(streamed) => each(streamed.result, streamed.last),
                        None => break,
                    },
                }
            }
            if running {
                run.await?;
            }
            Ok(())
        };
        self.runtime.block_on(async move {
            let bounded = async {
                match deadline {
                    Some(at) => tokio::time::timeout_at(at.into(), streamed)
                        .await
                        .unwrap_or_else(|_| Err(past_deadline(model))),
                    None => streamed.await,
                }
            };
            tokio::select! {
                done = bounded => done,
                () = gone.as_mut() => Err(caller_gone(model)),
            }
        })
    }

    fn call(
        &self,
        model: &str,
        version: Option<&str>,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        parameters: Parameters,
        deadline: Option<Instant>,
        mut gone: CallerGone<'_>,
    ) -> Result<Vec<Tensor>, Error> {
        let (models, served) = callee(&self.models, model, version)?;
        let requested = requested(outputs);
        let call = context(parameters, deadline);
        let run =
            async move { composite::call(&models, &served, inputs, &requested, call, 0).await };
        // On the caller's own thread (a keeper, never a runtime's): the
        // server's runtime drives the timers and I/O the call registers
        // with it. Past the deadline the call is dropped, which cancels it
        // in the callee's scheduler.
        let _entered = self.runtime.enter();
        let bounded = async move {
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), run)
                    .await
                    .unwrap_or_else(|_| Err(past_deadline(model))),
                None => run.await,
            }
        };
        self.runtime.block_on(async move {
            tokio::select! {
                done = bounded => done,
                () = gone.as_mut() => Err(caller_gone(model)),
            }
        })
    }
}
