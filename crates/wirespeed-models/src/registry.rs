//! The registry of backends: the open seam where a new kind of model plugs
//! in. A backend is named in `config.toml` (`backend = "xgboost"`), reads
//! its own keys of that file, and returns a loaded [`Model`]. Adding one is
//! one file with a [`Backend`] impl and one [`Registry::register`] call.
//! A kind of model that answers through other served models (an ensemble,
//! an InferenceGraph, an application) is a [`CompositeBackend`] instead,
//! registered with [`Registry::register_composite`]: it returns a
//! [`Composite`], which the server runs with that kind's runner.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use serde::de::DeserializeOwned;
use wirespeed_core::{Composite, CpuPool, Error, Model, Parameters, Tensor};

use crate::config::{ModelConfig, TensorConfig};

/// A kind of model: reads a model folder and its config, and loads the
/// model.
pub trait Backend: Send + Sync {
    /// The name `config.toml` gives it: `backend = "<name>"`.
    fn name(&self) -> &'static str;

    /// Loads the model `source` describes. The error is shown with the
    /// model's folder, so it need not name it.
    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String>;
}

/// A kind of model that computes nothing itself: its folder names other
/// served models, and the server answers through them.
pub trait CompositeBackend: Send + Sync {
    /// The name `config.toml` gives it: `backend = "<name>"`.
    fn name(&self) -> &'static str;

    /// Reads the composite `source` describes. The models it calls are
    /// checked against the served ones by the server, not here.
    fn load(&self, source: &ModelSource<'_>) -> Result<Composite, String>;
}

/// A backend of the registry, by what it loads.
#[derive(Clone, Copy)]
pub enum Loader<'a> {
    /// A model that computes.
    Backend(&'a dyn Backend),
    /// A model that answers through others.
    Composite(&'a dyn CompositeBackend),
}

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
    /// The caller, while the server that set it is up.
    pub fn get(&self) -> Option<Arc<dyn ModelCaller>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

/// What a backend gets to load one model: the folder, the shared config,
/// its own keys, and the server's CPU pool.
pub struct ModelSource<'a> {
    name: &'a str,
    folder: &'a Path,
    config: &'a ModelConfig,
    pool: &'a CpuPool,
    keys_read: Cell<bool>,
    tensor_keys_read: Cell<bool>,
    caller: CallerSlot,
}

impl<'a> ModelSource<'a> {
    /// A source for model `name` in `folder`.
    pub fn new(
        name: &'a str,
        folder: &'a Path,
        config: &'a ModelConfig,
        pool: &'a CpuPool,
    ) -> ModelSource<'a> {
        ModelSource {
            name,
            folder,
            config,
            pool,
            keys_read: Cell::new(false),
            tensor_keys_read: Cell::new(false),
            caller: CallerSlot::default(),
        }
    }

    /// The same source, whose model may call others through `caller`.
    pub fn with_caller(mut self, caller: CallerSlot) -> ModelSource<'a> {
        self.caller = caller;
        self
    }

    /// Where the model finds the server's [`ModelCaller`] to call other
    /// models (none outside a server).
    pub fn caller(&self) -> &CallerSlot {
        &self.caller
    }

    /// The model's name: its folder's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The model's folder; files named in the config are relative to it.
    pub fn folder(&self) -> &Path {
        self.folder
    }

    /// The file the config names under `key` (`model_file`, `ca_file`):
    /// relative to the folder, and inside it when the config came with a
    /// load request.
    pub fn file(&self, key: &str, name: &str) -> Result<std::path::PathBuf, String> {
        self.config.file(self.folder, key, name)
    }

    /// The shared part of the config: version, inputs, outputs.
    pub fn config(&self) -> &ModelConfig {
        self.config
    }

    /// The server's CPU pool, for models that split work over threads.
    pub fn pool(&self) -> &CpuPool {
        self.pool
    }

    /// The backend's own top-level keys, parsed into `T`. Give `T`
    /// `#[serde(deny_unknown_fields)]`, so that a misspelt key is an error
    /// that names it.
    pub fn keys<T: DeserializeOwned>(&self) -> Result<T, String> {
        self.keys_read.set(true);
        parse_keys(&self.config.backend_keys)
    }

    /// The backend's own keys of one input or output, parsed into `T`.
    pub fn tensor_keys<T: DeserializeOwned>(&self, tensor: &TensorConfig) -> Result<T, String> {
        self.tensor_keys_read.set(true);
        parse_keys(&tensor.backend_keys).map_err(|e| format!("tensor '{}': {e}", tensor.name))
    }

    /// Keys no one read: the backend takes none there, so they are
    /// mistakes. Called by the repository once the backend has loaded.
    pub(crate) fn unread_keys(&self, backend: &str) -> Result<(), String> {
        let unread = |table: &toml::Table, whose: String| match table.keys().next() {
            Some(key) => Err(format!(
                "unknown key '{key}'{whose}: the {backend} backend does not take it"
            )),
            None => Ok(()),
        };
        if !self.keys_read.get() {
            unread(&self.config.backend_keys, String::new())?;
        }
        if !self.tensor_keys_read.get() {
            for tensor in self.config.inputs.iter().chain(&self.config.outputs) {
                unread(
                    &tensor.backend_keys,
                    format!(" in tensor '{}'", tensor.name),
                )?;
            }
        }
        Ok(())
    }
}

