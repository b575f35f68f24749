//! Inference requests and responses, independent of the wire format.

use crate::Tensor;

/// The one input, and the one output, of a request whose JSON body the
/// model reads itself, the project's one way of passing JSON through a
/// tensor: a KServe predictor's v1 face (and TF Serving's REST to a custom
/// runtime), which gets the body as its `predict`'s dict and answers the
/// dict it returns; an inference graph's payload between its steps; an
/// OpenAI request forwarded to another server's OpenAI API, and its
/// answer (a stream's events one response each). A BYTES tensor of one
/// element: the body, or the answer, as JSON text.
pub const JSON_BODY: &str = "$json";

/// The request parameter that names the endpoint a [`JSON_BODY`] was
/// posted to, in its protocol's words, where the model answers more than
/// one (OpenAI's `chat/completions`, `completions` and `embeddings`).
pub const JSON_ENDPOINT: &str = "$endpoint";

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
    /// Inputs whose data is in a shared-memory region (Triton's shared
    /// memory extensions). Their tensors in `inputs` are empty until the
    /// region is read.
    pub shared_inputs: Vec<SharedInput>,
    /// The inputs' own `parameters` that are not about where their data
    /// lies (MLServer's `content_type`, ...), by input name; only inputs
    /// that have some.
    pub input_parameters: Vec<(String, Parameters)>,
}

/// The parameter under which a BYTES tensor carries its shape as written,
/// when MLServer's convention made its last dimension its elements'
/// length in bytes (a string of 59 bytes sent as `shape: [59]`, two of
/// 11 as `[2, 11]`): the tensor itself holds the elements, shaped without
/// that dimension; an MLServer runtime is handed the shape as the client
/// wrote it, and the shape a runtime writes for an output is the one
/// answered. `$` starts no parameter a protocol decodes, and the
/// encoders write none that starts with it.
pub const WRITTEN_SHAPE: &str = "$shape";

/// The start of an output's parameter that is its response's: a model that
/// answers tensors alone gives its response-level parameters this way (an
/// MLServer runtime's response `content_type`, `pd` from its pandas codec),
/// and the engine moves them to the response, without the prefix.
pub const RESPONSE_PARAMETER: &str = "$response.";

/// Moves the response-level parameters the outputs carry
/// ([`RESPONSE_PARAMETER`]) into `response`, once each.
pub fn lift_response_parameters(outputs: &mut [crate::Tensor], response: &mut Parameters) {
    for output in outputs {
        if output.parameters.is_empty() {
            continue;
        }
        output.parameters.retain(|(key, value)| {
            let Some(key) = key.strip_prefix(RESPONSE_PARAMETER) else {
                return true;
            };
            if !response.iter().any(|(k, _)| k == key) {
                response.push((key.to_owned(), value.clone()));
            }
            false
        });
    }
}

/// The shape `parameters` carry under [`WRITTEN_SHAPE`], if they do.
pub fn written_shape(parameters: &Parameters) -> Option<Vec<usize>> {
    let (_, ParameterValue::String(dims)) = parameters.iter().find(|(k, _)| k == WRITTEN_SHAPE)?
    else {
        return None;
    };
    if dims.is_empty() {
        return Some(Vec::new());
    }
    dims.split(',').map(|d| d.parse().ok()).collect()
}

/// The [`WRITTEN_SHAPE`] parameter for `shape`.
pub fn written_shape_parameter(shape: &[usize]) -> (String, ParameterValue) {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    (
        WRITTEN_SHAPE.to_owned(),
        ParameterValue::String(dims.join(",")),
    )
}

/// Whether an input's parameter says where its data lies (the binary data
/// and shared memory extensions'), which the server acts on and a model
/// never sees.
pub fn is_transport_parameter(key: &str) -> bool {
    key == "binary_data_size" || key.starts_with("shared_memory_")
}

