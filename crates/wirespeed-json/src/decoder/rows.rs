//! The semantic layer for the request shapes of TF Serving's REST API and
//! Clipper's query frontend, on the same structural parser and fast float
//! path as V2.
//!
//! Neither format declares shapes or datatypes: the server names the
//! model's inputs and their datatypes, and each tensor's shape is learned
//! from how its data nests (it must be rectangular). The row formats (TF
//! `instances`, Clipper `input` and `input_batch`) put one batch row per
//! element; for a model with several inputs each TF instance is an object
//! naming them, and each input's rows go into its own builder, as if its
//! data were one array. `{"b64": "..."}` carries binary BYTES values.

use base64::Engine;
use wirespeed_core::{DataType, InferRequest, ParameterValue, Tensor, TensorBudget};

use super::{schema, syntax, Container, Ctx, Key, RequestDecoder, Slot};
use crate::builder::{Scalar, TensorBuilder};
use crate::error::{Category, DecodeError};
use crate::number;
use crate::DecodeOptions;

/// The request formats a decoder reads besides V2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    TfServing,
    Clipper,
}

/// How a request laid out its tensors, which decides how the answer is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An Open Inference Protocol (V2) request.
    V2,
    /// TF Serving's row format, `{"instances": [...]}`: answer `predictions`.
    TfRows,
    /// TF Serving's columnar format, `{"inputs": ...}`: answer `outputs`.
    TfColumns,
    /// Clipper's `{"input": ...}`: one query.
    ClipperOne,
    /// Clipper's `{"input_batch": [...]}`: one query per row.
    ClipperBatch,
}

pub(crate) struct NamedInput {
    name: String,
    datatype: DataType,
    builder: Option<TensorBuilder>,
    /// Given in the instance (or the columns object) being read.
    given: bool,
}

/// The state of a TF Serving or Clipper request.
pub(crate) struct Named {
    pub(crate) dialect: Dialect,
    pub(crate) inputs: Vec<NamedInput>,
    /// The input whose data is being read.
    pub(crate) current: Option<usize>,
    pub(crate) format: Option<Format>,
    /// TF instances read so far.
    rows: usize,
    /// Top-level strings that travel as request parameters (`Slot::Parameter`).
    parameters: Vec<(&'static str, String)>,
}

impl Named {
    pub(crate) fn builder(&mut self) -> Option<&mut TensorBuilder> {
        let i = self.current?;
        self.inputs[i].builder.as_mut()
    }

    pub(crate) fn current_name(&self) -> Option<&str> {
        self.current.map(|i| self.inputs[i].name.as_str())
    }
}

impl RequestDecoder {
    /// A decoder for TF Serving's REST `:predict` body, for a model whose
    /// inputs are `inputs` (name and datatype, in the model's order).
    pub fn tf_serving(options: DecodeOptions, inputs: &[(String, DataType)]) -> RequestDecoder {
        Self::named(options, Dialect::TfServing, inputs)
    }

    /// A decoder for Clipper's `/{app}/predict` body, for a model whose one
    /// input is `input` (name and datatype).
    pub fn clipper(options: DecodeOptions, input: (String, DataType)) -> RequestDecoder {
        Self::named(options, Dialect::Clipper, &[input])
    }

    fn named(
        options: DecodeOptions,
        dialect: Dialect,
        inputs: &[(String, DataType)],
    ) -> RequestDecoder {
        let mut decoder = RequestDecoder::new(options);
        decoder.named = Some(Box::new(Named {
            dialect,
            inputs: inputs
                .iter()
                .map(|(name, datatype)| NamedInput {
                    name: name.clone(),
                    datatype: *datatype,
                    builder: None,
                    given: false,
                })
                .collect(),
            current: None,
            format: None,
            rows: 0,
            parameters: Vec::new(),
        }));
        decoder
    }

    fn named_mut(&mut self) -> &mut Named {
        self.named.as_mut().expect("a named-input decoder")
    }

