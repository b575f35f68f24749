//! The registry of backends: the open seam where a new kind of model plugs
//! in. A backend (`wirespeed_backend::Backend`) is named in `config.toml`
//! (`backend = "xgboost"`), reads its own keys of that file, and returns a
//! loaded [`Model`](wirespeed_core::Model). Adding one is a crate (or a
//! file) with a `Backend` impl and one [`Registry::register`] call. A kind
//! of model that answers through other served models (an ensemble, an
//! InferenceGraph, an application) is a `CompositeBackend` instead,
//! registered with [`Registry::register_composite`]: it returns a
//! [`Composite`](wirespeed_backend::Composite), which calls the models it
//! calls through the server's `ModelCaller`.
//!
//! The backends know nothing of the registry: each depends on
//! `wirespeed-backend` alone, and [`Registry::builtin`] is where this
//! build's backends are put together.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Weak};

use wirespeed_backend::{Backend, CallerSlot, CompositeBackend, ModelCaller};

/// A backend of the registry, by what it loads.
#[derive(Clone, Copy)]
pub enum Loader<'a> {
    /// A model that computes.
    Backend(&'a dyn Backend),
    /// A model that answers through others.
    Composite(&'a dyn CompositeBackend),
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
    /// and the backends of this build's features: `onnx` (its crate),
    /// `upstream`, and `python` and `sklearn` (the Python backend's).
    pub fn builtin() -> Registry {
        let mut registry = Registry::new();
        registry.register(wirespeed_trees::Xgboost);
        registry.register(wirespeed_trees::Lightgbm);
        registry.register(wirespeed_trees::Fil);
        registry.register_composite(crate::ensemble::EnsembleBackend);
        registry.register_composite(crate::application::ApplicationBackend);
        registry.register_composite(crate::graph::GraphBackend);
        registry.register(crate::identity::Identity);
        #[cfg(feature = "onnx")]
        registry.register(wirespeed_onnx::Onnx);
        #[cfg(feature = "upstream")]
        registry.register(wirespeed_upstream::UpstreamBackend);
        #[cfg(feature = "python")]
        registry.register(wirespeed_python_backend::Python::default());
        #[cfg(feature = "python")]
        registry.register(wirespeed_python_backend::Sklearn);
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
    /// other models with, its calls run on `runtime`; set once, by the
    /// server that serves them.
    pub fn set_caller(&self, caller: Weak<dyn ModelCaller>, runtime: tokio::runtime::Handle) {
        self.caller.set(caller, runtime);
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
