//! The push decoder for V2 infer requests.
//!
//! Two layers in one state machine. The structural layer, here, walks the
//! JSON grammar byte by byte with a stack of open containers; a token cut by
//! a chunk boundary is finished when the next chunk arrives (bare tokens are
//! carried in a small buffer, strings are scanned resumably), and FP32/FP64
//! runs take a tight loop. The semantic layer, in `request.rs`, knows what
//! each container means in an infer request (`Ctx`) and what the value after
//! the current key is (`Key`), and sends `data` values straight into the
//! input's [`TensorBuilder`].
//!
//! `data` is usually written after `shape` and `datatype`; then its values
//! are decoded as they arrive. JSON keys have no order, so when `data` comes
//! first its text is captured verbatim and decoded when the input's object
//! closes: correct for every key order, fast for the common one.
//!
//! `mod.rs` holds the decoder's state and its entry points; `tokens.rs`
//! walks a chunk: containers, bare tokens and strings cut by chunk
//! boundaries, and the tight loops of float runs.

use wirespeed_core::{
    BinaryInput, DataType, InferRequest, Parameters, RequestedOutput, SharedInput, Tensor,
    TensorBudget,
};

use crate::builder::{BuildError, Float, Scalar, TensorBuilder};
use crate::error::{Category, DecodeError};
use crate::number;
use crate::parallel;
use crate::run;
use crate::string::{Scan, StringScanner};
use crate::DecodeOptions;

mod request;
mod rows;
mod tokens;

pub use rows::Format;

/// The longest bare token (number or literal) carried across chunks.
const MAX_TOKEN_BYTES: usize = 4096;

/// Elements reserved up front when the body size is not known.
const DEFAULT_RESERVE: usize = 1 << 16;

/// Decodes one V2 JSON infer request from byte chunks.
///
/// Feed it chunks of any size with [`feed`](Self::feed), then call
/// [`finish`](Self::finish). After an error the decoder is spent: drop it.
pub struct RequestDecoder {
    options: DecodeOptions,
    /// Offset in the body of the current chunk's first byte.
    base: u64,
    /// Body bytes expected in all, when known; bounds up-front reservations.
    body_len: Option<u64>,
    expect: Expect,
    stack: Vec<Frame>,
    partial: Partial,
    /// A bare token cut by a chunk boundary.
    carry: Vec<u8>,
    /// The content of the string being scanned.
    scratch: Vec<u8>,
    key: Key,
    param_name: String,
    request: RequestState,
    capture: Option<Capture>,
    /// In data-only mode, the tensor being built for the top-level array.
    data_root: Option<TensorBuilder>,
    /// Inputs may carry `binary_data_size` instead of `data`.
    binary_data: bool,
    /// The model's inputs, for TF Serving and Clipper requests.
    named: Option<Box<rows::Named>>,
    /// Decoding an infer response: `outputs` hold the tensors.
    response: Option<Box<ResponseHead>>,
    failed: bool,
}

/// The fields of an infer response that a request does not have.
#[derive(Default)]
struct ResponseHead {
    model_name: Option<String>,
    model_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    /// After `[`: a value or `]`.
    ValueOrEnd,
    /// After `{`: a key or `}`.
    KeyOrEnd,
    Key,
    Colon,
    /// After a value: `,` or the closing bracket.
    AfterValue,
    /// The top-level value is complete; only whitespace may follow.
    Done,
}

enum Partial {
    None,
    Bare {
        start: u64,
    },
    String {
        scanner: StringScanner,
        is_key: bool,
        keep: bool,
        start: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Object,
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Request,
    Input,
    Output,
}

/// What an open container is in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Root,
    Inputs,
    Input,
    Shape,
    /// An array of `data` at this depth (0 = the outer one).
    Data(usize),
    Params(Owner),
    Outputs,
    Output,
    /// An unknown field's value, skipped.
    Skip,
    /// A `data` array captured verbatim until its input's shape and datatype are known.
    Capture,
    /// A TF Serving request object.
    TfRoot,
    /// TF Serving's `instances` array.
    TfInstances,
    /// One instance naming the model's inputs.
    TfInstance,
    /// TF Serving's columnar `inputs` object naming the model's inputs.
    TfColumns,
    /// A Clipper request object.
    ClipperRoot,
    /// A `{"b64": ...}` value at this depth of data.
    B64(usize),
}

struct Frame {
    container: Container,
    ctx: Ctx,
}

/// The field whose value comes next in the current object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    None,
    Id,
    Inputs,
    Outputs,
    Parameters,
    Name,
    Shape,
    Datatype,
    Data,
    Param,
    Instances,
    Input,
    InputBatch,
    /// A model input named in a TF instance or columns object.
    NamedInput,
    B64,
    ModelName,
    ModelVersion,
    /// TF Serving's `signature_name`.
    SignatureName,
    /// Clipper's `uid` (a user's id) and feedback `label`.
    Uid,
    Label,
    Unknown,
}

