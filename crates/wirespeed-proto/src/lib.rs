//! The wire protocols wirespeed speaks over gRPC, as Rust types: prost
//! messages, tonic clients and tonic servers, generated from the `.proto`
//! files in this crate's `proto/` folder into `src/generated/`
//! (`tests/generated.rs` keeps the two in step).
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
    include!("generated/inference.rs");

    pub use crate::stream_frame::ModelStreamInferResponse;
}

/// TensorFlow's tensor, shape and signature messages, as TF Serving's
/// requests carry them (package `tensorflow`).
pub mod tensorflow {
    #![allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
    include!("generated/tensorflow.rs");

    /// TF Serving's gRPC API (package `tensorflow.serving`):
    /// `PredictionService` and `ModelService`, their messages, clients
    /// and servers.
    pub mod serving {
        #![allow(missing_docs, unreachable_pub, clippy::all, rust_2018_idioms)]
        include!("generated/tensorflow.serving.rs");
    }
}

#[cfg(feature = "model-config")]
pub mod model_config;
mod stream_frame;
pub mod tensors;
pub mod tf_tensors;

/// The encoded `FileDescriptorSet` of TF Serving's protos.
pub const TF_FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tf_descriptors.bin"));

/// The encoded `FileDescriptorSet` of the Open Inference Protocol's protos,
/// for gRPC server reflection (so `grpcurl` can list and call the services).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