    /// The format shows itself: make one builder per input, sharing the
    /// room the body leaves.
    fn start_format(&mut self, format: Format, at: u64) -> Result<(), DecodeError> {
        let room = match self.body_len {
            Some(len) => (len.saturating_sub(at) / 2 + 1) as usize,
            None => super::DEFAULT_RESERVE,
        };
        let (elements, bytes) = (
            self.options.limits.max_elements,
            self.options.limits.max_tensor_bytes,
        );
        let null_as_nan = !self.options.strict;
        let named = self.named_mut();
        if named.format.is_some() {
            let both = match named.dialect {
                Dialect::TfServing => "give 'instances' or 'inputs', not both",
                Dialect::Clipper => "give 'input' or 'input_batch', not both",
            };
            return Err(schema(at, both));
        }
        named.format = Some(format);
        let share = room / named.inputs.len().max(1);
        for input in &mut named.inputs {
            // Each input alone within both limits (their shapes are not
            // known until the data ends).
            let size = input.datatype.element_size().unwrap_or(4);
            let limit = elements.min(bytes / size);
            input.builder = Some(
                TensorBuilder::inferred(input.datatype, limit, share).with_null_as_nan(null_as_nan),
            );
        }
        Ok(())
    }

    fn select(&mut self, index: usize) {
        self.named_mut().current = Some(index);
    }

    fn single(&self, at: u64, what: &str) -> Result<usize, DecodeError> {
        let named = self.named.as_ref().expect("a named-input decoder");
        if named.inputs.len() == 1 {
            return Ok(0);
        }
        let names: Vec<&str> = named.inputs.iter().map(|i| i.name.as_str()).collect();
        Err(schema(
            at,
            format!(
                "{what} can only feed a model with one input; this one has {} ({}): name them in an object",
                names.len(),
                names.join(", ")
            ),
        ))
    }

    pub(super) fn builder_error(
        &self,
        (category, message): (Category, String),
        at: u64,
    ) -> DecodeError {
        // An input outgrew the limits, which it was held to alone: worded
        // as the request limits word it on every protocol.
        let named = self.named.as_ref().expect("a named-input decoder");
        let input = named
            .current
            .or_else(|| (named.inputs.len() == 1).then_some(0));
        if let (Category::Limit, Some(i)) = (category, input) {
            let datatype = named.inputs[i].datatype;
            let limits = &self.options.limits;
            let most = limits
                .max_elements
                .min(limits.max_tensor_bytes / datatype.element_size().unwrap_or(4));
            let mut budget = TensorBudget::default();
            if let Err(e) = budget.take(limits, datatype, most.saturating_add(1)) {
                return DecodeError::limit(at, e).with_input(Some(&named.inputs[i].name));
            }
        }
        DecodeError::new(category, at, message).with_input(self.input_name())
    }

    /// Where a value goes in a TF Serving or Clipper request.
    pub(super) fn named_slot(&self, ctx: Ctx) -> Slot {
        match ctx {
            Ctx::TfRoot => match self.key {
                Key::Instances => Slot::TfInstances,
                Key::Inputs => Slot::TfInputs,
                Key::SignatureName => Slot::Parameter("signature_name"),
                _ => Slot::Ignore,
            },
            Ctx::ClipperRoot => match self.key {
                Key::Input => Slot::ClipperInput,
                Key::InputBatch => Slot::ClipperBatch,
                Key::ModelVersion => Slot::Parameter("version"),
                Key::Uid => Slot::Parameter("uid"),
                Key::Label => Slot::Parameter("label"),
                _ => Slot::Ignore,
            },
            Ctx::TfInstances => Slot::TfInstance,
            Ctx::TfInstance | Ctx::TfColumns => Slot::NamedValue,
            Ctx::B64(depth) => Slot::B64(depth),
            _ => Slot::Ignore,
        }
    }

