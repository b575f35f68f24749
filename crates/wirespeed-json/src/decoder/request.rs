//! The semantic layer of the decoder: what each container and key means in
//! an infer request, where each value goes, and how an input is completed.
//! The structural layer in `mod.rs` calls into it as containers open and
//! close, keys end, and scalar values complete.

use wirespeed_core::{
    BinaryInput, DataType, ParameterValue, Parameters, RequestedOutput, SharedInput, SharedRef,
    Tensor, TensorData,
};

use super::{
    builder_of, schema, syntax, Capture, Container, Ctx, Expect, Frame, InputState, Key, Owner,
    RequestDecoder, Slot, DEFAULT_RESERVE,
};
use crate::builder::{Scalar, TensorBuilder};
use crate::error::{Category, DecodeError};
use crate::number::{self, Shape};

impl RequestDecoder {
    /// Where the next value goes, from the open container and the key.
    pub(super) fn slot(&self) -> Slot {
        let Some(frame) = self.stack.last() else {
            return Slot::Top;
        };
        match frame.ctx {
            Ctx::Root => match self.key {
                Key::Id => Slot::Id,
                Key::Inputs => Slot::Inputs,
                Key::Outputs => Slot::Outputs,
                Key::Parameters => Slot::Params(Owner::Request),
                Key::ModelName => Slot::ModelName,
                Key::ModelVersion => Slot::ModelVersion,
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
            Ctx::TfRoot
            | Ctx::ClipperRoot
            | Ctx::TfInstances
            | Ctx::TfInstance
            | Ctx::TfColumns
            | Ctx::B64(_) => self.named_slot(frame.ctx),
        }
    }

    pub(super) fn wrong_kind(&self, slot: Slot, at: u64, found: &str) -> DecodeError {
        let what = match slot {
            Slot::Top => "an infer request must be a JSON object".to_owned(),
            Slot::Id => "'id' must be a string".to_owned(),
            Slot::Inputs if self.response.is_some() => {
                "'outputs' must be an array of output objects".to_owned()
            }
            Slot::Inputs => "'inputs' must be an array of input objects".to_owned(),
            Slot::ModelName => "'model_name' must be a string".to_owned(),
            Slot::ModelVersion => "'model_version' must be a string".to_owned(),
            Slot::Outputs => "'outputs' must be an array of output objects".to_owned(),
            Slot::Params(_) => "'parameters' must be an object".to_owned(),
            Slot::Input if self.response.is_some() => {
                "each element of 'outputs' must be an object".to_owned()
            }
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
            Slot::TfInstances => "'instances' must be a list, one element per row".to_owned(),
            Slot::TfInputs => "'inputs' must be a list or an object naming the inputs".to_owned(),
            Slot::TfInstance => {
                "an instance must be a value, a list, or an object naming the inputs".to_owned()
            }
            Slot::NamedValue => "an input's value must be a value or a list".to_owned(),
            Slot::ClipperInput => "'input' must be a value or a list".to_owned(),
            Slot::ClipperBatch => "'input_batch' must be a list of inputs".to_owned(),
            Slot::Parameter(key) => format!("'{key}' must be a string"),
            Slot::B64(_) => "'b64' must be a string".to_owned(),
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

    pub(super) fn open(
        &mut self,
        container: Container,
        pos: usize,
        at: u64,
    ) -> Result<(), DecodeError> {
        self.options
            .limits
            .check_depth(self.stack.len() + 1)
            .map_err(|e| DecodeError::limit(at, e))?;
        let slot = self.slot();
        let found = if container == Container::Object {
            "an object"
        } else {
            "an array"
        };
        if self.named.is_some() {
            let named = match (slot, container) {
                (Slot::DataElement(depth), Container::Object) => Some(self.b64_open(depth, at)?),
                _ => self.named_open(slot, container, at)?,
            };
            if let Some(ctx) = named {
                self.stack.push(Frame { container, ctx });
                self.key = Key::None;
                return Ok(());
            }
        }
        let ctx = match (slot, container) {
            (Slot::Top, Container::Object) if self.data_root.is_none() => Ctx::Root,
            (Slot::Top, Container::Array) if self.data_root.is_some() => Ctx::Data(0),
            (Slot::Inputs, Container::Array) => Ctx::Inputs,
            (Slot::Outputs, Container::Array) => Ctx::Outputs,
            (Slot::Params(owner), Container::Object) => Ctx::Params(owner),
            (Slot::Input, Container::Object) => {
                let inputs = self.request.inputs.len() + self.request.finished_inputs.len();
                self.options
                    .limits
                    .check_inputs(inputs + 1)
                    .map_err(|e| DecodeError::limit(at, e))?;
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
                let builder = builder_of(
                    &mut self.data_root,
                    &mut self.named,
                    &mut self.request.inputs,
                );
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
    pub(super) fn start_data(&mut self, pos: usize, at: u64) -> Result<Ctx, DecodeError> {
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

    pub(super) fn new_builder(
        &mut self,
        name: Option<&str>,
        datatype: DataType,
        shape: Vec<usize>,
        at: u64,
    ) -> Result<TensorBuilder, DecodeError> {
        let count = self.count_elements(name, datatype, &shape, at)?;
        // Each element takes at least two bytes of JSON ("0,").
        let room = match self.body_len {
            Some(len) => (len.saturating_sub(at) / 2 + 1) as usize,
            None => DEFAULT_RESERVE,
        };
        Ok(TensorBuilder::new(datatype, shape, count, room)
            .with_null_as_nan(!self.options.strict)
            .with_length_dimension(self.options.bytes_length_dimension))
    }

    /// Counts `shape`'s elements against the request's limits.
    fn count_elements(
        &mut self,
        name: Option<&str>,
        datatype: DataType,
        shape: &[usize],
        at: u64,
    ) -> Result<usize, DecodeError> {
        self.request
            .budget
            .take_shape(&self.options.limits, datatype, shape)
            .map_err(|e| DecodeError::limit(at, e).with_input(name))
    }

    pub(super) fn close(
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
                let builder = builder_of(
                    &mut self.data_root,
                    &mut self.named,
                    &mut self.request.inputs,
                );
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
            Ctx::TfInstance | Ctx::TfColumns | Ctx::TfInstances => {
                self.named_close(frame.ctx, at)?
            }
            _ => {}
        }
        self.value_done();
        Ok(())
    }

    /// A value ended: a separator or the closing bracket comes next, and the
    /// key it belonged to is spent.
    pub(super) fn value_done(&mut self) {
        self.key = Key::None;
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::AfterValue
        };
    }

    pub(super) fn on_key(&mut self, key: &[u8], at: u64) -> Result<(), DecodeError> {
        self.expect = Expect::Colon;
        let ctx = self.stack.last().map(|f| f.ctx);
        let parsed = match ctx {
            Some(Ctx::Root) if self.response.is_some() => match key {
                b"model_name" => Key::ModelName,
                b"model_version" => Key::ModelVersion,
                b"id" => Key::Id,
                b"outputs" => Key::Inputs,
                b"parameters" => Key::Parameters,
                _ => Key::Unknown,
            },
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
            Some(Ctx::TfRoot) => match key {
                b"instances" => Key::Instances,
                b"inputs" => Key::Inputs,
                b"signature_name" => Key::SignatureName,
                _ => Key::Unknown,
            },
            Some(Ctx::ClipperRoot) => match key {
                b"input" => Key::Input,
                b"input_batch" => Key::InputBatch,
                b"version" => Key::ModelVersion,
                b"uid" => Key::Uid,
                b"label" => Key::Label,
                _ => Key::Unknown,
            },
            Some(ctx @ (Ctx::TfInstance | Ctx::TfColumns | Ctx::B64(_))) => {
                self.named_key(ctx, key, at)?
            }
            _ => Key::Unknown,
        };
        let seen = match ctx {
            Some(Ctx::Root | Ctx::TfRoot | Ctx::ClipperRoot) => Some(&mut self.request.seen),
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

    pub(super) fn on_scalar(&mut self, scalar: Scalar<'_>, at: u64) -> Result<(), DecodeError> {
        let slot = self.slot();
        if self.named.is_some() && self.named_scalar(slot, scalar, at)? {
            return Ok(());
        }
        let text = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
        match (slot, scalar) {
            (Slot::Id, Scalar::String(s)) => self.request.id = Some(text(s)),
            // Some servers write `null` for a response's absent id or version.
            // KServe writes `"parameters": null` too.
            (Slot::Id | Slot::ModelName | Slot::ModelVersion | Slot::Params(_), Scalar::Null)
                if self.response.is_some() => {}
            // An optional field written as `null` is absent, as MLServer's
            // schema reads it (pydantic's `.dict()` of a request writes
            // `"id": null`, `"parameters": null`, `"outputs": null`).
            (Slot::Id | Slot::Params(_) | Slot::Outputs, Scalar::Null) => {}
            // `"data": "hello world"`: one element, as MLServer takes it.
            (Slot::Data, scalar) if !matches!(scalar, Scalar::Null) => {
                if let Some(input) = self.request.inputs.last_mut() {
                    input.raw = Some((at, one_element(scalar)));
                }
            }
            (Slot::ModelName, Scalar::String(s)) => {
                if let Some(head) = self.response.as_mut() {
                    head.model_name = Some(text(s));
                }
            }
            (Slot::ModelVersion, Scalar::String(s)) => {
                if let Some(head) = self.response.as_mut() {
                    head.model_version = Some(text(s));
                }
            }
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
                let builder = builder_of(
                    &mut self.data_root,
                    &mut self.named,
                    &mut self.request.inputs,
                );
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
                    // A parameter set to `null` is not set.
                    Scalar::Null => {
                        self.param_name.clear();
                        self.value_done();
                        return Ok(());
                    }
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
    pub(super) fn finish_input(&mut self) -> Result<(), DecodeError> {
        let input = self
            .request
            .inputs
            .pop()
            .expect("an input frame has an input");
        let at = input.start;
        let noun = self.tensor_noun();
        let name = input
            .name
            .ok_or_else(|| schema(at, format!("an {noun} has no 'name'")))?;
        let own: Parameters = input
            .parameters
            .iter()
            // `$` keys are the server's own (WRITTEN_SHAPE), never a client's.
            .filter(|(key, _)| {
                !wirespeed_core::is_transport_parameter(key) && !key.starts_with('$')
            })
            .cloned()
            .collect();
        if !own.is_empty() {
            self.request.input_parameters.push((name.clone(), own));
        }
        let missing = |field: &str| {
            schema(at, format!("{noun} '{name}' has no '{field}'")).with_input(Some(&name))
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
                let shared = SharedRef::from_parameters(&input.parameters).map_err(|m| {
                    schema(at, format!("input '{name}': {m}")).with_input(Some(&name))
                })?;
                if let Some(at_region) = shared {
                    if binary_size(&input.parameters, &name, at)?.is_some() {
                        return Err(schema(
                            at,
                            format!(
                                "input '{name}' has both 'binary_data_size' and \
                                 'shared_memory_region'; send one"
                            ),
                        )
                        .with_input(Some(&name)));
                    }
                    // Counted against the element limit now, read from the
                    // region by the server once it checks the region.
                    self.count_elements(Some(&name), datatype, &shape, at)?;
                    let index = self.request.finished_inputs.len();
                    self.request.shared_inputs.push(SharedInput {
                        input: index,
                        at: at_region,
                    });
                    self.request.finished_inputs.push(Tensor {
                        name,
                        shape,
                        data: TensorData::with_capacity(datatype, 0),
                        parameters: Vec::new(),
                    });
                    return Ok(());
                }
                let Some(size) = binary_size(&input.parameters, &name, at)? else {
                    return Err(missing("data"));
                };
                if !self.binary_data {
                    return Err(DecodeError::new(
                        Category::Schema,
                        at,
                        format!(
                            "input '{name}' has 'binary_data_size' but the request has no \
                             Inference-Header-Content-Length header to say where its JSON ends"
                        ),
                    )
                    .with_input(Some(&name)));
                }
                // Counted against the element limit now, allocated by the
                // reader of the binary part once its size is checked.
                self.count_elements(Some(&name), datatype, &shape, at)?;
                let data = TensorData::with_capacity(datatype, 0);
                let index = self.request.finished_inputs.len();
                self.request
                    .binary_inputs
                    .push(BinaryInput { input: index, size });
                self.request.finished_inputs.push(Tensor {
                    name,
                    shape,
                    data,
                    parameters: Vec::new(),
                });
                return Ok(());
            }
        };
        if binary_size(&input.parameters, &name, at)?.is_some() {
            return Err(schema(
                at,
                format!("input '{name}' has both 'data' and 'binary_data_size'; send one"),
            )
            .with_input(Some(&name)));
        }
        if input
            .parameters
            .iter()
            .any(|(k, _)| k == "shared_memory_region")
        {
            return Err(schema(
                at,
                format!("input '{name}' has both 'data' and 'shared_memory_region'; send one"),
            )
            .with_input(Some(&name)));
        }
        let written = builder.shape().to_vec();
        let (shape, data) = builder
            .finish()
            .map_err(|(c, m)| DecodeError::new(c, at, m).with_input(Some(&name)))?;
        if self.options.bytes_length_dimension && shape != written {
            // MLServer's BYTES shape, its last dimension the elements'
            // length: the model is told the shape as written.
            let entry = wirespeed_core::written_shape_parameter(&written);
            match self
                .request
                .input_parameters
                .iter_mut()
                .find(|(n, _)| *n == name)
            {
                Some((_, own)) => own.push(entry),
                None => self
                    .request
                    .input_parameters
                    .push((name.clone(), vec![entry])),
            }
        }
        self.request.finished_inputs.push(Tensor {
            name,
            shape,
            data,
            parameters: Vec::new(),
        });
        Ok(())
    }
}

/// A scalar given as an input's whole `data`, as the JSON text of a list
/// of that one element, decoded like captured `data` once the input is
/// complete.
fn one_element(scalar: Scalar<'_>) -> Vec<u8> {
    let mut text = vec![b'['];
    match scalar {
        Scalar::Number(token) => text.extend_from_slice(token),
        Scalar::Bool(b) => text.extend_from_slice(if b { b"true" } else { b"false" }),
        Scalar::NonFinite(x) if x.is_nan() => text.extend_from_slice(b"NaN"),
        Scalar::NonFinite(x) if x > 0.0 => text.extend_from_slice(b"Infinity"),
        Scalar::NonFinite(_) => text.extend_from_slice(b"-Infinity"),
        Scalar::String(s) => {
            text.push(b'"');
            for &byte in s {
                match byte {
                    b'"' | b'\\' => text.extend_from_slice(&[b'\\', byte]),
                    0..=0x1f => text.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
                    _ => text.push(byte),
                }
            }
            text.push(b'"');
        }
        Scalar::Null => {}
    }
    text.push(b']');
    text
}

/// The input's `binary_data_size` parameter, if it has one.
fn binary_size(parameters: &Parameters, name: &str, at: u64) -> Result<Option<usize>, DecodeError> {
    let Some((_, value)) = parameters.iter().find(|(k, _)| k == "binary_data_size") else {
        return Ok(None);
    };
    match value {
        ParameterValue::Int(n) if *n >= 0 => Ok(Some(usize::try_from(*n).unwrap_or(usize::MAX))),
        other => Err(DecodeError::new(
            Category::Schema,
            at,
            format!("input '{name}': 'binary_data_size' must be a non-negative integer, found {other:?}"),
        )
        .with_input(Some(name))),
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
