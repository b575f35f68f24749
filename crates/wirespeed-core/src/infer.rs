//! Inference requests and responses, independent of the wire format.

use crate::Tensor;

/// A value of the protocol's `parameters` maps: a string, number or bool.
#[derive(Debug, Clone, PartialEq)]
pub enum ParameterValue {
    /// A JSON bool.
    Bool(bool),
    /// A JSON integer.
    Int(i64),
    /// A JSON number that is not an integer (or does not fit `i64`).
    Float(f64),
    /// A JSON string.
    String(String),
}

/// A `parameters` map, in the order the client wrote it.
pub type Parameters = Vec<(String, ParameterValue)>;

/// An output the client asks for by name.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedOutput {
    /// The output's name.
    pub name: String,
    /// Its per-output parameters.
    pub parameters: Parameters,
}

/// A decoded infer request: inputs are already typed tensors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InferRequest {
    /// The client's request id, echoed in the response.
    pub id: Option<String>,
    /// Request-level parameters.
    pub parameters: Parameters,
    /// The input tensors.
    pub inputs: Vec<Tensor>,
    /// The outputs asked for; empty means all of them.
    pub outputs: Vec<RequestedOutput>,
    /// Inputs whose data follows the JSON as raw bytes (Triton's binary
    /// tensor data extension), in body order. Their tensors in `inputs` are
    /// empty until the bytes are read.
    pub binary_inputs: Vec<BinaryInput>,
}

/// An input whose data is sent as raw bytes after the JSON header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryInput {
    /// Its index in [`InferRequest::inputs`].
    pub input: usize,
    /// Its `binary_data_size`: how many bytes it takes in the body.
    pub size: usize,
}

/// An infer response, ready to encode.
#[derive(Debug, Clone, PartialEq)]
pub struct InferResponse {
    /// The model that answered.
    pub model_name: String,
    /// Its version.
    pub model_version: String,
    /// The request's id, if it had one.
    pub id: Option<String>,
    /// The output tensors, in the order requested.
    pub outputs: Vec<Tensor>,
}
