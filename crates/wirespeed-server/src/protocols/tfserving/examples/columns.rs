//! A request's examples, decoded into one column per model input, and
//! made into the model's request.

use wirespeed_core::{
    DataType, Error, ErrorKind, InferRequest, ModelMetadata, RequestLimits, RequestedOutput,
    Tensor, TensorData, TensorSpec,
};
use wirespeed_proto::tensorflow as tf;
use wirespeed_proto::tensorflow::serving as tfs;

use serde::de::DeserializeSeed;

use super::json::{BodySeed, FeatureState, Place};
use super::non_finite;
use super::Head;

/// One input's values, one row per example.
pub(super) struct Column {
    pub(super) spec: TensorSpec,
    /// Elements per example: the product of the dimensions after the first.
    pub(super) width: usize,
    pub(super) values: Values,
    /// Which rows an example gave.
    pub(super) given: Vec<bool>,
    /// The context's value, if it gave one.
    pub(super) context: Option<Values>,
}

/// A column's elements, in the widest type of its kind.
pub(super) enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
    Bytes(Vec<Vec<u8>>),
}

impl Values {
    pub(super) fn empty_like(datatype: DataType) -> Values {
        match datatype {
            DataType::Fp32 | DataType::Fp64 => Values::Float(Vec::new()),
            DataType::Int32 | DataType::Int64 => Values::Int(Vec::new()),
            DataType::Bool => Values::Bool(Vec::new()),
            _ => Values::Bytes(Vec::new()),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::Bytes(v) => v.len(),
        }
    }

    /// Appends `n` missing elements.
    pub(super) fn push_missing(&mut self, n: usize) {
        match self {
            Values::Float(v) => v.resize(v.len() + n, f64::NAN),
            Values::Int(v) => v.resize(v.len() + n, 0),
            Values::Bool(v) => v.resize(v.len() + n, false),
            Values::Bytes(v) => v.resize(v.len() + n, Vec::new()),
        }
    }

    /// Writes `from` over the elements at `at`.
    pub(super) fn write(&mut self, at: usize, from: &Values) {
        match (self, from) {
            (Values::Float(v), Values::Float(f)) => v[at..at + f.len()].copy_from_slice(f),
            (Values::Int(v), Values::Int(f)) => v[at..at + f.len()].copy_from_slice(f),
            (Values::Bool(v), Values::Bool(f)) => v[at..at + f.len()].copy_from_slice(f),
            (Values::Bytes(v), Values::Bytes(f)) => v[at..at + f.len()].clone_from_slice(f),
            _ => unreachable!("a column's values keep one kind"),
        }
    }
}

/// A request's examples, decoded into one column per model input.
pub(crate) struct Examples<'a> {
    pub(super) model: &'a str,
    pub(super) columns: Vec<Column>,
    pub(super) rows: usize,
    pub(super) limits: &'a RequestLimits,
    /// Elements and string bytes held so far, against the limits.
    pub(super) elements: usize,
    pub(super) bytes: usize,
    pub(super) signature: String,
    /// `examples` was given.
    pub(super) listed: bool,
}

