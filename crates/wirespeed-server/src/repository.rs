//! The model repository: one folder per model, each with a `config.toml`
//! and a model file, all loaded at start-up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wirespeed_core::{Error, ErrorKind, Model};

use crate::compute::Gate;
use crate::identity_model::IdentityModel;
use crate::model_config::{Backend, ModelConfig};
use crate::tree_model::TreeModel;

/// Every model the server serves, by name.
pub struct ModelRepository {
    models: BTreeMap<String, Arc<dyn Model>>,
    gates: BTreeMap<String, Gate>,
}

/// Why the repository could not be loaded; names the folder at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct RepositoryError {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl ModelRepository {
    /// Loads every model under `dir`. Fails on the first model that cannot
    /// be loaded: a server that starts must serve everything it was given.
    pub fn load(dir: &Path) -> Result<ModelRepository, RepositoryError> {
        let error = |path: &Path, message: String| RepositoryError {
            path: path.to_owned(),
            message,
        };
        let entries = std::fs::read_dir(dir).map_err(|e| {
            error(
                dir,
                format!(
                    "cannot read the model repository ({e}); pass --models DIR to choose another"
                ),
            )
        })?;
        let mut folders: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        folders.sort();

        let mut models: BTreeMap<String, Arc<dyn Model>> = BTreeMap::new();
        let mut gates = BTreeMap::new();
        for folder in folders {
            let name = folder
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if !is_valid_model_name(&name) {
                return Err(error(
                    &folder,
                    "model names may use only letters, digits, '_', '-' and '.'".into(),
                ));
            }
            let config_path = folder.join("config.toml");
            if !config_path.is_file() {
                return Err(error(
                    &folder,
                    "has no config.toml; every model folder needs one".into(),
                ));
            }
            let config = ModelConfig::load(&config_path).map_err(|m| error(&config_path, m))?;
            if config.delay_ms.is_some() && config.backend != Backend::Identity {
                return Err(error(
                    &config_path,
                    "delay_ms is for identity models only".into(),
                ));
            }
            let concurrency = config
                .max_concurrency
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            if concurrency == 0 {
                return Err(error(
                    &config_path,
                    "max_concurrency must be at least 1".into(),
                ));
            }
            let queue = config.max_queue.unwrap_or(64 * concurrency);
            gates.insert(name.clone(), Gate::new(&name, concurrency, queue));
            let model: Arc<dyn Model> = match config.backend {
                Backend::Xgboost | Backend::Lightgbm => {
                    let model =
                        TreeModel::load(&name, &folder, &config).map_err(|m| error(&folder, m))?;
                    let e = model.ensemble();
                    tracing::info!(
                        model = %name,
                        version = %config.version,
                        platform = config.backend.platform(),
                        objective = e.objective().name(),
                        trees = e.num_trees(),
                        features = e.num_features(),
                        "loaded model"
                    );
                    Arc::new(model)
                }
                Backend::Identity => {
                    let model =
                        IdentityModel::load(&name, &config).map_err(|m| error(&folder, m))?;
                    tracing::info!(model = %name, version = %config.version, platform = config.backend.platform(), "loaded model");
                    Arc::new(model)
                }
            };
            models.insert(name, model);
        }
        if models.is_empty() {
            return Err(error(
                dir,
                "contains no models; each model is a folder with a config.toml".into(),
            ));
        }
        Ok(ModelRepository { models, gates })
    }

    /// The admission gate in front of model `name`'s compute.
    pub(crate) fn gate(&self, name: &str) -> Option<&Gate> {
        self.gates.get(name)
    }

    /// The models, by name.
    pub fn models(&self) -> impl Iterator<Item = (&str, &Arc<dyn Model>)> {
        self.models.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The model `name` in `version` (any served version when `None`), or a
    /// not-found error that says which part did not match.
    pub fn get(&self, name: &str, version: Option<&str>) -> Result<&Arc<dyn Model>, Error> {
        // Names come from URLs and messages; the repository is a map, so
        // nothing can reach a file, but a name that could never be a model
        // folder's is refused as such rather than looked up.
        if !is_valid_model_name(name) {
            let shown: String = name.chars().take(64).collect();
            return Err(Error::malformed(format!(
                "'{}' cannot be a model name: names use only letters, digits, '_', '-' and '.', and are not '.' or '..'",
                shown.escape_debug()
            )));
        }
        let model = self.models.get(name).ok_or_else(|| {
            Error::new(ErrorKind::ModelNotFound, format!("unknown model '{name}'"))
        })?;
        if let Some(v) = version {
            let versions = &model.metadata().versions;
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
        Ok(model)
    }
}

fn is_valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}
