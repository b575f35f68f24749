//! The seam every backend of wirespeed plugs into, and the only crate a
//! backend depends on besides `wirespeed-core`: a model's `config.toml`
//! ([`ModelConfig`]: the keys every backend shares, the serving policy they
//! set, and the backend's own keys), the [`Backend`] and
//! [`CompositeBackend`] traits, the [`ModelSource`] a backend loads from,
//! and the [`ModelCaller`] a model calls other served models through.
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
pub mod config;
pub mod scheduling;
pub mod sequence;
mod serving;
mod source;
pub mod versions;
pub mod warmup;

pub use backend::{Backend, CompositeBackend};
pub use caller::{CallerGone, CallerSlot, ModelCaller};
pub use config::{ModelConfig, TensorConfig};
pub use scheduling::{
    Adaptive, Batching, BatchingKeys, DefaultOutput, LevelPolicy, PolicyKeys, QueueKeys,
    QueuePolicy, Scheduling, Slo, SloKeys, TimeoutAction,
};
pub use sequence::{Control, ControlKind, Sequencing, State, Strategy};
pub use serving::Serving;
pub use source::ModelSource;
pub use versions::{select_versions, version_folders, VersionPolicy, VersionPolicyKeys};
