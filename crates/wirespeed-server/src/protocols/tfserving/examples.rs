//! TF Serving's `:classify` and `:regress`: examples in, results out.
//!
//! A request carries `examples`, each a map of features, and an optional
//! `context` whose features every example shares (an example's own value
//! wins, as TF's merge of the two does). The features are the model's
//! inputs by name: a list for an input with several elements per row (a
//! tree model's `features` vector), one value per column for a model with
//! preprocessing. Each example is one row of every input.
//!
//! A feature an example leaves out is missing, which a tree reads as
//! missing: NaN in a float input (which a preprocessing column's `fill`
//! replaces), an empty string in a BYTES input (which matches no
//! category). An integer or BOOL input has no missing value, so leaving
//! one out is an error. A feature no input has is an error too.
//!
//! Numbers are read as `f64` and rounded to FP32 after, as TF Serving's
//! parser does (rapidjson's `GetFloat`). Strings and `{"b64": ...}` fill
//! BYTES inputs.
//!
//! The model's [`Heads`] say which output answers: a classification gives
//! each example's classes, labelled `"0"`, `"1"`... with their scores; a
//! regression one value per example.
//!
//! The JSON body is decoded with serde's streaming deserializer straight
//! into one column per input: no JSON tree is built. Examples are small
//! maps, so the tensor decoder's incremental parser would buy little here;
//! the columns are bounded by the request limits as they grow.

use std::fmt;

use base64::Engine;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use wirespeed_core::{
    ClassScores, DataType, Error, ErrorKind, Heads, InferRequest, ModelMetadata, RequestLimits,
    RequestedOutput, Tensor, TensorData, TensorSpec,
};
use wirespeed_proto::tensorflow as tf;
use wirespeed_proto::tensorflow::serving as tfs;

/// TF Serving's two example verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Classify,
    Regress,
}

impl Verb {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verb::Classify => "classify",
            Verb::Regress => "regress",
        }
    }

    /// The signature a TF estimator exports for the verb.
    fn signature(self) -> &'static str {
        match self {
            Verb::Classify => "classification",
            Verb::Regress => "regression",
        }
    }
}

/// What answers `verb` for a model: its head, or why it has none.
pub(crate) fn head(verb: Verb, model: &ModelMetadata, heads: Heads) -> Result<Head, Error> {
    let head = match verb {
        Verb::Classify => heads.classification.map(|c| Head::Classes {
            output: c.output,
            scores: c.scores,
        }),
        Verb::Regress => heads.regression.map(|output| Head::Value { output }),
    };
    head.ok_or_else(|| {
        let has = match verb {
            Verb::Classify if heads.regression.is_some() => "; it answers ':regress'",
            Verb::Regress if heads.classification.is_some() => "; it answers ':classify'",
            _ => "",
        };
        Error::invalid_input(format!(
            "model '{}' has no {} output, so it cannot answer ':{}'{has}. ':classify' and \
             ':regress' are served for tree models with a 'prediction' output; ':predict' \
             for every model",
            model.name,
            verb.signature(),
            verb.name(),
        ))
    })
}

/// The signatures a model's heads add to `serving_default` in its
/// metadata, as a TF estimator exports them: name, method name, inputs
/// (the serialized examples) and outputs.
pub(crate) fn signatures(heads: Heads) -> Vec<Signature> {
    let spec = |name: &str, datatype, shape: Vec<i64>| TensorSpec {
        name: name.to_owned(),
        datatype,
        shape,
    };
    let examples = || vec![spec("inputs", DataType::Bytes, vec![-1])];
    let mut signatures = Vec::new();
    if let Some(c) = heads.classification {
        let outputs = match c.scores {
            ClassScores::Positive => vec![
                spec("classes", DataType::Bytes, vec![-1, 2]),
                spec("scores", DataType::Fp32, vec![-1, 2]),
            ],
            ClassScores::Probabilities { classes } => vec![
                spec("classes", DataType::Bytes, vec![-1, classes as i64]),
                spec("scores", DataType::Fp32, vec![-1, classes as i64]),
            ],
            ClassScores::Index => vec![spec("classes", DataType::Bytes, vec![-1, 1])],
        };
        signatures.push(Signature {
            name: "classification",
            method: "tensorflow/serving/classify",
            inputs: examples(),
            outputs,
        });
    }
    if heads.regression.is_some() {
        signatures.push(Signature {
            name: "regression",
            method: "tensorflow/serving/regress",
            inputs: examples(),
            outputs: vec![spec("outputs", DataType::Fp32, vec![-1])],
        });
    }
    signatures
}

