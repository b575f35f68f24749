//! How a model calls other served models (Triton's BLS): the server's
//! [`ModelCaller`], found through a [`CallerSlot`] once the server serves.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use wirespeed_core::{Error, Parameters, Tensor};

/// Calls a served model from inside another model's code (Triton's BLS,
/// `pb_utils.InferenceRequest(...).exec()`): the server gives one, which
/// runs the call through the callee's scheduler as any request, counted in
/// its statistics. It blocks the calling thread until the answer, so it
/// is called from a thread of the model's own (a Python model's keeper),
/// never from an async runtime's.
pub trait ModelCaller: Send + Sync {
    /// Runs `model` (in `version`, the served one when `None`) on `inputs`,
    /// answering `outputs` (all when empty), before `deadline`; cancelled
    /// when `gone` resolves (the calling request's client left).
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        model: &str,
        version: Option<&str>,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        parameters: Parameters,
        deadline: Option<Instant>,
        gone: CallerGone<'_>,
    ) -> Result<Vec<Tensor>, Error>;

    /// Whether `model` (in `version`, the served one when `None`) is
    /// served and ready.
    fn ready(&self, model: &str, version: Option<&str>) -> bool;

    /// Loads (or loads again) `model` as the repository API does, from
    /// `config` (JSON) and `files` (`file:PATH` in the model's folder,
    /// and the bytes) when given: Triton's `pb_utils.load_model`.
    fn load_model(
        &self,
        model: &str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Error> {
        let _ = (config, files);
        Err(Error::new(
            wirespeed_core::ErrorKind::Unsupported,
            format!("loading model '{model}' needs the server's repository"),
        ))
    }

    /// Stops serving `model`, as the repository API does: Triton's
    /// `pb_utils.unload_model`.
    fn unload_model(&self, model: &str) -> Result<(), Error> {
        Err(Error::new(
            wirespeed_core::ErrorKind::Unsupported,
            format!("unloading model '{model}' needs the server's repository"),
        ))
    }

    /// Runs `model` as [`call`](ModelCaller::call) does, and gives each of
    /// its responses: a decoupled model's stream (Triton's
    /// `exec(decoupled=True)`), or a model's one answer, each with whether
    /// the model flagged it final (a stream may end with the final flag
    /// alone, which is no response). An error before any response is the
    /// call's.
    #[allow(clippy::too_many_arguments)]
    fn call_stream(
        &self,
        model: &str,
        version: Option<&str>,
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
        parameters: Parameters,
        deadline: Option<Instant>,
        gone: CallerGone<'_>,
        each: &mut dyn FnMut(Result<Vec<Tensor>, Error>, bool),
    ) -> Result<(), Error> {
        each(
            self.call(model, version, inputs, outputs, parameters, deadline, gone),
            true,
        );
        Ok(())
    }
}

/// Resolves when a call's caller has gone (its client left): the call is
/// then cancelled in the callee's scheduler.
pub type CallerGone<'a> = std::pin::Pin<&'a mut (dyn std::future::Future<Output = ()> + Send + 'a)>;

/// Where the server's [`ModelCaller`] is found once it serves; shared by a
/// registry's clones, so models loaded before it was set reach it too.
#[derive(Clone, Default)]
pub struct CallerSlot(Arc<OnceLock<Weak<dyn ModelCaller>>>);

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
    /// Gives the models that hold this slot `caller`; set once, by the
    /// server that serves them.
    pub fn set(&self, caller: Weak<dyn ModelCaller>) {
        let _ = self.0.set(caller);
    }

    /// The caller, while the server that set it is up.
    pub fn get(&self) -> Option<Arc<dyn ModelCaller>> {
        self.0.get().and_then(Weak::upgrade)
    }
}
