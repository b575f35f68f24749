//! Triton's classification extension: an output requested with the
//! `classification` parameter (tritonclient's `class_count=N`) comes back
//! as its top N classes, as BYTES strings `"score:index"`, or
//! `"score:index:label"` when the output has a labels file.
//!
//! As Triton: a model with Triton's batch dimension (`max_batch_size` above
//! 0) classifies each row of the output's first dimension: the answer has
//! shape `[rows, N]`, each row's top N. Otherwise the whole output is one
//! class vector (a non-batching image model's `[1, 1000, 1, 1]`) and the
//! answer has shape `[N]`; except that a higher-rank output whose first
//! dimension is variable (`-1`, a `config.toml` model's batch) is
//! classified per row too. Scores
//! are written as C's `%f` writes them, as Triton's are; ties keep the
//! lower index first.

use wirespeed_core::TensorData;
use wirespeed_core::{DataType, Error, ModelMetadata, ParameterValue, RequestedOutput, Tensor};

use crate::served::ServedModel;

/// The parameter's name.
const PARAMETER: &str = "classification";

/// An output to classify, and how many classes to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classify {
    /// The output's name.
    pub output: String,
    /// How many classes to keep, highest scores first.
    pub count: usize,
}

/// The outputs `requested` asks to classify, checked before the model
/// runs so a bad request costs no compute: the parameter is a positive
/// integer, on an output with numbers.
pub fn requested(
    requested: &[RequestedOutput],
    metadata: &ModelMetadata,
) -> Result<Vec<Classify>, Error> {
    let mut all = Vec::new();
    for output in requested {
        let Some((_, value)) = output.parameters.iter().find(|(k, _)| k == PARAMETER) else {
            continue;
        };
        let count = match value {
            ParameterValue::Int(n) if *n > 0 => usize::try_from(*n).unwrap_or(usize::MAX),
            // Triton's clients send 0 for "no classification".
            ParameterValue::Int(0) => continue,
            other => {
                return Err(Error::invalid_input(format!(
                    "output '{}': parameter 'classification' must be a positive integer (the \
                     number of classes), found {other:?}",
                    output.name
                )))
            }
        };
        if let Some(spec) = metadata.outputs.iter().find(|s| s.name == output.name) {
            if matches!(spec.datatype, DataType::Bytes | DataType::Bool) {
                return Err(Error::invalid_input(format!(
                    "output '{}' is {}; classification needs an output of numbers",
                    output.name, spec.datatype
                )));
            }
        }
        all.push(Classify {
            output: output.name.clone(),
            count,
        });
    }
    Ok(all)
}

/// Replaces each output in `classify` with its top classes.
pub fn apply(
    outputs: &mut [Tensor],
    classify: &[Classify],
    model: &ServedModel,
) -> Result<(), Error> {
    for c in classify {
        let Some(tensor) = outputs.iter_mut().find(|t| t.name == c.output) else {
            continue;
        };
        let labels = model.labels(&c.output).map(|l| l.labels.as_slice());
        let spec = model.metadata().outputs.iter().find(|s| s.name == c.output);
        let per_row = tensor.shape.len() > 1
            && (model.max_batch_size > 0 || spec.is_some_and(|s| s.shape.first() == Some(&-1)));
        *tensor = classified(tensor, c.count, labels, per_row)?;
    }
    Ok(())
}

/// The scores of `data` as `f64`, or `None` for a type without numbers.
fn scores(data: &TensorData) -> Option<Vec<f64>> {
    fn all<T: Copy>(v: &[T], f: impl Fn(T) -> f64) -> Option<Vec<f64>> {
        Some(v.iter().map(|&x| f(x)).collect())
    }
    match data {
        TensorData::Uint8(v) => all(v, f64::from),
        TensorData::Uint16(v) => all(v, f64::from),
        TensorData::Uint32(v) => all(v, f64::from),
        TensorData::Uint64(v) => all(v, |x| x as f64),
        TensorData::Int8(v) => all(v, f64::from),
        TensorData::Int16(v) => all(v, f64::from),
        TensorData::Int32(v) => all(v, f64::from),
        TensorData::Int64(v) => all(v, |x| x as f64),
        TensorData::Fp16(v) => all(v, f64::from),
        TensorData::Fp32(v) => all(v, f64::from),
        TensorData::Fp64(v) => all(v, |x| x),
        TensorData::Bf16(v) => all(v, f64::from),
        TensorData::Bool(_) | TensorData::Bytes(_) => None,
    }
}

/// A score as Triton prints it: an integer output's value as it is
/// (`9`), a float's with six decimals (`0.750000`, C++'s `to_string`).
fn score_text(data: &TensorData, at: usize, score: f64) -> String {
    match data {
        TensorData::Uint8(v) => v[at].to_string(),
        TensorData::Uint16(v) => v[at].to_string(),
        TensorData::Uint32(v) => v[at].to_string(),
        TensorData::Uint64(v) => v[at].to_string(),
        TensorData::Int8(v) => v[at].to_string(),
        TensorData::Int16(v) => v[at].to_string(),
        TensorData::Int32(v) => v[at].to_string(),
        TensorData::Int64(v) => v[at].to_string(),
        _ => format!("{score:.6}"),
    }
}