/// One signature of a model's metadata.
pub(crate) struct Signature {
    pub(crate) name: &'static str,
    pub(crate) method: &'static str,
    pub(crate) inputs: Vec<TensorSpec>,
    pub(crate) outputs: Vec<TensorSpec>,
}

/// The output that answers, and how to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    Classes { output: usize, scores: ClassScores },
    Value { output: usize },
}

impl Head {
    /// The model output it reads, an index into the model's outputs.
    pub(crate) fn output(self) -> usize {
        match self {
            Head::Classes { output, .. } | Head::Value { output } => output,
        }
    }
}

/// Whether `signature` names what answers `verb`: empty, TF's default,
/// the estimator's signature for the verb, or the model's name.
pub(crate) fn check_signature(signature: &str, verb: Verb, model: &str) -> Result<(), Error> {
    if signature.is_empty()
        || signature == "serving_default"
        || signature == verb.signature()
        || signature == model
    {
        return Ok(());
    }
    Err(Error::invalid_input(format!(
        "no signature named '{signature}'; model '{model}' answers ':{}' under \
         'serving_default' or '{}'",
        verb.name(),
        verb.signature()
    )))
}

/// One input's values, one row per example.
struct Column {
    spec: TensorSpec,
    /// Elements per example: the product of the dimensions after the first.
    width: usize,
    values: Values,
    /// Which rows an example gave.
    given: Vec<bool>,
    /// The context's value, if it gave one.
    context: Option<Values>,
}

/// A column's elements, in the widest type of its kind.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
    Bytes(Vec<Vec<u8>>),
}

