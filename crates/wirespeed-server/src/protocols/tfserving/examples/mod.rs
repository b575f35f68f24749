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
//!
//! `columns.rs` holds the columns being filled, `json.rs` the serde seeds
//! that read a JSON body into them (`non_finite.rs` lets them read `NaN`
//! and `Infinity`), `results.rs` writes the answers.

mod columns;
mod json;
mod non_finite;
mod results;

use wirespeed_core::{ClassScores, DataType, Error, Heads, ModelMetadata, TensorSpec};

pub(crate) use columns::Examples;
pub(crate) use results::{classification_proto, regression_proto, results_json};

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

    /// The verb's method name (a signature's `method_name`), which clients
    /// also send as the signature's name.
    fn method_name(self) -> &'static str {
        match self {
            Verb::Classify => "tensorflow/serving/classify",
            Verb::Regress => "tensorflow/serving/regress",
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
        optional: false,
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
        || signature == verb.method_name()
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

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_core::{InferRequest, RequestLimits, Tensor, TensorData};

    fn model(inputs: Vec<TensorSpec>) -> ModelMetadata {
        ModelMetadata {
            name: "m".into(),
            versions: vec!["1".into()],
            platform: "xgboost_json".into(),
            inputs,
            outputs: vec![TensorSpec {
                optional: false,
                name: "probability".into(),
                datatype: DataType::Fp32,
                shape: vec![-1],
            }],
        }
    }

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            optional: false,
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
            parameters: Vec::new(),
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