impl Key {
    /// A bit for duplicate detection, for the keys that have one.
    fn bit(self) -> u16 {
        match self {
            Key::Id => 1,
            Key::Inputs => 2,
            Key::Outputs => 4,
            Key::Parameters => 8,
            Key::Name => 16,
            Key::Shape => 32,
            Key::Datatype => 64,
            Key::Data => 128,
            Key::Instances => 256,
            Key::Input => 512,
            Key::InputBatch => 1024,
            Key::ModelName => 2048,
            Key::ModelVersion => 4096,
            Key::SignatureName => 8192,
            Key::Uid => 16384,
            Key::Label => 32768,
            Key::None | Key::Param | Key::NamedInput | Key::B64 | Key::Unknown => 0,
        }
    }
}

/// Where the next value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Top,
    Id,
    Inputs,
    Outputs,
    Params(Owner),
    Input,
    Output,
    InputName,
    OutputName,
    Shape,
    ShapeDim,
    Datatype,
    Data,
    DataElement(usize),
    Param(Owner),
    TfInstances,
    TfInputs,
    TfInstance,
    /// The value of a named input in a TF instance or columns object.
    NamedValue,
    ClipperInput,
    ClipperBatch,
    /// A top-level string that travels as the request parameter of that
    /// name: Clipper's `version`, TF Serving's `signature_name`.
    Parameter(&'static str),
    B64(usize),
    ModelName,
    ModelVersion,
    Ignore,
}

#[derive(Default)]
struct RequestState {
    id: Option<String>,
    parameters: Parameters,
    inputs: Vec<InputState>,
    finished_inputs: Vec<Tensor>,
    binary_inputs: Vec<BinaryInput>,
    shared_inputs: Vec<SharedInput>,
    input_parameters: Vec<(String, Parameters)>,
    outputs: Vec<RequestedOutput>,
    output_seen: u16,
    seen: u16,
    budget: TensorBudget,
}

struct InputState {
    start: u64,
    seen: u16,
    name: Option<String>,
    shape: Option<Vec<usize>>,
    dims: Vec<usize>,
    datatype: Option<DataType>,
    parameters: Parameters,
    builder: Option<TensorBuilder>,
    /// `data` text captured before shape and datatype were known, with its offset.
    raw: Option<(u64, Vec<u8>)>,
}

struct Capture {
    /// Where this chunk's captured part starts.
    from: usize,
    start: u64,
    bytes: Vec<u8>,
}

#[inline(always)]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// Bytes of a bare token: numbers and the literals.
#[inline(always)]
fn is_bare(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')
}

fn syntax(offset: u64, message: impl Into<String>) -> DecodeError {
    DecodeError::new(Category::Syntax, offset, message)
}

fn schema(offset: u64, message: impl Into<String>) -> DecodeError {
    DecodeError::new(Category::Schema, offset, message)
}

/// The builder that `Ctx::Data` frames feed: the data-only root's, the
/// current named input's (TF Serving, Clipper), or the current V2 input's.
fn builder_of<'a>(
    data_root: &'a mut Option<TensorBuilder>,
    named: &'a mut Option<Box<rows::Named>>,
    inputs: &'a mut [InputState],
) -> Option<&'a mut TensorBuilder> {
    match (data_root, named) {
        (Some(b), _) => Some(b),
        (None, Some(named)) => named.builder(),
        (None, None) => inputs.last_mut().and_then(|i| i.builder.as_mut()),
    }
}

impl RequestDecoder {
    /// A decoder for one request body.
    pub fn new(options: DecodeOptions) -> RequestDecoder {
        RequestDecoder {
            options,
            base: 0,
            body_len: None,
            expect: Expect::Value,
            stack: Vec::new(),
            partial: Partial::None,
            carry: Vec::new(),
            scratch: Vec::new(),
            key: Key::None,
            param_name: String::new(),
            request: RequestState::default(),
            capture: None,
            data_root: None,
            binary_data: false,
            named: None,
            response: None,
            failed: false,
        }
    }

    /// A decoder for one infer response body (Triton's binary tensor data
    /// extension included): its `outputs` are decoded as a request's
    /// `inputs` are.
    pub(crate) fn for_response(options: DecodeOptions) -> RequestDecoder {
        let mut decoder = RequestDecoder::new(options).with_binary_data();
        decoder.response = Some(Box::default());
        decoder
    }