impl Values {
    fn empty_like(datatype: DataType) -> Values {
        match datatype {
            DataType::Fp32 | DataType::Fp64 => Values::Float(Vec::new()),
            DataType::Int32 | DataType::Int64 => Values::Int(Vec::new()),
            DataType::Bool => Values::Bool(Vec::new()),
            _ => Values::Bytes(Vec::new()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::Bytes(v) => v.len(),
        }
    }

    /// Appends `n` missing elements.
    fn push_missing(&mut self, n: usize) {
        match self {
            Values::Float(v) => v.resize(v.len() + n, f64::NAN),
            Values::Int(v) => v.resize(v.len() + n, 0),
            Values::Bool(v) => v.resize(v.len() + n, false),
            Values::Bytes(v) => v.resize(v.len() + n, Vec::new()),
        }
    }

    /// Writes `from` over the elements at `at`.
    fn write(&mut self, at: usize, from: &Values) {
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
    model: &'a str,
    columns: Vec<Column>,
    rows: usize,
    limits: &'a RequestLimits,
    /// Elements and string bytes held so far, against the limits.
    elements: usize,
    bytes: usize,
    signature: String,
    /// `examples` was given.
    listed: bool,
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
        let mut de = serde_json::Deserializer::from_slice(body);
        let result = BodySeed(self).deserialize(&mut de).and_then(|()| de.end());
        result.map_err(|e| {
            let kind = match e.classify() {
                serde_json::error::Category::Data => ErrorKind::InvalidInput,
                _ => ErrorKind::MalformedRequest,
            };
            Error::new(kind, e.to_string())
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
    fn start_example(&mut self) -> Result<(), String> {
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
    fn charge(&mut self, elements: usize, bytes: usize) -> Result<(), String> {
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

    fn column_of(&self, feature: &str, place: Place) -> Result<usize, String> {
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
    fn store(&mut self, place: Place, index: usize, values: Values) -> Result<(), String> {
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
    fn charge_context(&mut self) -> Result<(), String> {
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

/// Where a feature was given, for messages.
#[derive(Debug, Clone, Copy)]
enum Place {
    Context,
    Example(usize),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Context => f.write_str("context"),
            Place::Example(row) => write!(f, "example {row}"),
        }
    }
}

/// The request object.
struct BodySeed<'e, 'a>(&'e mut Examples<'a>);

impl<'de> DeserializeSeed<'de> for BodySeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with 'examples' (and optionally 'signature_name' and 'context')")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let examples = self.0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "signature_name" => examples.signature = map.next_value()?,
                "context" => map.next_value_seed(FeaturesSeed {
                    examples: &mut *examples,
                    place: Place::Context,
                })?,
                "examples" => {
                    if examples.listed {
                        return Err(de::Error::custom("'examples' is given twice"));
                    }
                    examples.listed = true;
                    map.next_value_seed(ListSeed(&mut *examples))?;
                }
                // TF Serving reads only its keys.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        examples.charge_context().map_err(de::Error::custom)
    }
}

/// `examples`: a list of feature objects.
struct ListSeed<'e, 'a>(&'e mut Examples<'a>);

impl<'de> DeserializeSeed<'de> for ListSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'examples' as a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let examples = self.0;
        loop {
            let row = examples.rows;
            examples.start_example().map_err(de::Error::custom)?;
            let seed = FeaturesSeed {
                examples: &mut *examples,
                place: Place::Example(row),
            };
            if seq.next_element_seed(seed)?.is_none() {
                // The row started for an element that was not there.
                for column in &mut examples.columns {
                    let keep = column.values.len() - column.width;
                    match &mut column.values {
                        Values::Float(v) => v.truncate(keep),
                        Values::Int(v) => v.truncate(keep),
                        Values::Bool(v) => v.truncate(keep),
                        Values::Bytes(v) => v.truncate(keep),
                    }
                    column.given.pop();
                }
                examples.rows -= 1;
                return Ok(());
            }
        }
    }
}

/// One example (or the context): feature name to value or list.
struct FeaturesSeed<'e, 'a> {
    examples: &'e mut Examples<'a>,
    place: Place,
}

impl<'de> DeserializeSeed<'de> for FeaturesSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FeaturesSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} as an object of features", self.place)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            let index = self
                .examples
                .column_of(&name, self.place)
                .map_err(de::Error::custom)?;
            let column = &self.examples.columns[index];
            let mut feature = FeatureState {
                place: self.place,
                name: &name,
                datatype: column.spec.datatype,
                values: Values::empty_like(column.spec.datatype),
                nested: false,
            };
            map.next_value_seed(FeatureSeed(&mut feature))?;
            let values = feature.values;
            let bytes = match &values {
                Values::Bytes(v) => v.iter().map(Vec::len).sum(),
                _ => 0,
            };
            self.examples.charge(0, bytes).map_err(de::Error::custom)?;
            self.examples
                .store(self.place, index, values)
                .map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// One feature being read: a value or a flat list of values of the
/// input's kind.
struct FeatureState<'n> {
    place: Place,
    name: &'n str,
    datatype: DataType,
    values: Values,
    /// Inside the feature's list: a list here is an error.
    nested: bool,
}

impl FeatureState<'_> {
    fn wrong(&self, got: &str) -> String {
        format!(
            "{}: feature '{}' feeds a {} input, got {got}",
            self.place, self.name, self.datatype
        )
    }

    fn number(&mut self, x: Number) -> Result<(), String> {
        match (&mut self.values, x) {
            (Values::Float(v), Number::Float(f)) => v.push(f),
            (Values::Float(v), Number::Int(i)) => v.push(i as f64),
            (Values::Int(v), Number::Int(i)) => v.push(i),
            (Values::Int(v), Number::Float(f))
                if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 =>
            {
                v.push(f as i64)
            }
            (Values::Bool(v), Number::Int(i @ (0 | 1))) => v.push(i == 1),
            (Values::Int(_), Number::Float(_)) => return Err(self.wrong("a fraction")),
            (Values::Bool(_), _) => return Err(self.wrong("a number other than 0 or 1")),
            (Values::Bytes(_), _) => return Err(self.wrong("a number")),
        }
        Ok(())
    }

    fn string(&mut self, s: Vec<u8>) -> Result<(), String> {
        match &mut self.values {
            Values::Bytes(v) => {
                v.push(s);
                Ok(())
            }
            _ => Err(self.wrong("a string")),
        }
    }

    fn boolean(&mut self, b: bool) -> Result<(), String> {
        match &mut self.values {
            Values::Bool(v) => v.push(b),
            // TF Serving keeps booleans as int64 1 and 0.
            Values::Int(v) => v.push(b as i64),
            Values::Float(v) => v.push(b as u8 as f64),
            Values::Bytes(_) => return Err(self.wrong("a boolean")),
        }
        Ok(())
    }

    /// A protobuf `Feature`'s list, under the same rules as JSON values.
    fn feature(&mut self, feature: tf::Feature) -> Result<(), String> {
        use tf::feature::Kind;
        match feature.kind {
            Some(Kind::BytesList(list)) => list
                .value
                .into_iter()
                .try_for_each(|b| self.string(b.to_vec())),
            Some(Kind::FloatList(list)) => list
                .value
                .into_iter()
                .try_for_each(|f| self.number(Number::Float(f64::from(f)))),
            Some(Kind::Int64List(list)) => list
                .value
                .into_iter()
                .try_for_each(|i| self.number(Number::Int(i))),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
}

/// Reads a feature's value (or each of its list's) into its state.
struct FeatureSeed<'s, 'n>(&'s mut FeatureState<'n>);

impl<'de> DeserializeSeed<'de> for FeatureSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FeatureSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "feature '{}' as a value or a list of values",
            self.0.name
        )
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.0.boolean(b).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        self.0.number(Number::Int(i)).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        let state = self.0;
        match i64::try_from(u) {
            Ok(i) => state.number(Number::Int(i)),
            Err(_) if matches!(state.values, Values::Float(_)) => {
                state.number(Number::Float(u as f64))
            }
            // TF Serving: "Only int64_t is supported".
            Err(_) => Err(state.wrong("an integer past int64's range")),
        }
        .map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        self.0.number(Number::Float(f)).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.string(s.as_bytes().to_vec()).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0.wrong("null")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let state = self.0;
        if state.nested {
            return Err(de::Error::custom(state.wrong("a nested list")));
        }
        state.nested = true;
        while seq.next_element_seed(FeatureSeed(&mut *state))?.is_some() {}
        Ok(())
    }

