//! What a backend is given to load one model: its folder, its config, its
//! own keys of that config (each read at most once, the rest refused by
//! name), the server's CPU pool and the slot of the server's caller.

use std::cell::Cell;
use std::path::Path;

use serde::de::DeserializeOwned;
use wirespeed_core::CpuPool;

use crate::config::{ModelConfig, TensorConfig};
use crate::CallerSlot;

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
    pub fn unread_keys(&self, backend: &str) -> Result<(), String> {
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