fn parse_keys<T: DeserializeOwned>(table: &toml::Table) -> Result<T, String> {
    T::deserialize(table.clone()).map_err(|e| e.to_string().trim_end().to_owned())
}

/// The backends a server can load models with, by name.
#[derive(Clone, Default)]
pub struct Registry {
    backends: BTreeMap<&'static str, Entry>,
    /// Triton's `--disable-auto-complete-config`: no configuration is
    /// completed from a model's files or code.
    no_auto_complete: bool,
    /// The server's caller, for models that call others.
    caller: CallerSlot,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The backends wirespeed ships: `xgboost`, `lightgbm`, `fil` and
    /// `identity`, the composites `ensemble`, `application` and `graph`,
    /// and the backends of this build's features: `onnx`, `upstream` and
    /// `python`.
    pub fn builtin() -> Registry {
        let mut registry = Registry::new();
        registry.register(crate::trees::Xgboost);
        registry.register(crate::trees::Lightgbm);
        registry.register(crate::fil::Fil);
        registry.register_composite(crate::ensemble::Ensemble);
        registry.register_composite(crate::application::Application);
        registry.register_composite(crate::graph::GraphBackend);
        registry.register(crate::identity::Identity);
        #[cfg(feature = "onnx")]
        registry.register(crate::onnx::Onnx);
        #[cfg(feature = "upstream")]
        registry.register(crate::upstream::UpstreamBackend);
        #[cfg(feature = "python")]
        registry.register(crate::python::Python);
        #[cfg(feature = "python")]
        registry.register(crate::python::Sklearn);
        registry
    }

    /// Whether configurations are completed from the models' files and
    /// code (Triton's auto-complete; on unless turned off).
    pub fn auto_complete(&self) -> bool {
        !self.no_auto_complete
    }

    /// Turns Triton's auto-complete on or off
    /// (`--disable-auto-complete-config`).
    pub fn set_auto_complete(&mut self, on: bool) {
        self.no_auto_complete = !on;
    }

    /// Gives the models this registry loads (and loaded) `caller` to call
    /// other models with; set once, by the server that serves them.
    pub fn set_caller(&self, caller: Weak<dyn ModelCaller>) {
        let _ = self.caller.0.set(caller);
    }

    /// Where the models this registry loads find the server's caller.
    pub fn caller(&self) -> &CallerSlot {
        &self.caller
    }

    /// Adds `backend`, replacing one of the same name.
    pub fn register(&mut self, backend: impl Backend + 'static) {
        self.backends
            .insert(backend.name(), Entry::Backend(Arc::new(backend)));
    }

    /// Adds the composite `backend`, replacing a backend of the same name.
    pub fn register_composite(&mut self, backend: impl CompositeBackend + 'static) {
        self.backends
            .insert(backend.name(), Entry::Composite(Arc::new(backend)));
    }

    /// The backend called `name`, or an error that lists the known ones.
    pub fn get(&self, name: &str) -> Result<Loader<'_>, String> {
        self.backends
            .get(name)
            .map(|entry| match entry {
                Entry::Backend(b) => Loader::Backend(b.as_ref()),
                Entry::Composite(c) => Loader::Composite(c.as_ref()),
            })
            .ok_or_else(|| {
                let known: Vec<&str> = self.backends.keys().copied().collect();
                if let Some(feature) = left_out(name) {
                    return format!(
                        "backend '{name}' is not in this build of wirespeed (built without the \
                     '{feature}' feature); this server has {}",
                        known.join(", ")
                    );
                }
                format!(
                    "unknown backend '{name}'; this server has {}",
                    known.join(", ")
                )
            })
    }
}

#[derive(Clone)]
enum Entry {
    Backend(Arc<dyn Backend>),
    Composite(Arc<dyn CompositeBackend>),
}

/// The cargo feature of a built-in backend that this build left out.
fn left_out(name: &str) -> Option<&'static str> {
    let left_out: &[(&str, &str)] = &[
        #[cfg(not(feature = "onnx"))]
        ("onnx", "onnx"),
        #[cfg(not(feature = "upstream"))]
        ("upstream", "upstream"),
        #[cfg(not(feature = "python"))]
        ("python", "python"),
    ];
    left_out
        .iter()
        .find(|(backend, _)| *backend == name)
        .map(|(_, feature)| *feature)
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.backends.keys()).finish()
    }
}
