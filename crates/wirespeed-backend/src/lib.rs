//! The seam every backend of wirespeed plugs into, and the only crate a
//! backend depends on besides `wirespeed-core`: a model's `config.toml`
//! ([`ModelConfig`]: the keys every backend shares, the serving policy they
//! set, and the backend's own keys), the [`Backend`] and
//! [`CompositeBackend`] traits, the [`ModelSource`] a backend loads from,
//! the [`ModelCaller`] a model calls other served models through, and the
//! [`Composite`] a composite backend loads, whose run calls them through
//! it too.
//!
//! ```
//! use wirespeed_backend::ModelConfig;
//!
//! let config = ModelConfig::parse(r#"
//!     backend = "trees"
//!     model_file = "model.json"
//!     max_batch_size = 64
//!
//!     [[inputs]]
//!     name = "features"
//!     datatype = "FP32"
//!     shape = [-1, 12]
//!
//!     [[outputs]]
//!     name = "probability"
//!     datatype = "FP32"
//!     shape = [-1]
//! "#).unwrap();
//! assert_eq!(config.backend, "trees");
//! assert_eq!(config.inputs[0].shape, [-1, 12]);
//! // Keys the seam does not know are the backend's own.
//! assert_eq!(config.backend_keys["model_file"].as_str(), Some("model.json"));
//! ```
//!
//! The backends are crates of their own (`wirespeed-trees`,
//! `wirespeed-onnx`, `wirespeed-python-backend`, `wirespeed-upstream`'s
//! `backend` feature); the repository (`wirespeed-models`) reads folders
//! into a `ModelConfig` and registers this build's backends, so no backend
//! knows the repository or the registry.
//!
//! The serving policy a config sets is read here too, once, for every
//! backend, into one [`Serving`]: [`scheduling`] (`[batching]`, `[slo]`, `[queue]`),
//! [`sequence`] (`[sequence]`), [`warmup`] (`[[warmup]]`) and
//! [`versions`] (`version_policy`).

mod backend;
mod caller;
pub mod composite;
pub mod config;
pub mod scheduling;
pub mod sequence;
mod serving;
mod source;
pub mod versions;
pub mod warmup;

pub use backend::{Backend, CompositeBackend};
pub use caller::{Caller, CallerGone, CallerSlot, ModelCaller, Run};
pub use composite::{Composed, Composite};
pub use config::{ModelConfig, TensorConfig};
pub use scheduling::{
    Adaptive, Batching, BatchingKeys, DefaultOutput, LevelPolicy, PolicyKeys, QueueKeys,
    QueuePolicy, Scheduling, Slo, SloKeys, TimeoutAction,
};
pub use sequence::{Control, ControlKind, Sequencing, State, Strategy};
pub use serving::Serving;
pub use source::ModelSource;
pub use versions::{select_versions, version_folders, VersionPolicy, VersionPolicyKeys};
pub use wirespeed_scheduler::CallContext;