/// `tensor`'s top `count` classes per row, as BYTES.
fn classified(
    tensor: &Tensor,
    count: usize,
    labels: Option<&[String]>,
    per_row: bool,
) -> Result<Tensor, Error> {
    let scores = scores(&tensor.data).ok_or_else(|| {
        Error::invalid_input(format!(
            "output '{}' is {}; classification needs an output of numbers",
            tensor.name,
            tensor.data.datatype()
        ))
    })?;
    let (rows, width) = match tensor.shape.as_slice() {
        [rows, _, ..] if per_row => (*rows, scores.len() / (*rows).max(1)),
        _ => (1, scores.len()),
    };
    let keep = count.min(width);
    let mut strings = Vec::with_capacity(rows * keep);
    let mut order: Vec<usize> = Vec::with_capacity(width);
    for (r, row) in scores.chunks(width.max(1)).take(rows).enumerate() {
        order.clear();
        order.extend(0..row.len());
        // Highest first; NaN last; a stable sort keeps ties in index order.
        order.sort_by(|&a, &b| {
            let (x, y) = (row[a], row[b]);
            y.partial_cmp(&x)
                .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
        });
        for &index in order.iter().take(keep) {
            let mut s = format!(
                "{}:{index}",
                score_text(&tensor.data, r * width + index, row[index])
            );
            if let Some(label) = labels.and_then(|l| l.get(index)) {
                s.push(':');
                s.push_str(label);
            }
            strings.push(s.into_bytes());
        }
    }
    let shape = if per_row {
        vec![rows, keep]
    } else {
        vec![keep]
    };
    Ok(Tensor {
        name: tensor.name.clone(),
        shape,
        data: TensorData::Bytes(strings),
        parameters: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor {
            name: "p".into(),
            shape,
            data: TensorData::Fp32(v),
            parameters: Vec::new(),
        }
    }

    fn strings(t: &Tensor) -> Vec<String> {
        let TensorData::Bytes(b) = &t.data else {
            panic!("not BYTES")
        };
        b.iter()
            .map(|s| String::from_utf8(s.clone()).unwrap())
            .collect()
    }

    #[test]
    fn top_classes_of_a_vector_with_and_without_labels() {
        let t = fp32(vec![4], vec![0.1, 0.7, 0.2, 0.7]);
        let c = classified(&t, 3, None, false).unwrap();
        assert_eq!(c.shape, [3]);
        assert_eq!(strings(&c), ["0.700000:1", "0.700000:3", "0.200000:2"]);
        let labels: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let c = classified(&t, 9, Some(&labels), false).unwrap();
        assert_eq!(c.shape, [4]);
        assert_eq!(strings(&c)[3], "0.100000:0:a");
    }

    #[test]
    fn each_row_of_a_batch_is_classified_and_a_whole_tensor_as_one() {
        let t = fp32(vec![2, 3], vec![1.0, 3.0, 2.0, 9.0, f32::NAN, 8.0]);
        let c = classified(&t, 2, None, true).unwrap();
        assert_eq!(c.shape, [2, 2]);
        assert_eq!(
            strings(&c),
            ["3.000000:1", "2.000000:2", "9.000000:0", "8.000000:2"]
        );
        // Integer scores print as Triton prints them: "9:1".
        let t = Tensor {
            name: "y".into(),
            shape: vec![2, 3],
            data: TensorData::Int64(vec![1, 3, 2, 9, -4, i64::MAX]),
            parameters: Vec::new(),
        };
        assert_eq!(
            strings(&classified(&t, 1, None, true).unwrap()),
            ["3:1", &format!("{}:2", i64::MAX)]
        );
        // Without a batch dimension (Triton's max_batch_size 0, a fixed
        // first dimension) the tensor is one class vector.
        let image = fp32(vec![1, 4, 1, 1], vec![0.1, 0.7, 0.2, 0.3]);
        let c = classified(&image, 2, None, false).unwrap();
        assert_eq!(c.shape, [2]);
        assert_eq!(strings(&c), ["0.700000:1", "0.300000:3"]);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let metadata = ModelMetadata {
            name: "m".into(),
            versions: vec!["1".into()],
            platform: "x".into(),
            inputs: vec![],
            outputs: vec![wirespeed_core::TensorSpec {
                optional: false,
                name: "s".into(),
                datatype: DataType::Bytes,
                shape: vec![-1],
            }],
        };
        let ask = |name: &str, v: ParameterValue| {
            requested(
                &[RequestedOutput {
                    name: name.into(),
                    parameters: vec![(PARAMETER.into(), v)],
                }],
                &metadata,
            )
        };
        let e = ask("p", ParameterValue::String("3".into())).unwrap_err();
        assert!(e.message().contains("positive integer"), "{e}");
        let e = ask("s", ParameterValue::Int(2)).unwrap_err();
        assert!(e.message().contains("BYTES"), "{e}");
        assert_eq!(ask("p", ParameterValue::Int(0)).unwrap(), vec![]);
        assert_eq!(ask("p", ParameterValue::Int(2)).unwrap()[0].count, 2);
    }
}
