//! The Open Inference Protocol (KServe V2) with Triton's extensions, on
//! REST (`rest.rs`, the infer codec) and gRPC (`grpc.rs`, `grpc_infer.rs`,
//! `convert.rs`; `grpc_frames.rs` reads `ModelInfer` from its frames), and the extension endpoints: metadata and model
//! configuration, health, statistics, system shared memory, the model
//! repository, the generate extension (`generate.rs`), and those known and
//! not served (`missing.rs`); what a request's parameters may hold, and
//! the headers forwarded into them (`parameters.rs`).

pub(crate) mod convert;
pub(crate) mod generate;
pub(crate) mod grpc;
pub(crate) mod grpc_frames;
pub(crate) mod grpc_infer;
pub(crate) mod health;
pub(crate) mod metadata;
pub(crate) mod missing;
pub(crate) mod model_config;
pub(crate) mod parameters;
pub(crate) mod repository;
pub(crate) mod rest;
pub(crate) mod shared_memory;

/// The protocol extensions this server implements, as server metadata
/// lists them on REST and gRPC.
pub(crate) const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "classification",
    "model_configuration",
    "model_repository",
    "parameters",
    "schedule_policy",
    "statistics",
    "system_shared_memory",
];
