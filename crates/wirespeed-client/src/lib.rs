//! A blocking client of the Open Inference Protocol (KServe V2) REST API,
//! with Triton's binary tensor data extension, over HTTP/1.1 on TCP or a
//! Unix socket.
//!
//! It is the engine of the Python package's `wirespeed.client`, where one
//! call must cost little more than the round trip: the caller's thread
//! writes the request and reads the answer itself (no runtime, no thread
//! hand-off), the connection is kept open between calls, a JSON answer is
//! decoded by [`wirespeed_json::ResponseDecoder`] chunk by chunk as it is
//! read, and binary outputs are filled straight from the socket's bytes.
//!
//! `target.rs` says where the server is; `connection.rs` speaks HTTP/1.1 on
//! one connection (written here, on httparse, because hyper's client needs
//! an async runtime whose thread hand-offs cost more than this whole call);
//! `request.rs` writes an infer request; `answer.rs` reads an infer answer;
//! `client.rs` is the protocol's calls; `error.rs` how each fails.
//!
//! ```no_run
//! use wirespeed_client::{Client, ClientOptions, InferInput, InferRequest};
//! use wirespeed_core::TensorData;
//!
//! let mut client = Client::new("localhost:8000", ClientOptions::default())?;
//! let x = InferInput::binary("x", vec![1, 3], TensorData::Fp32(vec![1.0, 2.0, 3.0]));
//! let answer = client.infer("titanic", "", &InferRequest::new(vec![x]))?;
//! println!("{:?}", answer.response.outputs);
//! # Ok::<(), wirespeed_client::ClientError>(())
//! ```

mod answer;
mod client;
mod connection;
mod error;
mod grpc;
mod request;
mod target;

pub use answer::{decode_answer, Answer};
pub use client::{Client, ClientOptions, Reply};
pub use error::ClientError;
pub use grpc::{message_json, GrpcClient, GrpcOptions};
pub use request::{InferInput, InferRequest, InputData, RequestedOutput};
pub use target::Target;
/// The V2 gRPC API's messages.
pub use wirespeed_proto::inference as pb;