/// Where a tensor lies in a registered shared-memory region: the
/// `shared_memory_region`, `shared_memory_offset` and
/// `shared_memory_byte_size` parameters of an input or requested output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRef {
    /// The region's registered name.
    pub region: String,
    /// Where in the region the tensor starts.
    pub offset: usize,
    /// How many bytes it takes (an output: how many it may take).
    pub byte_size: usize,
}

impl SharedRef {
    /// Reads the shared-memory parameters from `parameters`: `None` when
    /// there is no `shared_memory_region`; an error naming the parameter
    /// when one is missing or of the wrong kind.
    pub fn from_parameters(parameters: &Parameters) -> Result<Option<SharedRef>, String> {
        let get = |key: &str| parameters.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let Some(region) = get("shared_memory_region") else {
            if let Some(key) = ["shared_memory_byte_size", "shared_memory_offset"]
                .into_iter()
                .find(|k| get(k).is_some())
            {
                return Err(format!("'{key}' is given without 'shared_memory_region'"));
            }
            return Ok(None);
        };
        let ParameterValue::String(region) = region else {
            return Err(format!(
                "'shared_memory_region' must be a region's name, found {region:?}"
            ));
        };
        let size = |key: &str, default: Option<usize>| match get(key) {
            None => {
                default.ok_or_else(|| format!("'{key}' is required with 'shared_memory_region'"))
            }
            Some(ParameterValue::Int(n)) if *n >= 0 => {
                usize::try_from(*n).map_err(|_| format!("'{key}' is too large: {n}"))
            }
            Some(other) => Err(format!(
                "'{key}' must be a non-negative integer, found {other:?}"
            )),
        };
        Ok(Some(SharedRef {
            region: region.clone(),
            offset: size("shared_memory_offset", Some(0))?,
            byte_size: size("shared_memory_byte_size", None)?,
        }))
    }
}

/// An input read from shared memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedInput {
    /// Its index in [`InferRequest::inputs`].
    pub input: usize,
    /// Where its bytes are.
    pub at: SharedRef,
}

/// An output written to shared memory rather than into the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedOutput {
    /// Its index in [`InferResponse::outputs`].
    pub output: usize,
    /// Where it was written.
    pub at: SharedRef,
    /// The bytes written.
    pub written: usize,
}

/// An input whose data is sent as raw bytes after the JSON header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryInput {
    /// Its index in [`InferRequest::inputs`].
    pub input: usize,
    /// Its `binary_data_size`: how many bytes it takes in the body.
    pub size: usize,
}

/// Whose server a model's clients know: where the V2 servers answer the
/// same protocol differently (empty fields, ids, stream framing, BYTES
/// shapes), a model is answered as its own server answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dialect {
    /// Triton's (and wirespeed's own folders'): absent fields are left
    /// out.
    #[default]
    Triton,
    /// MLServer's: `parameters` always written (`{}` when empty), an id
    /// made when the request has none, BYTES shapes whose last dimension
    /// is the elements' length, streams of plain infer responses.
    Mlserver,
    /// KServe's: an absent `model_version` and empty `parameters` (the
    /// response's and each output's) written as `null`.
    Kserve,
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
    /// Response-level parameters: `default` (and `default_explanation`)
    /// when the outputs are the model's defaults, given because it would
    /// have missed its latency objective.
    pub parameters: Parameters,
    /// The output tensors, in the order requested.
    pub outputs: Vec<Tensor>,
    /// Outputs written to shared memory: the answer carries their
    /// `shared_memory_*` parameters instead of their data.
    pub shared_outputs: Vec<SharedOutput>,
    /// Whose server's conventions the answer follows.
    pub dialect: Dialect,
}

impl InferResponse {
    /// Where output `index` was written, if it went to shared memory.
    pub fn shared_output(&self, index: usize) -> Option<&SharedOutput> {
        self.shared_outputs.iter().find(|s| s.output == index)
    }
}
