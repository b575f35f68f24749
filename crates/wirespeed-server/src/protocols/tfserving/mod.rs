//! TF Serving's APIs, which KServe v1 shares: REST (`rest.rs`: status,
//! metadata, `:predict`, `:classify`, `:regress`, `/v1/models`) and gRPC
//! (`grpc.rs`: `PredictionService` and `ModelService`), with the
//! `tf.Example` inputs of classify and regress (`examples.rs`).

pub(crate) mod examples;
pub(crate) mod grpc;
pub(crate) mod rest;