    /// What the tensors are called in messages.
    fn tensor_noun(&self) -> &'static str {
        if self.response.is_some() {
            "output"
        } else {
            "input"
        }
    }

    /// Tells the decoder the body's length (from `Content-Length`), so that
    /// tensors are allocated whole as soon as their shape is known, but never
    /// larger than the body could fill.
    pub fn with_body_len(mut self, len: u64) -> RequestDecoder {
        self.set_body_len(len);
        self
    }

    /// [`with_body_len`](Self::with_body_len), for a decoder already in
    /// place (a boxed one).
    pub fn set_body_len(&mut self, len: u64) {
        self.body_len = Some(len);
    }

    /// Accepts inputs whose data follows the JSON as raw bytes (Triton's
    /// binary tensor data extension): an input with a `binary_data_size`
    /// parameter and no `data` becomes an empty tensor listed in
    /// [`InferRequest::binary_inputs`](wirespeed_core::InferRequest::binary_inputs),
    /// for the caller to fill. Without this, such an input is an error.
    pub fn with_binary_data(mut self) -> RequestDecoder {
        self.binary_data = true;
        self
    }

    /// A decoder for a `data` value alone, into `builder`; offsets start at `base`.
    fn for_data(options: DecodeOptions, builder: TensorBuilder, base: u64) -> RequestDecoder {
        let mut decoder = RequestDecoder::new(options);
        decoder.base = base;
        decoder.data_root = Some(builder);
        decoder
    }

    /// The input name for error messages.
    fn input_name(&self) -> Option<&str> {
        match &self.named {
            Some(named) => named.current_name(),
            None => self.request.inputs.last().and_then(|i| i.name.as_deref()),
        }
    }

    fn build_error(&self, (category, message): BuildError, offset: u64) -> DecodeError {
        if self.named.is_some() {
            return self.builder_error((category, message), offset);
        }
        DecodeError::new(category, offset, message).with_input(self.input_name())
    }

    /// Decodes the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if self.failed {
            return Err(syntax(self.base, "the decoder already failed on this body"));
        }
        let result = self.feed_chunk(chunk);
        self.base += chunk.len() as u64;
        if result.is_err() {
            self.failed = true;
        }
        result
    }
    fn finish_data(mut self) -> Result<TensorBuilder, DecodeError> {
        self.finish_value()?;
        Ok(self
            .data_root
            .take()
            .expect("a data decoder has a root builder"))
    }

    /// Completes a token cut by the end of the body and checks the body is complete.
    fn finish_value(&mut self) -> Result<(), DecodeError> {
        if self.failed {
            return Err(syntax(self.base, "the decoder already failed on this body"));
        }
        match self.partial {
            Partial::Bare { .. } => self.finish_bare()?,
            Partial::String { start, .. } => {
                return Err(syntax(start, "the body ends inside a string"))
            }
            Partial::None => {}
        }
        match self.expect {
            Expect::Done => Ok(()),
            Expect::Value if self.base == 0 => Err(syntax(
                0,
                "empty request body; expected a JSON infer request object",
            )),
            _ => Err(syntax(self.base, "the body ends before the request does")),
        }
    }

    /// Completes the request after the last chunk, with the format it was
    /// in: always [`Format::V2`] but for the TF Serving and Clipper decoders.
    pub fn finish_with_format(self) -> Result<(InferRequest, Format), DecodeError> {
        if self.named.is_some() {
            return self.finish_named();
        }
        self.finish().map(|request| (request, Format::V2))
    }

    /// Completes a response after the last chunk: the response, and its
    /// outputs whose raw bytes follow the JSON.
    pub(crate) fn finish_response(
        mut self,
    ) -> Result<(wirespeed_core::InferResponse, Vec<BinaryInput>), DecodeError> {
        self.finish_value()?;
        let request = self.request;
        if request.seen & Key::Inputs.bit() == 0 {
            return Err(schema(0, "the response has no 'outputs'"));
        }
        let head = self.response.unwrap_or_default();
        let response = wirespeed_core::InferResponse {
            model_name: head.model_name.unwrap_or_default(),
            model_version: head.model_version.unwrap_or_default(),
            id: request.id,
            parameters: request.parameters,
            outputs: request.finished_inputs,
            shared_outputs: Vec::new(),
            dialect: Default::default(),
        };
        Ok((response, request.binary_inputs))
    }

    /// Completes the request after the last chunk.
    pub fn finish(mut self) -> Result<InferRequest, DecodeError> {
        if self.named.is_some() {
            return self.finish_named().map(|(request, _)| request);
        }
        self.finish_value()?;
        let request = self.request;
        if request.seen & Key::Inputs.bit() == 0 {
            return Err(schema(0, "the request has no 'inputs'"));
        }
        Ok(InferRequest {
            id: request.id,
            parameters: request.parameters,
            inputs: request.finished_inputs,
            outputs: request.outputs,
            binary_inputs: request.binary_inputs,
            shared_inputs: request.shared_inputs,
            input_parameters: request.input_parameters,
        })
    }
}

fn describe(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}