    /// `{"b64": "..."}`: binary bytes.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let encoded = match map.next_key::<String>()?.as_deref() {
            Some("b64") => map.next_value::<String>()?,
            _ => {
                let e = state.wrong("an object other than {\"b64\": ...}");
                return Err(de::Error::custom(e));
            }
        };
        if map.next_key::<IgnoredAny>()?.is_some() {
            let e = state.wrong("an object other than {\"b64\": ...}");
            return Err(de::Error::custom(e));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| {
                de::Error::custom(format!(
                    "{}: feature '{}' has invalid base64: {e}",
                    state.place, state.name
                ))
            })?;
        state.string(bytes).map_err(de::Error::custom)
    }
}

/// TF Serving's results for the head's output: `{"results": ...}`, each
/// example's `[[label, score], ...]` for a classification, its value for
/// a regression.
pub(crate) fn results_json(head: Head, output: &Tensor) -> Result<Vec<u8>, Error> {
    let values = fp32(output)?;
    let rows = output.shape.first().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(16 + rows * 24);
    out.extend_from_slice(b"{\"results\":[");
    let mut floats = ryu::Buffer::new();
    let mut score = |out: &mut Vec<u8>, x: f32| {
        if x.is_finite() {
            out.extend_from_slice(floats.format_finite(x).as_bytes());
        } else {
            out.extend_from_slice(b"null");
        }
    };
    let mut ints = itoa::Buffer::new();
    for row in 0..rows {
        if row > 0 {
            out.push(b',');
        }
        match head {
            Head::Value { .. } => score(&mut out, values[row]),
            Head::Classes { scores, .. } => {
                out.push(b'[');
                match scores {
                    ClassScores::Positive => {
                        let p = values[row];
                        out.extend_from_slice(b"[\"0\",");
                        score(&mut out, 1.0 - p);
                        out.extend_from_slice(b"],[\"1\",");
                        score(&mut out, p);
                        out.push(b']');
                    }
                    ClassScores::Probabilities { classes } => {
                        for (class, &p) in values[row * classes..(row + 1) * classes]
                            .iter()
                            .enumerate()
                        {
                            if class > 0 {
                                out.push(b',');
                            }
                            out.extend_from_slice(b"[\"");
                            out.extend_from_slice(ints.format(class).as_bytes());
                            out.extend_from_slice(b"\",");
                            score(&mut out, p);
                            out.push(b']');
                        }
                    }
                    ClassScores::Index => {
                        out.extend_from_slice(b"[\"");
                        out.extend_from_slice(ints.format(values[row] as i64).as_bytes());
                        out.extend_from_slice(b"\",0.0]");
                    }
                }
                out.push(b']');
            }
        }
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// The classification result of `output` for TF Serving's gRPC API: each
/// example's classes, labelled as in [`results_json`].
pub(crate) fn classification_proto(
    scores: ClassScores,
    output: &Tensor,
) -> Result<tfs::ClassificationResult, Error> {
    let values = fp32(output)?;
    let rows = output.shape.first().copied().unwrap_or(0);
    let class = |label: String, score: f32| tfs::Class { label, score };
    let classifications = (0..rows)
        .map(|row| {
            let classes = match scores {
                ClassScores::Positive => vec![
                    class("0".to_owned(), 1.0 - values[row]),
                    class("1".to_owned(), values[row]),
                ],
                ClassScores::Probabilities { classes } => values
                    [row * classes..(row + 1) * classes]
                    .iter()
                    .enumerate()
                    .map(|(c, &p)| class(c.to_string(), p))
                    .collect(),
                ClassScores::Index => vec![class((values[row] as i64).to_string(), 0.0)],
            };
            tfs::Classifications { classes }
        })
        .collect();
    Ok(tfs::ClassificationResult { classifications })
}

/// The regression result of `output` for TF Serving's gRPC API.
pub(crate) fn regression_proto(output: &Tensor) -> Result<tfs::RegressionResult, Error> {
    let regressions = fp32(output)?
        .iter()
        .map(|&value| tfs::Regression { value })
        .collect();
    Ok(tfs::RegressionResult { regressions })
}

fn fp32(output: &Tensor) -> Result<&[f32], Error> {
    match &output.data {
        TensorData::Fp32(values) => Ok(values),
        _ => Err(Error::internal(format!(
            "output '{}' of a head is not FP32",
            output.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(inputs: Vec<TensorSpec>) -> ModelMetadata {
        ModelMetadata {
            name: "m".into(),
            versions: vec!["1".into()],
            platform: "xgboost_json".into(),
            inputs,
            outputs: vec![TensorSpec {
                name: "probability".into(),
                datatype: DataType::Fp32,
                shape: vec![-1],
            }],
        }
    }

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape,
        }
    }

    fn decode(m: &ModelMetadata, body: &str) -> Result<InferRequest, Error> {
        let limits = RequestLimits::default();
        let mut examples = Examples::new(m, &limits)?;
        examples.decode_json(body.as_bytes())?;
        examples.into_request(m, &[Head::Value { output: 0 }])
    }

    #[test]
    fn vectors_and_columns_become_rows() {
        let m = model(vec![spec("features", DataType::Fp32, vec![-1, 3])]);
        let r = decode(
            &m,
            r#"{"examples": [{"features": [1, 2.5, 3]}, {"features": [4, 5, 6]}]}"#,
        )
        .unwrap();
        assert_eq!(r.inputs[0].shape, vec![2, 3]);
        assert_eq!(
            r.inputs[0].data,
            TensorData::Fp32(vec![1.0, 2.5, 3.0, 4.0, 5.0, 6.0])
        );
        assert_eq!(r.outputs[0].name, "probability");

        let m = model(vec![
            spec("Age", DataType::Fp32, vec![-1]),
            spec("Sex", DataType::Bytes, vec![-1]),
        ]);
        // The context fills what an example leaves out; an example's own
        // value wins; what neither gives is missing.
        let r = decode(
            &m,
            r#"{"examples": [{"Age": 3}, {"Sex": {"b64": "bWFsZQ=="}}, {"Age": 5, "Sex": "x"}],
                "context": {"Sex": "female"}}"#,
        )
        .unwrap();
        let TensorData::Fp32(age) = &r.inputs[0].data else {
            panic!()
        };
        assert_eq!(age[0], 3.0);
        assert!(age[1].is_nan());
        assert_eq!(
            r.inputs[1].data,
            TensorData::Bytes(vec![b"female".to_vec(), b"male".to_vec(), b"x".to_vec()])
        );
    }

    #[test]
    fn mistakes_are_named() {
        let m = model(vec![spec("features", DataType::Fp32, vec![-1, 2])]);
        let cases = [
            (r#"{"examples": [{"features": [1]}]}"#, "has 1 value(s)"),
            (
                r#"{"examples": [{"feature": [1, 2]}]}"#,
                "'feature' is not an input",
            ),
            (r#"{"examples": [{"features": ["a", 2]}]}"#, "got a string"),
            (r#"{"examples": [{"features": [[1, 2]]}]}"#, "nested list"),
            (r#"{"examples": []}"#, "empty list"),
            (r#"{"instances": []}"#, "no 'examples'"),
            (
                r#"{"examples": [{"features": [1, 2], "features": [1, 2]}]}"#,
                "given twice",
            ),
            (r#"{"examples": [7]}"#, "object of features"),
            (r#"{"examples": [{"features": [1, 2]}]"#, "EOF"),
        ];
        for (body, want) in cases {
            let e = decode(&m, body).unwrap_err();
            assert!(e.message().contains(want), "{body}: {e}");
        }
        let m = model(vec![spec("n", DataType::Int64, vec![-1])]);
        let e = decode(&m, r#"{"examples": [{}]}"#).unwrap_err();
        assert!(e.message().contains("no missing value"), "{e}");
        let e = decode(&m, r#"{"examples": [{"n": 1.5}]}"#).unwrap_err();
        assert!(e.message().contains("a fraction"), "{e}");
    }

    #[test]
    fn examples_are_bounded_as_they_come() {
        let m = model(vec![spec("features", DataType::Fp32, vec![-1, 1000])]);
        let limits = RequestLimits {
            max_elements: 5000,
            ..RequestLimits::default()
        };
        let mut examples = Examples::new(&m, &limits).unwrap();
        let body = format!("{{\"examples\": [{}{{}}]}}", "{},".repeat(100));
        let e = examples.decode_json(body.as_bytes()).unwrap_err();
        assert!(e.message().contains("5000 elements"), "{e}");
    }

    #[test]
    fn results_follow_tf_serving() {
        let t = |shape: Vec<usize>, v: Vec<f32>| Tensor {
            name: "p".into(),
            shape,
            data: TensorData::Fp32(v),
        };
        let json = |head, t| String::from_utf8(results_json(head, &t).unwrap()).unwrap();
        let classes = |scores| Head::Classes { output: 0, scores };
        assert_eq!(
            json(classes(ClassScores::Positive), t(vec![1], vec![0.25])),
            r#"{"results":[[["0",0.75],["1",0.25]]]}"#
        );
        assert_eq!(
            json(
                classes(ClassScores::Probabilities { classes: 2 }),
                t(vec![2, 2], vec![0.5, 0.5, 0.125, 0.875])
            ),
            r#"{"results":[[["0",0.5],["1",0.5]],[["0",0.125],["1",0.875]]]}"#
        );
        assert_eq!(
            json(classes(ClassScores::Index), t(vec![2], vec![2.0, 0.0])),
            r#"{"results":[[["2",0.0]],[["0",0.0]]]}"#
        );
        assert_eq!(
            json(Head::Value { output: 0 }, t(vec![2], vec![1.5, -2.0])),
            r#"{"results":[1.5,-2.0]}"#
        );
    }
}
