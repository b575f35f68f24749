//! The vocabulary of wirespeed: tensors and their datatypes, inference
//! requests and responses, the [`Model`] trait every backend implements, and
//! the one [`Error`] taxonomy every front end maps to its status codes.
//!
//! This crate is plain data and traits: no async runtime (tokio's
//! channel alone, for a model's stream of responses), no HTTP, no codec.
//! Two shared pieces sit here because every other crate needs them:
//! the one set of [`RequestLimits`] that every protocol checks, and the
//! [`CpuPool`] that every part that computes shares.
//!
//! ```
//! use wirespeed_core::{DataType, ModelMetadata, Tensor, TensorData, TensorSpec};
//!
//! let metadata = ModelMetadata {
//!     name: "titanic".into(),
//!     versions: vec!["1".into()],
//!     platform: "xgboost_json".into(),
//!     inputs: vec![TensorSpec { name: "features".into(), datatype: DataType::Fp32, shape: vec![-1, 12], optional: false }],
//!     outputs: vec![],
//! };
//! let row = Tensor::new("features", vec![1, 12], TensorData::Fp32(vec![0.0; 12]));
//! assert!(metadata.check_inputs(&[row]).is_ok());
//! ```

pub mod batch;
mod datatype;
mod error;
mod infer;
pub mod lent;
mod limits;
mod model;
mod pages;
mod pool;
pub mod raw;
pub mod shared_heap;
mod stream;
mod tensor;
mod text;
mod trace_context;

pub use datatype::{DataType, UnknownDataType};
pub use error::{Error, ErrorKind, Fault};
pub use half::{bf16, f16};
pub use infer::{
    is_transport_parameter, BinaryInput, InferRequest, InferResponse, ParameterValue, Parameters,
    RequestedOutput, SharedInput, SharedOutput, SharedRef, JSON_BODY, JSON_ENDPOINT,
};
pub use infer::{
    lift_response_parameters, written_shape, written_shape_parameter, Dialect, RESPONSE_PARAMETER,
    WRITTEN_SHAPE,
};
pub use limits::{LimitError, RequestLimits, TensorBudget};
pub use model::{
    format_shape, Binding, ClassScores, ClassificationHead, Execution, Executions, Heads,
    InferCall, InferFuture, Model, ModelMetadata, TensorSpec,
};
pub use pool::CpuPool;
pub use stream::{
    response_channel, Gone, OneResponse, ResponseReceiver, ResponseSender, Streamed, STREAM_BUFFER,
};
pub use tensor::{element_count, Tensor, TensorData};
pub use text::TextModel;
pub use trace_context::TraceContext;