    /// A container opens in a TF Serving or Clipper request.
    pub(super) fn named_open(
        &mut self,
        slot: Slot,
        container: Container,
        at: u64,
    ) -> Result<Option<Ctx>, DecodeError> {
        let ctx = match (slot, container) {
            (Slot::Top, Container::Object) => match self.named_mut().dialect {
                Dialect::TfServing => Ctx::TfRoot,
                Dialect::Clipper => Ctx::ClipperRoot,
            },
            (Slot::TfInstances, Container::Array) => {
                self.start_format(Format::TfRows, at)?;
                Ctx::TfInstances
            }
            (Slot::TfInstance, Container::Object) => {
                let named = self.named_mut();
                named.rows += 1;
                named.current = None;
                for input in &mut named.inputs {
                    input.given = false;
                }
                Ctx::TfInstance
            }
            (Slot::TfInstance, Container::Array) => {
                let index = self.single(at, "an instance that is not an object")?;
                self.select(index);
                self.named_mut().rows += 1;
                self.open_row(at)?;
                Ctx::Data(1)
            }
            (Slot::TfInputs, Container::Array) => {
                let index = self.single(at, "'inputs' given as a list")?;
                self.start_format(Format::TfColumns, at)?;
                self.select(index);
                Ctx::Data(0)
            }
            (Slot::TfInputs, Container::Object) => {
                self.start_format(Format::TfColumns, at)?;
                Ctx::TfColumns
            }
            (Slot::NamedValue, Container::Object)
                if self.stack.last().map(|f| f.ctx) == Some(Ctx::TfInstance) =>
            {
                self.b64_open(0, at)?
            }
            (Slot::NamedValue, Container::Array) => {
                if self.stack.last().map(|f| f.ctx) == Some(Ctx::TfInstance) {
                    self.open_row(at)?;
                    Ctx::Data(1)
                } else {
                    Ctx::Data(0)
                }
            }
            (Slot::ClipperInput, Container::Array) => {
                self.start_format(Format::ClipperOne, at)?;
                self.select(0);
                self.open_row(at)?;
                Ctx::Data(1)
            }
            (Slot::ClipperBatch, Container::Array) => {
                self.start_format(Format::ClipperBatch, at)?;
                self.select(0);
                Ctx::Data(0)
            }
            _ => return Ok(None),
        };
        Ok(Some(ctx))
    }

    /// One row of the current input opens inside the outer (virtual) array.
    fn open_row(&mut self, at: u64) -> Result<(), DecodeError> {
        let opened = self
            .named_mut()
            .builder()
            .map_or(Ok(()), |b| b.open_array(0));
        opened.map_err(|e| self.builder_error(e, at))
    }

    /// A `{"b64": ...}` object opens where a value of `data` goes.
    pub(super) fn b64_open(&mut self, depth: usize, at: u64) -> Result<Ctx, DecodeError> {
        let datatype = self.named_mut().builder().map(|b| b.datatype());
        if let Some(datatype) = datatype.filter(|&d| d != DataType::Bytes) {
            // Most often a column written as an object of rows, as pandas'
            // `to_dict()` writes one ({"0": 3.5}).
            return Err(DecodeError::new(
                Category::Type,
                at,
                format!(
                    "the input is {datatype}, whose values are numbers or lists of them, and this \
                     value is an object; a column written as an object of rows ({{\"0\": 3.5}}, \
                     as pandas' to_dict writes one) is sent as a list ([3.5]); only BYTES values \
                     may be objects, {{\"b64\": \"...\"}}"
                ),
            )
            .with_input(self.input_name()));
        }
        Ok(Ctx::B64(depth))
    }

    /// A key in a TF instance, a columns object or a b64 object.
    pub(super) fn named_key(&mut self, ctx: Ctx, key: &[u8], at: u64) -> Result<Key, DecodeError> {
        if let Ctx::B64(_) = ctx {
            return if key == b"b64" {
                Ok(Key::B64)
            } else {
                Err(schema(
                    at,
                    format!(
                        "a binary value is {{\"b64\": \"...\"}}, not a '{}' key",
                        String::from_utf8_lossy(key)
                    ),
                )
                .with_input(self.input_name()))
            };
        }
        let named = self.named.as_mut().expect("a named-input decoder");
        let found = named.inputs.iter().position(|i| i.name.as_bytes() == key);
        if found.is_none() && key == b"b64" && ctx == Ctx::TfInstance && named.inputs.len() == 1 {
            // `{"b64": ...}` as a whole instance: a binary value of the one input.
            named.current = Some(0);
            let frame = self.stack.len() - 1;
            self.stack[frame].ctx = self.b64_open(0, at)?;
            return Ok(Key::B64);
        }
        let Some(index) = found else {
            let names: Vec<&str> = named.inputs.iter().map(|i| i.name.as_str()).collect();
            return Err(schema(
                at,
                format!(
                    "the model has no input '{}'; its inputs are {}",
                    String::from_utf8_lossy(key),
                    names.join(", ")
                ),
            ));
        };
        if std::mem::replace(&mut named.inputs[index].given, true) {
            return Err(schema(
                at,
                format!("input '{}' is given twice", named.inputs[index].name),
            ));
        }
        named.current = Some(index);
        Ok(Key::NamedInput)
    }

