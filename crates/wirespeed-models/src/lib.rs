//! The model repository of wirespeed: a folder of models, each in a folder
//! of its own with a `config.toml` that names its backend, and the
//! [`Registry`] of backends that load them.
//!
//! A backend reads its own keys of `config.toml` and returns a
//! [`Model`](wirespeed_core::Model); the server does the rest (scheduling,
//! protocols). The built-in backends are the tree ensembles of
//! `wirespeed-trees` (`xgboost`, `lightgbm`) and `identity`, and, each
//! behind a cargo feature of its own (all on by default), `onnx` (tract;
//! `onnxruntime` adds ONNX Runtime as an engine), `python` (worker
//! processes) and `upstream` (a model on another server); a program that
//! embeds the server can [`Registry::register`] its own.
//!
//! ```no_run
//! use wirespeed_core::CpuPool;
//! use wirespeed_models::{load_repository, Registry};
//!
//! let pool = CpuPool::new(2)?;
//! let models = load_repository("models".as_ref(), &Registry::builtin(), &pool)?;
//! for loaded in &models {
//!     println!("{} ({})", loaded.name, loaded.model.metadata().platform);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod application;
mod config;
mod ensemble;
mod fil;
mod graph;
mod identity;
mod kserve;
mod layout;
mod loaded;
mod mlserver;
#[cfg(feature = "onnx")]
mod onnx;
mod pbtxt;
#[cfg(feature = "python")]
mod python;
mod registry;
mod repository;
mod reshape;
mod scheduling;
mod sequence;
#[cfg(test)]
mod testdir;
#[cfg(feature = "text")]
mod text;
mod trees;
#[cfg(feature = "upstream")]
mod upstream;
mod versions;
mod warmup;

pub use application::check_candidates;
pub use config::{ModelConfig, TensorConfig};
pub use ensemble::{check_composite, check_ensembles, check_steps};
pub use identity::IdentityModel;
pub use loaded::{LoadedModel, OutputLabels};
pub use mlserver::is_repository as is_mlserver_repository;
pub use mlserver::listen_addresses as mlserver_listen_addresses;
#[cfg(feature = "onnx")]
pub use onnx::{supported_operators, OnnxModel};
pub use pbtxt::data_type as triton_data_type;
#[cfg(feature = "python")]
pub use python::{custom_metrics, CustomFamily, Labels, MetricKind, PythonModel, SeriesValue};
pub use registry::{
    Backend, CallerGone, CallerSlot, CompositeBackend, Loader, ModelCaller, ModelSource, Registry,
};
pub use repository::{
    is_model_folder, is_valid_model_name, load_model, load_repository, model_folders,
    RepositoryError,
};
pub use scheduling::{
    Adaptive, Batching, BatchingKeys, DefaultOutput, LevelPolicy, PolicyKeys, QueueKeys,
    QueuePolicy, Scheduling, Slo, SloKeys, TimeoutAction,
};
pub use sequence::{Control, ControlKind, Sequencing, State, Strategy};
pub use trees::TreeModel;
#[cfg(feature = "upstream")]
pub use upstream::UpstreamModel;
pub use versions::{select_versions, version_folders, VersionPolicy, VersionPolicyKeys};
