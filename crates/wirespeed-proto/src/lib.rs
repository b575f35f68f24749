//! The wire protocols wirespeed speaks over gRPC, as Rust types: prost
//! messages, tonic clients and tonic servers, generated at build time from
//! the `.proto` files in this crate's `proto/` folder.
//!
//! The server implements the services; the load generator and the upstream
//! client call them. Keeping them here means neither depends on the other.
//! [`tensors`] converts their tensors and parameters to wirespeed's own.
//!
//! ```
//! use wirespeed_proto::inference::{ModelInferRequest, model_infer_request::InferInputTensor};
//!
//! let request = ModelInferRequest {
//!     model_name: "titanic".into(),
//!     inputs: vec![InferInputTensor {
//!         name: "features".into(),
//!         datatype: "FP32".into(),
//!         shape: vec![1, 12],
//!         ..Default::default()
//!     }],
//!     raw_input_contents: vec![vec![0u8; 48].into()],
//!     ..Default::default()
//! };
//! assert_eq!(request.raw_input_contents[0].len(), 48);
//! ```

/// The Open Inference Protocol (KServe V2) over gRPC, in Triton's package
/// `inference`: `GRPCInferenceService`, its messages, client and server.
pub mod inference {
    #![allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
    tonic::include_proto!("inference");
}

pub mod tensors;

/// The encoded `FileDescriptorSet` of every proto here, for gRPC server
/// reflection (so `grpcurl` can list and call the services).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