    /// A scalar in a TF Serving or Clipper request, outside `data` arrays.
    /// Returns whether it was taken.
    pub(super) fn named_scalar(
        &mut self,
        slot: Slot,
        scalar: Scalar<'_>,
        at: u64,
    ) -> Result<bool, DecodeError> {
        let depth = match slot {
            Slot::TfInstance => {
                let index = self.single(at, "an instance that is not an object")?;
                self.select(index);
                self.named_mut().rows += 1;
                0
            }
            Slot::NamedValue if self.stack.last().map(|f| f.ctx) == Some(Ctx::TfInstance) => 0,
            Slot::NamedValue => {
                return Err(DecodeError::new(
                    Category::Shape,
                    at,
                    "a column of 'inputs' must be a list, batch first",
                )
                .with_input(self.input_name()))
            }
            Slot::ClipperInput => {
                self.start_format(Format::ClipperOne, at)?;
                self.select(0);
                if let Scalar::String(text) = scalar {
                    if self.clipper_bytes(text, 0, at)? {
                        self.value_done();
                        return Ok(true);
                    }
                }
                0
            }
            Slot::DataElement(depth) => {
                if let Scalar::String(text) = scalar {
                    if self.named_mut().dialect == Dialect::Clipper
                        && self.clipper_bytes(text, depth, at)?
                    {
                        self.value_done();
                        return Ok(true);
                    }
                }
                return Ok(false);
            }
            Slot::Parameter(key) => {
                // Clipper's `uid` is a number or a string, its `label` a
                // number; both are kept as their text.
                let text = match scalar {
                    Scalar::String(text) if key != "label" => text,
                    Scalar::Number(token) if matches!(key, "uid" | "label") => {
                        number::check_grammar(token).map_err(|m| {
                            syntax(at, format!("{m}: {}", String::from_utf8_lossy(token)))
                        })?;
                        token
                    }
                    _ => {
                        let kind = match key {
                            "uid" => "a string or a number",
                            "label" => "a number",
                            _ => "a string",
                        };
                        return Err(schema(at, format!("'{key}' must be {kind}")));
                    }
                };
                let text = String::from_utf8_lossy(text).into_owned();
                self.named_mut().parameters.push((key, text));
                self.value_done();
                return Ok(true);
            }
            Slot::B64(depth) => {
                let Scalar::String(text) = scalar else {
                    return Err(schema(at, "'b64' must be a string").with_input(self.input_name()));
                };
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| {
                        DecodeError::new(Category::Syntax, at, format!("invalid base64: {e}"))
                            .with_input(self.input_name())
                    })?;
                let pushed = self
                    .named_mut()
                    .builder()
                    .map_or(Ok(()), |b| b.push(Scalar::String(&bytes), depth));
                pushed.map_err(|e| self.builder_error(e, at))?;
                self.value_done();
                return Ok(true);
            }
            Slot::TfInputs | Slot::TfInstances | Slot::ClipperBatch => {
                return Err(schema(at, "expected a list").with_input(self.input_name()))
            }
            _ => return Ok(false),
        };
        let pushed = self
            .named_mut()
            .builder()
            .map_or(Ok(()), |b| b.push(scalar, depth));
        pushed.map_err(|e| self.builder_error(e, at))?;
        self.value_done();
        Ok(true)
    }

