//! The push decoder for V2 infer requests.
//!
//! Two layers in one state machine. The structural layer walks the JSON
//! grammar byte by byte with a stack of open containers; a token cut by a
//! chunk boundary is finished when the next chunk arrives (bare tokens are
//! carried in a small buffer, strings are scanned resumably). The semantic
//! layer knows what each container means in an infer request (`Ctx`) and what
//! the value after the current key is (`Key`), and sends `data` values
//! straight into the input's [`TensorBuilder`].
//!
//! `data` is usually written after `shape` and `datatype`; then its values
//! are decoded as they arrive. JSON keys have no order, so when `data` comes
//! first its text is captured verbatim and decoded when the input's object
//! closes: correct for every key order, fast for the common one.

use wirespeed_core::{
    element_count, format_shape, DataType, InferRequest, ParameterValue, Parameters,
    RequestedOutput, Tensor,
};

use crate::builder::{BuildError, Float, Scalar, TensorBuilder};
use crate::error::{Category, DecodeError};
use crate::number::{self, Shape};
use crate::parallel;
use crate::string::{Scan, StringScanner};
use crate::DecodeOptions;

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
    failed: bool,
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
            Key::None | Key::Param | Key::Unknown => 0,
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
    Ignore,
}

#[derive(Default)]
struct RequestState {
    id: Option<String>,
    parameters: Parameters,
    inputs: Vec<InputState>,
    finished_inputs: Vec<Tensor>,
    outputs: Vec<RequestedOutput>,
    output_seen: u16,
    seen: u16,
    elements: usize,
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

/// The builder that `Ctx::Data` frames feed: the data-only root's, or the
/// current input's.
fn builder_of<'a>(
    data_root: &'a mut Option<TensorBuilder>,
    inputs: &'a mut [InputState],
) -> Option<&'a mut TensorBuilder> {
    match data_root {
        Some(b) => Some(b),
        None => inputs.last_mut().and_then(|i| i.builder.as_mut()),
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
            failed: false,
        }
    }

    /// Tells the decoder the body's length (from `Content-Length`), so that
    /// tensors are allocated whole as soon as their shape is known, but never
    /// larger than the body could fill.
    pub fn with_body_len(mut self, len: u64) -> RequestDecoder {
        self.body_len = Some(len);
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
        self.request.inputs.last().and_then(|i| i.name.as_deref())
    }

    fn build_error(&self, (category, message): BuildError, offset: u64) -> DecodeError {
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

    fn feed_chunk(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if let Some(capture) = &mut self.capture {
            capture.from = 0;
        }
        let mut pos = match self.partial {
            Partial::None => 0,
            Partial::Bare { .. } => self.continue_bare(chunk)?,
            Partial::String { .. } => self.continue_string(chunk, 0)?,
        };
        let len = chunk.len();
        while pos < len {
            let b = chunk[pos];
            if is_ws(b) {
                pos += 1;
                continue;
            }
            let at = self.base + pos as u64;
            match self.expect {
                Expect::Value | Expect::ValueOrEnd => {
                    if let Some(Frame {
                        ctx: Ctx::Data(depth),
                        ..
                    }) = self.stack.last()
                    {
                        let depth = *depth;
                        if b != b']' {
                            let next = self.fast_floats(chunk, pos, depth)?;
                            if next != pos {
                                pos = next;
                                continue;
                            }
                        }
                    }
                    match b {
                        b'{' => {
                            self.open(Container::Object, pos, at)?;
                            self.expect = Expect::KeyOrEnd;
                            pos += 1;
                        }
                        b'[' => {
                            self.open(Container::Array, pos, at)?;
                            self.expect = Expect::ValueOrEnd;
                            pos += 1;
                        }
                        b']' if self.expect == Expect::ValueOrEnd => {
                            self.close(Container::Array, chunk, pos, at)?;
                            pos += 1;
                        }
                        b'"' => {
                            self.begin_string(false, at);
                            pos = self.continue_string(chunk, pos + 1)?;
                        }
                        _ if is_bare(b) => pos = self.begin_bare(chunk, pos)?,
                        _ => {
                            return Err(syntax(
                                at,
                                format!("expected a value, found {}", describe(b)),
                            ))
                        }
                    }
                }
                Expect::KeyOrEnd | Expect::Key => match b {
                    b'"' => {
                        self.begin_string(true, at);
                        pos = self.continue_string(chunk, pos + 1)?;
                    }
                    b'}' if self.expect == Expect::KeyOrEnd => {
                        self.close(Container::Object, chunk, pos, at)?;
                        pos += 1;
                    }
                    _ => {
                        return Err(syntax(
                            at,
                            format!("expected a string key, found {}", describe(b)),
                        ))
                    }
                },
                Expect::Colon => {
                    if b != b':' {
                        return Err(syntax(
                            at,
                            format!("expected ':' after the key, found {}", describe(b)),
                        ));
                    }
                    self.expect = Expect::Value;
                    pos += 1;
                }
                Expect::AfterValue => {
                    match (b, self.stack.last().map(|f| f.container)) {
                        (b',', Some(Container::Object)) => self.expect = Expect::Key,
                        (b',', Some(Container::Array)) => self.expect = Expect::Value,
                        (b']', _) => self.close(Container::Array, chunk, pos, at)?,
                        (b'}', _) => self.close(Container::Object, chunk, pos, at)?,
                        _ => {
                            return Err(syntax(
                                at,
                                format!("expected ',' or a closing bracket, found {}", describe(b)),
                            ))
                        }
                    }
                    pos += 1;
                }
                Expect::Done => {
                    return Err(syntax(
                        at,
                        format!("unexpected {} after the end of the request", describe(b)),
                    ))
                }
            }
        }
        if let Some(capture) = &mut self.capture {
            capture
                .bytes
                .extend_from_slice(&chunk[capture.from.min(len)..]);
        }
        Ok(())
    }

    /// Decodes a run of `ws number ws ,` directly into an `f32` or `f64`
    /// buffer: the loop that most bytes of a large request go through.
    /// Returns where it stopped; anything unusual is left to the general path.
    fn fast_floats(
        &mut self,
        chunk: &[u8],
        pos: usize,
        depth: usize,
    ) -> Result<usize, DecodeError> {
        match builder_of(&mut self.data_root, &mut self.request.inputs).map(|b| b.datatype()) {
            Some(DataType::Fp32) => self.float_run::<f32>(chunk, pos, depth),
            Some(DataType::Fp64) => self.float_run::<f64>(chunk, pos, depth),
            _ => Ok(pos),
        }
    }

    fn float_run<T: Float>(
        &mut self,
        chunk: &[u8],
        mut pos: usize,
        depth: usize,
    ) -> Result<usize, DecodeError> {
        let Some(builder) = builder_of(&mut self.data_root, &mut self.request.inputs) else {
            return Ok(pos);
        };
        let Some((values, room)) = builder.float_run::<T>(depth) else {
            return Ok(pos);
        };
        let len = chunk.len();
        let mut added = 0;
        // After one region declines, the rest of this run is sequential:
        // retrying from every next value would rescan the region each time.
        let mut try_parallel = self.options.threads > 1;
        let stop = loop {
            while pos < len && is_ws(chunk[pos]) {
                pos += 1;
            }
            let start = pos;
            // A full tensor, anything but a number, or the chunk's end: the
            // general path takes over (and words any error).
            if added == room || pos == len || !(chunk[pos].is_ascii_digit() || chunk[pos] == b'-') {
                break Ok(start);
            }
            // A long run of numbers in this chunk: several threads at once.
            if try_parallel && len - pos >= parallel::MIN_REGION_BYTES {
                if let Some(bytes) = parallel::region(&chunk[pos..]) {
                    let decoded = parallel::decode_region(
                        &chunk[pos..pos + bytes],
                        values,
                        room - added,
                        self.options.threads,
                    );
                    if let Some(n) = decoded {
                        pos += bytes;
                        added += n;
                        self.expect = Expect::Value;
                        continue;
                    }
                    // Something unusual in it: the sequential path finds and words it.
                }
                try_parallel = false;
            }
            let fast = number::scan_decimal(&chunk[pos..])
                .and_then(|d| T::from_decimal(d).map(|v| (v, d.len)));
            let value = match fast {
                Some((v, n)) => {
                    pos += n;
                    v
                }
                None => {
                    // The exact path: find the token, check it, convert it.
                    let end = chunk[pos..]
                        .iter()
                        .position(|&b| !is_bare(b))
                        .map_or(len, |n| pos + n);
                    let token = &chunk[start..end];
                    if end == len || token.get(1) == Some(&b'I') {
                        // Cut by the chunk end, or -Infinity.
                        break Ok(start);
                    }
                    if let Err(message) = number::check_grammar(token) {
                        let message = format!("{message}: {}", String::from_utf8_lossy(token));
                        break Err(syntax(self.base + start as u64, message));
                    }
                    pos = end;
                    T::from_token(token)
                }
            };
            values.push(value);
            added += 1;
            self.expect = Expect::AfterValue;
            // The separator json.dumps writes is ", ".
            if chunk.get(pos) == Some(&b',') {
                pos += 1;
                self.expect = Expect::Value;
                continue;
            }
            while pos < len && is_ws(chunk[pos]) {
                pos += 1;
            }
            if pos == len || chunk[pos] != b',' {
                break Ok(pos);
            }
            pos += 1;
            self.expect = Expect::Value;
        };
        builder.end_run(depth, added);
        stop.map_err(|e| e.with_input(self.request.inputs.last().and_then(|i| i.name.as_deref())))
    }

    fn begin_bare(&mut self, chunk: &[u8], pos: usize) -> Result<usize, DecodeError> {
        let end = chunk[pos..]
            .iter()
            .position(|&b| !is_bare(b))
            .map_or(chunk.len(), |n| pos + n);
        let start = self.base + pos as u64;
        if end == chunk.len() {
            self.carry.clear();
            self.carry.extend_from_slice(&chunk[pos..]);
            self.partial = Partial::Bare { start };
            return Ok(end);
        }
        self.on_bare(&chunk[pos..end], start)?;
        Ok(end)
    }

    fn continue_bare(&mut self, chunk: &[u8]) -> Result<usize, DecodeError> {
        let Partial::Bare { start } = self.partial else {
            return Ok(0);
        };
        let end = chunk
            .iter()
            .position(|&b| !is_bare(b))
            .unwrap_or(chunk.len());
        if self.carry.len() + end > MAX_TOKEN_BYTES {
            return Err(DecodeError::new(
                Category::Limit,
                start,
                format!("a number or literal is longer than {MAX_TOKEN_BYTES} bytes"),
            ));
        }
        self.carry.extend_from_slice(&chunk[..end]);
        if end < chunk.len() {
            self.finish_bare()?;
        }
        Ok(end)
    }

    fn finish_bare(&mut self) -> Result<(), DecodeError> {
        let Partial::Bare { start } = std::mem::replace(&mut self.partial, Partial::None) else {
            return Ok(());
        };
        let carry = std::mem::take(&mut self.carry);
        let result = self.on_bare(&carry, start);
        self.carry = carry;
        result
    }

    fn on_bare(&mut self, token: &[u8], at: u64) -> Result<(), DecodeError> {
        let scalar = match token {
            b"true" => Scalar::Bool(true),
            b"false" => Scalar::Bool(false),
            b"null" => Scalar::Null,
            b"NaN" | b"Infinity" | b"-Infinity" => {
                if self.options.strict {
                    return Err(syntax(
                        at,
                        format!(
                            "{} is not JSON (strict mode)",
                            String::from_utf8_lossy(token)
                        ),
                    ));
                }
                Scalar::NonFinite(match token {
                    b"NaN" => f64::NAN,
                    b"Infinity" => f64::INFINITY,
                    _ => f64::NEG_INFINITY,
                })
            }
            // Anything else that starts like a number gets the grammar's verdict.
            _ if matches!(token[0], b'0'..=b'9' | b'-' | b'+' | b'.') => Scalar::Number(token),
            _ => {
                let message = format!("unknown literal '{}'", String::from_utf8_lossy(token));
                return Err(syntax(at, message).with_input(self.input_name()));
            }
        };
        self.on_scalar(scalar, at)
    }

    fn begin_string(&mut self, is_key: bool, at: u64) {
        let keep = if is_key {
            !matches!(
                self.stack.last().map(|f| f.ctx),
                Some(Ctx::Skip | Ctx::Capture)
            )
        } else {
            !matches!(self.slot(), Slot::Ignore)
        };
        self.scratch.clear();
        self.partial = Partial::String {
            scanner: StringScanner::default(),
            is_key,
            keep,
            start: at,
        };
    }

    fn continue_string(&mut self, chunk: &[u8], pos: usize) -> Result<usize, DecodeError> {
        let Partial::String {
            scanner,
            keep,
            start,
            ..
        } = &mut self.partial
        else {
            return Ok(pos);
        };
        let (keep, start) = (*keep, *start);
        let out = if keep { Some(&mut self.scratch) } else { None };
        match scanner.scan(&chunk[pos..], out, self.options.max_string_bytes) {
            Ok(Scan::Open) => Ok(chunk.len()),
            Ok(Scan::Closed(n)) => {
                let Partial::String { is_key, .. } =
                    std::mem::replace(&mut self.partial, Partial::None)
                else {
                    unreachable!()
                };
                let text = std::mem::take(&mut self.scratch);
                let result = if is_key {
                    self.on_key(&text, start)
                } else {
                    self.on_scalar(Scalar::String(&text), start)
                };
                self.scratch = text;
                result.map(|()| pos + n)
            }
            Err(e) => {
                let at = self.base + (pos + e.at) as u64;
                let category = if e.limit {
                    Category::Limit
                } else {
                    Category::Syntax
                };
                let message = if e.limit {
                    format!(
                        "string is longer than {} bytes",
                        self.options.max_string_bytes
                    )
                } else {
                    e.message.to_owned()
                };
                Err(DecodeError::new(category, at, message).with_input(self.input_name()))
            }
        }
    }

    /// Where the next value goes, from the open container and the key.
    fn slot(&self) -> Slot {
        let Some(frame) = self.stack.last() else {
            return Slot::Top;
        };
        match frame.ctx {
            Ctx::Root => match self.key {
                Key::Id => Slot::Id,
                Key::Inputs => Slot::Inputs,
                Key::Outputs => Slot::Outputs,
                Key::Parameters => Slot::Params(Owner::Request),
                _ => Slot::Ignore,
            },
            Ctx::Inputs => Slot::Input,
            Ctx::Outputs => Slot::Output,
            Ctx::Input => match self.key {
                Key::Name => Slot::InputName,
                Key::Shape => Slot::Shape,
                Key::Datatype => Slot::Datatype,
                Key::Data => Slot::Data,
                Key::Parameters => Slot::Params(Owner::Input),
                _ => Slot::Ignore,
            },
            Ctx::Output => match self.key {
                Key::Name => Slot::OutputName,
                Key::Parameters => Slot::Params(Owner::Output),
                _ => Slot::Ignore,
            },
            Ctx::Shape => Slot::ShapeDim,
            Ctx::Data(depth) => Slot::DataElement(depth),
            Ctx::Params(owner) => Slot::Param(owner),
            Ctx::Skip | Ctx::Capture => Slot::Ignore,
        }
    }

    fn wrong_kind(&self, slot: Slot, at: u64, found: &str) -> DecodeError {
        let what = match slot {
            Slot::Top => "an infer request must be a JSON object".to_owned(),
            Slot::Id => "'id' must be a string".to_owned(),
            Slot::Inputs => "'inputs' must be an array of input objects".to_owned(),
            Slot::Outputs => "'outputs' must be an array of output objects".to_owned(),
            Slot::Params(_) => "'parameters' must be an object".to_owned(),
            Slot::Input => "each element of 'inputs' must be an object".to_owned(),
            Slot::Output => "each element of 'outputs' must be an object".to_owned(),
            Slot::InputName | Slot::OutputName => "'name' must be a string".to_owned(),
            Slot::Shape => "'shape' must be an array of integers".to_owned(),
            Slot::ShapeDim => "each dimension of 'shape' must be a non-negative integer".to_owned(),
            Slot::Datatype => "'datatype' must be a string".to_owned(),
            Slot::Data => "'data' must be an array".to_owned(),
            Slot::DataElement(_) => "'data' may hold only arrays and values".to_owned(),
            Slot::Param(_) => format!(
                "parameter '{}' must be a string, number or bool",
                self.param_name
            ),
            Slot::Ignore => "unexpected value".to_owned(),
        };
        let category = if matches!(slot, Slot::DataElement(_)) {
            Category::Type
        } else {
            Category::Schema
        };
        DecodeError::new(category, at, format!("{what}, found {found}"))
            .with_input(self.input_name())
    }

    fn open(&mut self, container: Container, pos: usize, at: u64) -> Result<(), DecodeError> {
        if self.stack.len() >= self.options.max_depth {
            return Err(DecodeError::new(
                Category::Limit,
                at,
                format!("nesting is deeper than {} levels", self.options.max_depth),
            ));
        }
        let slot = self.slot();
        let found = if container == Container::Object {
            "an object"
        } else {
            "an array"
        };
        let ctx = match (slot, container) {
            (Slot::Top, Container::Object) if self.data_root.is_none() => Ctx::Root,
            (Slot::Top, Container::Array) if self.data_root.is_some() => Ctx::Data(0),
            (Slot::Inputs, Container::Array) => Ctx::Inputs,
            (Slot::Outputs, Container::Array) => Ctx::Outputs,
            (Slot::Params(owner), Container::Object) => Ctx::Params(owner),
            (Slot::Input, Container::Object) => {
                if self.request.inputs.len() + self.request.finished_inputs.len()
                    >= self.options.max_inputs
                {
                    return Err(DecodeError::new(
                        Category::Limit,
                        at,
                        format!("more than {} inputs", self.options.max_inputs),
                    ));
                }
                self.request.inputs.push(empty_input(at));
                Ctx::Input
            }
            (Slot::Output, Container::Object) => {
                self.request.outputs.push(RequestedOutput {
                    name: String::new(),
                    parameters: Vec::new(),
                });
                self.request.output_seen = 0;
                Ctx::Output
            }
            (Slot::Shape, Container::Array) => {
                if let Some(input) = self.request.inputs.last_mut() {
                    input.dims.clear();
                }
                Ctx::Shape
            }
            (Slot::Data, Container::Array) => self.start_data(pos, at)?,
            (Slot::DataElement(depth), Container::Array) => {
                let builder = builder_of(&mut self.data_root, &mut self.request.inputs);
                let opened = builder.map_or(Ok(()), |b| b.open_array(depth));
                opened.map_err(|e| self.build_error(e, at))?;
                Ctx::Data(depth + 1)
            }
            (Slot::Ignore, _) => Ctx::Skip,
            _ => return Err(self.wrong_kind(slot, at, found)),
        };
        self.stack.push(Frame { container, ctx });
        self.key = Key::None;
        Ok(())
    }

    /// `data` opens: decode into a builder if shape and datatype are known,
    /// else capture the text.
    fn start_data(&mut self, pos: usize, at: u64) -> Result<Ctx, DecodeError> {
        let input = self.request.inputs.last().expect("data is inside an input");
        if let (Some(datatype), Some(shape)) = (input.datatype, input.shape.clone()) {
            let name = input.name.clone();
            let builder = self.new_builder(name.as_deref(), datatype, shape, at)?;
            self.request
                .inputs
                .last_mut()
                .expect("checked above")
                .builder = Some(builder);
            Ok(Ctx::Data(0))
        } else {
            self.capture = Some(Capture {
                from: pos,
                start: at,
                bytes: Vec::new(),
            });
            Ok(Ctx::Capture)
        }
    }

    fn new_builder(
        &mut self,
        name: Option<&str>,
        datatype: DataType,
        shape: Vec<usize>,
        at: u64,
    ) -> Result<TensorBuilder, DecodeError> {
        let limit =
            |message: String| DecodeError::new(Category::Limit, at, message).with_input(name);
        let count = element_count(&shape).ok_or_else(|| {
            limit(format!(
                "shape {} has more elements than can be counted",
                format_shape(&shape)
            ))
        })?;
        let total = self.request.elements.saturating_add(count);
        if total > self.options.max_elements {
            return Err(limit(format!(
                "shape {} would bring the request to {total} elements, over the limit of {}",
                format_shape(&shape),
                self.options.max_elements
            )));
        }
        self.request.elements = total;
        // Each element takes at least two bytes of JSON ("0,").
        let room = match self.body_len {
            Some(len) => (len.saturating_sub(at) / 2 + 1) as usize,
            None => DEFAULT_RESERVE,
        };
        Ok(TensorBuilder::new(datatype, shape, count, room))
    }

    fn close(
        &mut self,
        container: Container,
        chunk: &[u8],
        pos: usize,
        at: u64,
    ) -> Result<(), DecodeError> {
        let Some(frame) = self.stack.pop() else {
            return Err(syntax(at, "unmatched closing bracket"));
        };
        if frame.container != container {
            let (open, close) = if frame.container == Container::Object {
                ('{', ']')
            } else {
                ('[', '}')
            };
            return Err(syntax(at, format!("'{close}' closes a '{open}'")));
        }
        match frame.ctx {
            Ctx::Input => self.finish_input()?,
            Ctx::Shape => {
                if let Some(input) = self.request.inputs.last_mut() {
                    input.shape = Some(std::mem::take(&mut input.dims));
                }
            }
            Ctx::Data(depth) => {
                let builder = builder_of(&mut self.data_root, &mut self.request.inputs);
                let closed = builder.map_or(Ok(()), |b| b.close_array(depth));
                closed.map_err(|e| self.build_error(e, at))?;
            }
            Ctx::Capture => {
                let mut capture = self.capture.take().expect("a capture frame has a capture");
                capture.bytes.extend_from_slice(&chunk[capture.from..=pos]);
                if let Some(input) = self.request.inputs.last_mut() {
                    input.raw = Some((capture.start, capture.bytes));
                }
            }
            Ctx::Output if self.request.output_seen & Key::Name.bit() == 0 => {
                return Err(schema(at, "an output has no 'name'"));
            }
            _ => {}
        }
        self.value_done();
        Ok(())
    }

    /// A value ended: a separator or the closing bracket comes next, and the
    /// key it belonged to is spent.
    fn value_done(&mut self) {
        self.key = Key::None;
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::AfterValue
        };
    }

    fn on_key(&mut self, key: &[u8], at: u64) -> Result<(), DecodeError> {
        self.expect = Expect::Colon;
        let ctx = self.stack.last().map(|f| f.ctx);
        let parsed = match ctx {
            Some(Ctx::Root) => match key {
                b"id" => Key::Id,
                b"inputs" => Key::Inputs,
                b"outputs" => Key::Outputs,
                b"parameters" => Key::Parameters,
                _ => Key::Unknown,
            },
            Some(Ctx::Input) => match key {
                b"name" => Key::Name,
                b"shape" => Key::Shape,
                b"datatype" => Key::Datatype,
                b"data" => Key::Data,
                b"parameters" => Key::Parameters,
                _ => Key::Unknown,
            },
            Some(Ctx::Output) => match key {
                b"name" => Key::Name,
                b"parameters" => Key::Parameters,
                _ => Key::Unknown,
            },
            Some(Ctx::Params(_)) => {
                self.param_name = String::from_utf8_lossy(key).into_owned();
                Key::Param
            }
            _ => Key::Unknown,
        };
        let seen = match ctx {
            Some(Ctx::Root) => Some(&mut self.request.seen),
            Some(Ctx::Input) => self.request.inputs.last_mut().map(|i| &mut i.seen),
            Some(Ctx::Output) => Some(&mut self.request.output_seen),
            _ => None,
        };
        if let Some(seen) = seen {
            if *seen & parsed.bit() != 0 {
                let name = String::from_utf8_lossy(key);
                return Err(
                    schema(at, format!("duplicate key '{name}'")).with_input(self.input_name())
                );
            }
            *seen |= parsed.bit();
        }
        self.key = parsed;
        Ok(())
    }

    fn on_scalar(&mut self, scalar: Scalar<'_>, at: u64) -> Result<(), DecodeError> {
        let slot = self.slot();
        let text = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
        match (slot, scalar) {
            (Slot::Id, Scalar::String(s)) => self.request.id = Some(text(s)),
            (Slot::InputName, Scalar::String(s)) => {
                if let Some(input) = self.request.inputs.last_mut() {
                    input.name = Some(text(s));
                }
            }
            (Slot::OutputName, Scalar::String(s)) => {
                if let Some(output) = self.request.outputs.last_mut() {
                    output.name = text(s);
                }
            }
            (Slot::Datatype, Scalar::String(s)) => {
                let name = text(s);
                let datatype = name.parse::<DataType>().map_err(|e| {
                    DecodeError::new(Category::Type, at, e.to_string())
                        .with_input(self.input_name())
                })?;
                if let Some(input) = self.request.inputs.last_mut() {
                    input.datatype = Some(datatype);
                }
            }
            (Slot::ShapeDim, Scalar::Number(token)) => {
                let dim = number::check_grammar(token)
                    .ok()
                    .and_then(|shape| number::to_int::<usize>(token, shape).ok())
                    .ok_or_else(|| self.wrong_kind(slot, at, &text(token)))?;
                if let Some(input) = self.request.inputs.last_mut() {
                    input.dims.push(dim);
                }
            }
            (Slot::DataElement(depth), scalar) => {
                let builder = builder_of(&mut self.data_root, &mut self.request.inputs);
                let pushed = builder.map_or(Ok(()), |b| b.push(scalar, depth));
                pushed.map_err(|e| self.build_error(e, at))?;
            }
            (Slot::Param(owner), scalar) => {
                let value = match scalar {
                    Scalar::String(s) => ParameterValue::String(text(s)),
                    Scalar::Bool(b) => ParameterValue::Bool(b),
                    Scalar::Number(token) => match number::check_grammar(token) {
                        Ok(Shape::Integer) => match number::to_int::<i64>(token, Shape::Integer) {
                            Ok(i) => ParameterValue::Int(i),
                            Err(_) => ParameterValue::Float(number::to_f64(token)),
                        },
                        Ok(Shape::Decimal) => ParameterValue::Float(number::to_f64(token)),
                        Err(message) => {
                            return Err(syntax(at, format!("{message}: {}", text(token))))
                        }
                    },
                    Scalar::NonFinite(x) => ParameterValue::Float(x),
                    Scalar::Null => return Err(self.wrong_kind(slot, at, "null")),
                };
                let entry = (std::mem::take(&mut self.param_name), value);
                match owner {
                    Owner::Request => self.request.parameters.push(entry),
                    Owner::Input => {
                        if let Some(input) = self.request.inputs.last_mut() {
                            input.parameters.push(entry);
                        }
                    }
                    Owner::Output => {
                        if let Some(output) = self.request.outputs.last_mut() {
                            output.parameters.push(entry);
                        }
                    }
                }
            }
            (Slot::Ignore, Scalar::Number(token)) => {
                number::check_grammar(token).map_err(|m| {
                    syntax(at, format!("{m}: {}", text(token))).with_input(self.input_name())
                })?;
            }
            (Slot::Ignore, _) => {}
            (slot, scalar) => {
                let found = match scalar {
                    Scalar::Number(t) => text(t),
                    Scalar::String(_) => "a string".to_owned(),
                    Scalar::Bool(b) => b.to_string(),
                    Scalar::Null => "null".to_owned(),
                    Scalar::NonFinite(x) => x.to_string(),
                };
                return Err(self.wrong_kind(slot, at, &found));
            }
        }
        self.value_done();
        Ok(())
    }

    /// The input's object closed: check it is complete and build its tensor.
    fn finish_input(&mut self) -> Result<(), DecodeError> {
        let input = self
            .request
            .inputs
            .pop()
            .expect("an input frame has an input");
        let at = input.start;
        let name = input
            .name
            .ok_or_else(|| schema(at, "an input has no 'name'"))?;
        let missing = |field: &str| {
            schema(at, format!("input '{name}' has no '{field}'")).with_input(Some(&name))
        };
        let datatype = input.datatype.ok_or_else(|| missing("datatype"))?;
        let shape = input.shape.ok_or_else(|| missing("shape"))?;
        let builder = match (input.builder, input.raw) {
            (Some(builder), _) => builder,
            (None, Some((raw_at, raw))) => {
                // `data` came before shape or datatype: decode the captured text now.
                let builder = self.new_builder(Some(&name), datatype, shape, raw_at)?;
                let mut decoder = RequestDecoder::for_data(self.options.clone(), builder, raw_at);
                decoder.request.inputs.push(InputState {
                    name: Some(name.clone()),
                    ..empty_input(at)
                });
                decoder.feed(&raw)?;
                decoder.finish_data()?
            }
            (None, None) => {
                if input
                    .parameters
                    .iter()
                    .any(|(k, _)| k == "binary_data_size")
                {
                    return Err(DecodeError::new(
                        Category::Schema,
                        at,
                        format!("input '{name}' uses the binary tensor data extension, which this server does not support yet; send 'data' as JSON"),
                    )
                    .with_input(Some(&name)));
                }
                return Err(missing("data"));
            }
        };
        let (shape, data) = builder
            .finish()
            .map_err(|(c, m)| DecodeError::new(c, at, m).with_input(Some(&name)))?;
        self.request
            .finished_inputs
            .push(Tensor { name, shape, data });
        Ok(())
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

    /// Completes the request after the last chunk.
    pub fn finish(mut self) -> Result<InferRequest, DecodeError> {
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
        })
    }
}

fn empty_input(start: u64) -> InputState {
    InputState {
        start,
        seen: 0,
        name: None,
        shape: None,
        dims: Vec::new(),
        datatype: None,
        parameters: Vec::new(),
        builder: None,
        raw: None,
    }
}

fn describe(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}