impl<'a> Examples<'a> {
    /// Columns for `model`'s inputs. An input must have a batch dimension
    /// and fixed others, of a datatype examples can carry.
    pub(crate) fn new(
        model: &'a ModelMetadata,
        limits: &'a RequestLimits,
    ) -> Result<Examples<'a>, Error> {
        let mut columns = Vec::with_capacity(model.inputs.len());
        for spec in &model.inputs {
            let fixed = spec.shape.first() == Some(&-1) && spec.shape[1..].iter().all(|&d| d >= 0);
            if !fixed {
                return Err(Error::invalid_input(format!(
                    "input '{}' of model '{}' is {}: examples fill inputs of shape [-1, ...] \
                     whose other dimensions are fixed",
                    spec.name,
                    model.name,
                    spec.shape_display()
                )));
            }
            if !matches!(
                spec.datatype,
                DataType::Fp32
                    | DataType::Fp64
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::Bool
                    | DataType::Bytes
            ) {
                return Err(Error::invalid_input(format!(
                    "input '{}' of model '{}' is {}: examples fill FP32, FP64, INT32, INT64, \
                     BOOL and BYTES inputs",
                    spec.name, model.name, spec.datatype
                )));
            }
            let width = spec.shape[1..].iter().product::<i64>() as usize;
            columns.push(Column {
                spec: spec.clone(),
                width,
                values: Values::empty_like(spec.datatype),
                given: Vec::new(),
                context: None,
            });
        }
        Ok(Examples {
            model: &model.name,
            columns,
            rows: 0,
            limits,
            elements: 0,
            bytes: 0,
            signature: String::new(),
            listed: false,
        })
    }

    /// Decodes a REST request body: `signature_name`, `context` and
    /// `examples`.
    pub(crate) fn decode_json(&mut self, body: &[u8]) -> Result<(), Error> {
        let respelled = non_finite::respell(body);
        let read = respelled.as_ref().map_or(body, |r| &r.body[..]);
        let mut de = serde_json::Deserializer::from_slice(read);
        let result = BodySeed(self).deserialize(&mut de).and_then(|()| de.end());
        result.map_err(|e| {
            let kind = match e.classify() {
                serde_json::error::Category::Data => ErrorKind::InvalidInput,
                _ => ErrorKind::MalformedRequest,
            };
            let message = match &respelled {
                Some(respelled) => respelled.message(&e),
                None => e.to_string(),
            };
            Error::new(kind, message)
        })
    }

    /// Decodes a gRPC request's examples, as [`decode_json`] does a REST
    /// body's, under the same rules.
    ///
    /// [`decode_json`]: Examples::decode_json
    pub(crate) fn decode_input(&mut self, input: Option<tfs::Input>) -> Result<(), Error> {
        use tfs::input::Kind;
        let (examples, context) = match input.and_then(|i| i.kind) {
            Some(Kind::ExampleList(list)) => (list.examples, None),
            Some(Kind::ExampleListWithContext(list)) => (list.examples, list.context),
            None => {
                return Err(Error::invalid_input(
                    "the request has no input: give an example_list or an \
                     example_list_with_context",
                ))
            }
        };
        self.listed = true;
        let add = |examples: &mut Self, place: Place, example: tf::Example| {
            let features = example.features.map(|f| f.feature).unwrap_or_default();
            // A map has no order: by name, so errors name the same feature
            // every time.
            let mut features: Vec<(String, tf::Feature)> = features.into_iter().collect();
            features.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, feature) in features {
                let index = examples.column_of(&name, place)?;
                let column = &examples.columns[index];
                let mut state = FeatureState {
                    place,
                    name: &name,
                    datatype: column.spec.datatype,
                    values: Values::empty_like(column.spec.datatype),
                    nested: true,
                };
                state.feature(feature)?;
                let values = state.values;
                let bytes = match &values {
                    Values::Bytes(v) => v.iter().map(Vec::len).sum(),
                    _ => 0,
                };
                examples.charge(0, bytes)?;
                examples.store(place, index, values)?;
            }
            Ok::<(), String>(())
        };
        let result = (|| {
            if let Some(context) = context {
                add(self, Place::Context, context)?;
            }
            for example in examples {
                let row = self.rows;
                self.start_example()?;
                add(self, Place::Example(row), example)?;
            }
            self.charge_context()
        })();
        result.map_err(Error::invalid_input)
    }

    /// The signature the request named, empty if none.
    pub(crate) fn signature(&self) -> &str {
        &self.signature
    }

    /// The request to run: every input, and the outputs the heads read.
    pub(crate) fn into_request(
        self,
        model: &ModelMetadata,
        heads: &[Head],
    ) -> Result<InferRequest, Error> {
        if !self.listed {
            return Err(Error::invalid_input(
                "the request has no 'examples': give a list of examples, each an object of features",
            ));
        }
        if self.rows == 0 {
            return Err(Error::invalid_input("'examples' is an empty list"));
        }
        let rows = self.rows;
        let mut inputs = Vec::with_capacity(self.columns.len());
        for mut column in self.columns {
            for row in (0..rows).filter(|&r| !column.given[r]) {
                match &column.context {
                    Some(context) => column.values.write(row * column.width, context),
                    None => {
                        if matches!(column.values, Values::Int(_) | Values::Bool(_)) {
                            return Err(Error::invalid_input(format!(
                                "example {row} has no feature '{}', and its input is {}, which \
                                 has no missing value",
                                column.spec.name, column.spec.datatype
                            )));
                        }
                    }
                }
            }
            let mut shape = vec![rows];
            shape.extend(column.spec.shape[1..].iter().map(|&d| d as usize));
            let data = match (column.spec.datatype, column.values) {
                (DataType::Fp32, Values::Float(v)) => {
                    TensorData::Fp32(v.into_iter().map(|x| x as f32).collect())
                }
                (DataType::Fp64, Values::Float(v)) => TensorData::Fp64(v),
                (DataType::Int64, Values::Int(v)) => TensorData::Int64(v),
                (DataType::Int32, Values::Int(v)) => TensorData::Int32(
                    v.into_iter()
                        .map(i32::try_from)
                        .collect::<Result<_, _>>()
                        .map_err(|_| {
                            Error::invalid_input(format!(
                                "feature '{}' has a value out of INT32's range",
                                column.spec.name
                            ))
                        })?,
                ),
                (DataType::Bool, Values::Bool(v)) => TensorData::Bool(v),
                (_, Values::Bytes(v)) => TensorData::Bytes(v),
                _ => return Err(Error::internal("an example column changed its kind")),
            };
            inputs.push(Tensor {
                name: column.spec.name,
                shape,
                data,
                parameters: Vec::new(),
            });
        }
        let mut outputs: Vec<RequestedOutput> = Vec::new();
        for head in heads {
            let name = &model.outputs[head.output()].name;
            if !outputs.iter().any(|o| &o.name == name) {
                outputs.push(RequestedOutput {
                    name: name.clone(),
                    parameters: Vec::new(),
                });
            }
        }
        Ok(InferRequest {
            inputs,
            outputs,
            ..InferRequest::default()
        })
    }

    /// Starts the next example: every column gets a row of missing values.
    pub(super) fn start_example(&mut self) -> Result<(), String> {
        let width: usize = self.columns.iter().map(|c| c.width).sum();
        self.charge(width, 0)?;
        for column in &mut self.columns {
            column.values.push_missing(column.width);
            column.given.push(false);
        }
        self.rows += 1;
        Ok(())
    }

    /// Charges `elements` and `bytes` against the request limits.
    pub(super) fn charge(&mut self, elements: usize, bytes: usize) -> Result<(), String> {
        self.elements = self.elements.saturating_add(elements);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.elements > self.limits.max_elements {
            return Err(format!(
                "the examples hold more than {} elements, the server's limit",
                self.limits.max_elements
            ));
        }
        if self.bytes > self.limits.max_tensor_bytes {
            return Err(format!(
                "the examples' strings hold more than {} bytes, the server's limit",
                self.limits.max_tensor_bytes
            ));
        }
        Ok(())
    }

    pub(super) fn column_of(&self, feature: &str, place: Place) -> Result<usize, String> {
        self.columns
            .iter()
            .position(|c| c.spec.name == feature)
            .ok_or_else(|| {
                let names: Vec<String> = self
                    .columns
                    .iter()
                    .map(|c| format!("'{}'", c.spec.name))
                    .collect();
                format!(
                    "{place}: feature '{feature}' is not an input of model '{}', which takes {}",
                    self.model,
                    names.join(", ")
                )
            })
    }

    /// Stores one feature's values for `place`.
    pub(super) fn store(
        &mut self,
        place: Place,
        index: usize,
        values: Values,
    ) -> Result<(), String> {
        let column = &self.columns[index];
        if values.len() != column.width {
            return Err(format!(
                "{place}: feature '{}' has {} value(s); input '{}' is {}, so each example gives {}",
                column.spec.name,
                values.len(),
                column.spec.name,
                column.spec.shape_display(),
                column.width
            ));
        }
        match place {
            Place::Context => {
                if column.context.is_some() {
                    return Err(format!(
                        "context: feature '{}' is given twice",
                        column.spec.name
                    ));
                }
                // Written into every example that lacks it: its elements
                // take rows already charged, its strings are charged per
                // row once the examples are counted (`charge_context`).
                self.columns[index].context = Some(values);
            }
            Place::Example(row) => {
                let column = &mut self.columns[index];
                if column.given[row] {
                    return Err(format!(
                        "example {row}: feature '{}' is given twice",
                        column.spec.name
                    ));
                }
                column.given[row] = true;
                column.values.write(row * column.width, &values);
            }
        }
        Ok(())
    }

    /// The bytes the context's strings add to each example that lacks
    /// them, charged once the examples are counted.
    pub(super) fn charge_context(&mut self) -> Result<(), String> {
        let mut bytes = 0usize;
        for column in &self.columns {
            if let Some(Values::Bytes(v)) = &column.context {
                let per_row: usize = v.iter().map(Vec::len).sum();
                let rows = column.given.iter().filter(|g| !**g).count();
                bytes = bytes.saturating_add(per_row.saturating_mul(rows));
            }
        }
        self.charge(0, bytes)
    }
}