    /// A string for a UINT8 input of a Clipper query: Clipper's `bytes`
    /// input type, one query's bytes in base64, pushed as one row at
    /// `depth`. Returns whether the input was UINT8 (and the string taken).
    fn clipper_bytes(&mut self, text: &[u8], depth: usize, at: u64) -> Result<bool, DecodeError> {
        let uint8 = self
            .named_mut()
            .builder()
            .is_some_and(|b| b.datatype() == DataType::Uint8);
        if !uint8 {
            return Ok(false);
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| {
                DecodeError::new(
                    Category::Syntax,
                    at,
                    format!("a UINT8 input takes its bytes in base64; invalid base64: {e}"),
                )
                .with_input(self.input_name())
            })?;
        let pushed = self
            .named_mut()
            .builder()
            .map_or(Ok(()), |b| b.push_byte_row(&bytes, depth));
        pushed.map_err(|e| self.builder_error(e, at))?;
        Ok(true)
    }

    /// A TF Serving or Clipper container closes.
    pub(super) fn named_close(&mut self, ctx: Ctx, at: u64) -> Result<(), DecodeError> {
        match ctx {
            Ctx::TfInstance | Ctx::TfColumns => {
                let named = self.named_mut();
                if let Some(missing) = named.inputs.iter().find(|i| !i.given) {
                    let name = missing.name.clone();
                    let rows = named.rows;
                    let whence = if ctx == Ctx::TfInstance {
                        format!("instance {} has no '{name}'", rows - 1)
                    } else {
                        format!("'inputs' has no '{name}'")
                    };
                    return Err(schema(at, whence).with_input(Some(&name)));
                }
            }
            Ctx::TfInstances => self.close_rows(at)?,
            _ => {}
        }
        Ok(())
    }

    /// The outer (virtual) array of every input closes.
    fn close_rows(&mut self, at: u64) -> Result<(), DecodeError> {
        let named = self.named.as_mut().expect("a named-input decoder");
        for (i, input) in named.inputs.iter_mut().enumerate() {
            if let Some(builder) = &mut input.builder {
                if let Err(e) = builder.close_array(0) {
                    named.current = Some(i);
                    return Err(DecodeError::new(e.0, at, e.1).with_input(Some(&input.name)));
                }
            }
        }
        Ok(())
    }

    /// Completes a TF Serving or Clipper request.
    pub(super) fn finish_named(mut self) -> Result<(InferRequest, Format), DecodeError> {
        self.finish_value()?;
        let end = self.base;
        let format = self.named_mut().format;
        let Some(format) = format else {
            let what = match self.named_mut().dialect {
                Dialect::TfServing => "the request has neither 'instances' nor 'inputs'",
                Dialect::Clipper => "the request has neither 'input' nor 'input_batch'",
            };
            return Err(schema(0, what));
        };
        if format == Format::ClipperOne {
            self.close_rows(end)?;
        }
        let named = self.named.take().expect("a named-input decoder");
        // Clipper's `version` and TF Serving's `signature_name` travel as
        // request parameters of those names, which their front ends take
        // out before the model sees the request.
        let parameters = named
            .parameters
            .into_iter()
            .map(|(key, value)| (key.to_owned(), ParameterValue::String(value)))
            .collect();
        let mut inputs = Vec::with_capacity(named.inputs.len());
        // Each input was held to the limits alone while it grew (its shape
        // was not known before its data ended); the request is held to them
        // together here.
        let mut budget = TensorBudget::default();
        for input in named.inputs {
            let builder = input.builder.expect("made when the format showed");
            let (shape, data) = builder
                .finish()
                .map_err(|(c, m)| DecodeError::new(c, end, m).with_input(Some(&input.name)))?;
            if shape.first() == Some(&0) || shape.is_empty() && data.is_empty() {
                return Err(schema(0, "the request has no rows").with_input(Some(&input.name)));
            }
            budget
                .take(&self.options.limits, input.datatype, data.len())
                .map_err(|e| DecodeError::limit(end, e).with_input(Some(&input.name)))?;
            inputs.push(Tensor {
                name: input.name,
                shape,
                data,
                parameters: Vec::new(),
            });
        }
        Ok((
            InferRequest {
                inputs,
                parameters,
                ..InferRequest::default()
            },
            format,
        ))
    }
}
