//! TF Serving's results: JSON for REST, `ClassificationResult` and
//! `RegressionResult` for gRPC.

use wirespeed_core::{ClassScores, Error, Tensor, TensorData};
use wirespeed_proto::tensorflow::serving as tfs;

use super::Head;

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

pub(super) fn fp32(output: &Tensor) -> Result<&[f32], Error> {
    match &output.data {
        TensorData::Fp32(values) => Ok(values),
        _ => Err(Error::internal(format!(
            "output '{}' of a head is not FP32",
            output.name
        ))),
    }
}
