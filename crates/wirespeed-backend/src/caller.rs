//! How a model calls other served models: the server's [`ModelCaller`].
//! A composite's run is handed one (an ensemble's steps, a graph's nodes,
//! an application's candidates); a model of another backend finds the
//! server's through a [`CallerSlot`] once the server serves (Triton's BLS,
//! a Python model's `pb_utils.InferenceRequest(...).exec()`). Both ask in
//! the same way, and the server answers both in the same way: the callee
//! found ready, run through its own scheduler (a composite callee through
//! its run, one level deeper), counted in its statistics.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};

use wirespeed_core::{Error, ErrorKind, Model, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

/// What a call, or a composite's run, yields, when awaited.
pub type Run<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The served models, as a model that calls others asks them.
pub trait ModelCaller: Send + Sync {
    /// The served model `model` (in `version`, the served one when
    /// `None`), when it is ready to answer now: what it takes and gives.
    fn callee(&self, model: &str, version: Option<&str>) -> Result<Arc<dyn Model>, Error>;

    /// Runs `model` (in `version`) on `inputs`, answering `outputs` (all
    /// of its outputs when empty) under `call` (the calling request's
    /// [`onward`](CallContext::onward), or a context of the call's own
    /// deadline and parameters): through its own scheduler, counted in
    /// its statistics. Dropping the run cancels the call. With
    /// `call.responses` set, a decoupled callee streams its responses
    /// there, and the run ends when it has taken the request.
    fn call<'a>(
        &'a self,
        model: &'a str,
        version: Option<&'a str>,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
    ) -> Run<'a, Vec<Tensor>>;

    /// Loads (or loads again) `model` as the repository API does, from
    /// `config` (JSON) and `files` (`file:PATH` in the model's folder,
    /// and the bytes) when given: Triton's `pb_utils.load_model`.
    fn load_model<'a>(
        &'a self,
        model: &'a str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Run<'a, ()> {
        let _ = (config, files);
        Box::pin(std::future::ready(Err(Error::new(
            ErrorKind::Unsupported,
            format!("loading model '{model}' needs the server's repository"),
        ))))
    }

    /// Stops serving `model`, as the repository API does: Triton's
    /// `pb_utils.unload_model`.
    fn unload_model<'a>(&'a self, model: &'a str) -> Run<'a, ()> {
        Box::pin(std::future::ready(Err(Error::new(
            ErrorKind::Unsupported,
            format!("unloading model '{model}' needs the server's repository"),
        ))))
    }
}

/// Resolves when a call's caller has gone (its client left): the call is
/// then cancelled in the callee's scheduler.
pub type CallerGone<'a> = Pin<&'a mut (dyn Future<Output = ()> + Send + 'a)>;

/// The server's [`ModelCaller`], and the runtime its calls run on, for a
/// model whose code runs on threads of its own (a Python model's keeper)
/// and blocks on a call there.
#[derive(Clone)]
pub struct Caller {
    /// The server's caller.
    pub caller: Arc<dyn ModelCaller>,
    /// The server's runtime, which drives the timers and I/O of a call.
    pub runtime: tokio::runtime::Handle,
}

/// Where the server's [`Caller`] is found once it serves; shared by a
/// registry's clones, so models loaded before it was set reach it too.
#[derive(Clone, Default)]
pub struct CallerSlot(Arc<OnceLock<(Weak<dyn ModelCaller>, tokio::runtime::Handle)>>);

impl fmt::Debug for CallerSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.get().is_some() {
            "CallerSlot(set)"
        } else {
            "CallerSlot(unset)"
        })
    }
}

impl CallerSlot {
    /// Gives the models that hold this slot `caller`, whose calls run on
    /// `runtime`; set once, by the server that serves them.
    pub fn set(&self, caller: Weak<dyn ModelCaller>, runtime: tokio::runtime::Handle) {
        let _ = self.0.set((caller, runtime));
    }

    /// The caller, while the server that set it is up.
    pub fn get(&self) -> Option<Caller> {
        let (caller, runtime) = self.0.get()?;
        Some(Caller {
            caller: caller.upgrade()?,
            runtime: runtime.clone(),
        })
    }
}
