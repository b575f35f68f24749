//! The model repository of wirespeed: a folder of models, each in a folder
//! of its own, read by the layout its files tell (`layout.rs`) into a
//! [`ModelConfig`], and the [`Registry`] of backends that load them.
//!
//! A backend (a crate of its own, on the seam `wirespeed-backend`) reads
//! its own keys of the config and returns a [`Model`](wirespeed_core::Model);
//! the server does the rest (scheduling, protocols). [`Registry::builtin`]
//! puts this build's backends together: the tree ensembles of
//! `wirespeed-trees` (`xgboost`, `lightgbm`, `fil`) and `identity`, and,
//! each behind a cargo feature of this crate (all on by default), `onnx`
//! (`wirespeed-onnx`; `onnxruntime` adds ONNX Runtime as an engine),
//! `python` (`wirespeed-python-backend`: worker processes), `upstream` (a
//! model on another server) and `text` (`wirespeed-text`); a program that
//! embeds the server can [`Registry::register`] its own. No backend
//! imports this crate.
//!
//! The composites are here too, each in one folder (its spec reader,
//! checks, learned state and run): [`Ensemble`] (`ensemble/`, Triton's),
//! [`InferenceGraph`] (`graph/`, KServe's) and [`Application`]
//! (`application/`, Clipper's selection layer). Each is a
//! [`Composite`] that calls other served models through the
//! [`ModelCaller`] the server gives its run (`composites.rs` holds what they share).
//!
//! ```no_run
//! use wirespeed_core::CpuPool;
//! use wirespeed_models::{load_repository, Registry};
//!
//! let pool = CpuPool::new(2)?;
//! let models = load_repository(&["models".into()], &Registry::builtin(), &pool)?;
//! for loaded in &models {
//!     println!("{} ({})", loaded.name, loaded.model.metadata().platform);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod application;
mod composites;
mod ensemble;
mod graph;
mod identity;
mod kserve;
mod layout;
mod loaded;
mod mlserver;
mod pbtxt;
mod registry;
mod repository;
mod reshape;
#[cfg(test)]
mod testdir;
mod warmup;

pub use application::{Application, Candidate, Choice, Draw, SelectionReport, Selector};
pub use composites::check_composites;
pub use ensemble::{Ensemble, Step};
pub use graph::{Graph, GraphNode, GraphStep, InferenceGraph, Router, StepData, StepTarget, Taken};
pub use identity::IdentityModel;
pub use loaded::{LoadedModel, OutputLabels};
pub use mlserver::is_repository as is_mlserver_repository;
pub use mlserver::listen_addresses as mlserver_listen_addresses;
pub use registry::{Loader, Registry};
pub use repository::{
    is_model_folder, is_valid_model_name, load_model, load_repository, model_folders,
    model_folders_in, RepositoryError,
};
pub use wirespeed_backend::{select_versions, version_folders, VersionPolicy, VersionPolicyKeys};
pub use wirespeed_backend::{
    Adaptive, Batching, BatchingKeys, DefaultOutput, LevelPolicy, PolicyKeys, QueueKeys,
    QueuePolicy, Scheduling, Slo, SloKeys, TimeoutAction,
};
pub use wirespeed_backend::{
    Backend, CallContext, Caller, CallerGone, CallerSlot, Composed, Composite, CompositeBackend,
    ModelCaller, ModelConfig, ModelSource, Run, TensorConfig,
};
pub use wirespeed_backend::{Control, ControlKind, Sequencing, Serving, State, Strategy};
#[cfg(feature = "onnx")]
pub use wirespeed_onnx::{supported_operators, OnnxModel};
pub use wirespeed_proto::model_config::data_type as triton_data_type;
#[cfg(feature = "python")]
pub use wirespeed_python_backend::{
    custom_metrics, CustomFamily, Labels, MetricKind, PythonModel, SeriesValue,
};
pub use wirespeed_trees::TreeModel;
#[cfg(feature = "upstream")]
pub use wirespeed_upstream::UpstreamModel;
