//! `LinearClassifier` as one node, and `ArrayFeatureExtractor` keeping
//! its last axis: the linear models skl2onnx writes.

use std::sync::Arc;

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use wirespeed_trees::onnx::PostTransform;

use super::{floats, owned, Built};

pub(super) fn linear_classifier(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let coefficients = floats(node, "coefficients")?.unwrap_or_default();
    let intercepts = floats(node, "intercepts")?.unwrap_or_default();
    let targets = intercepts.len();
    ensure!(targets > 0, "LinearClassifier needs intercepts");
    ensure!(
        !coefficients.is_empty() && coefficients.len() % targets == 0,
        "LinearClassifier has {} coefficients for {targets} intercepts",
        coefficients.len()
    );
    let labels = match (
        node.get_attr_opt_vec::<i64>("classlabels_ints")?,
        node.get_attr_opt_vec::<String>("classlabels_strings")?,
    ) {
        (Some(ints), None) => LinearLabels::Ints(ints),
        (None, Some(text)) => LinearLabels::Text(text),
        _ => bail!("a LinearClassifier needs one of classlabels_ints and classlabels_strings"),
    };
    ensure!(
        targets == 1 || labels.len() >= targets,
        "LinearClassifier has {targets} score rows but {} labels",
        labels.len()
    );
    let post: Option<String> = node.get_attr_opt("post_transform")?;
    Ok((
        expand(Linear {
            features: coefficients.len() / targets,
            coefficients: Arc::new(coefficients),
            intercepts,
            second_score: targets == 1 && labels.len() == 2,
            labels,
            post: PostTransform::parse(post.as_deref().unwrap_or("NONE"))?,
        }),
        vec![],
    ))
}

/// A linear classifier's class labels.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LinearLabels {
    Ints(Vec<i64>),
    Text(Vec<String>),
}

impl LinearLabels {
    fn len(&self) -> usize {
        match self {
            LinearLabels::Ints(v) => v.len(),
            LinearLabels::Text(v) => v.len(),
        }
    }
}

/// `LinearClassifier`: scores `X · coefficientsᵀ + intercepts`, then ONNX
/// Runtime's label and transform: with one score a row, the label is the
/// second class when it is positive (the literal 1 or 0 without two
/// labels), a second score `1 - s` is written beside it when there are two
/// labels, and only `PROBIT` transforms it; with several, the label is the
/// first greatest score's and the transform takes the row.
#[derive(Debug, Clone, PartialEq)]
struct Linear {
    coefficients: Arc<Vec<f32>>,
    intercepts: Vec<f32>,
    features: usize,
    labels: LinearLabels,
    second_score: bool,
    post: PostTransform,
}

impl Eq for Linear {}

impl Linear {
    fn width(&self) -> usize {
        if self.second_score {
            2
        } else {
            self.intercepts.len()
        }
    }

    fn label_type(&self) -> DatumType {
        match self.labels {
            LinearLabels::Ints(_) => DatumType::I64,
            LinearLabels::Text(_) => DatumType::String,
        }
    }
}

impl Expansion for Linear {
    fn name(&self) -> StaticName {
        "LinearClassifier".into()
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(2)
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 2)?;
        s.equals(&inputs[0].rank, 2)?;
        s.equals(&outputs[0].datum_type, self.label_type())?;
        s.equals(&outputs[0].rank, 1)?;
        s.equals(&outputs[0].shape[0], &inputs[0].shape[0])?;
        s.equals(&outputs[1].datum_type, DatumType::F32)?;
        s.equals(&outputs[1].rank, 2)?;
        s.equals(&outputs[1].shape[0], &inputs[0].shape[0])?;
        s.equals(&outputs[1].shape[1], self.width().to_dim())?;
        Ok(())
    }

    wire_itself!();
}

own_typed_op!(Linear);

impl EvalOp for Linear {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext<'_>, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let rows = input.shape()[0];
        ensure!(
            input.shape()[1] == self.features,
            "LinearClassifier has coefficients for {} features, the rows have {}",
            self.features,
            input.shape()[1]
        );
        let x = input.cast_to::<f32>()?;
        let x = x.try_as_plain_ram()?;
        let x = x.as_slice::<f32>()?;
        let (targets, width) = (self.intercepts.len(), self.width());
        let mut scores = vec![0f32; rows * width];
        // Each label as a class index, or (one score) positive or not.
        let mut chosen = Vec::with_capacity(rows);
        for (row, out) in x
            .chunks_exact(self.features)
            .zip(scores.chunks_exact_mut(width))
        {
            for (t, o) in out.iter_mut().take(targets).enumerate() {
                let weights = &self.coefficients[t * self.features..(t + 1) * self.features];
                *o = self.intercepts[t] + row.iter().zip(weights).map(|(a, b)| a * b).sum::<f32>();
            }
            if targets == 1 {
                let s = out[0];
                chosen.push(if s > 0.0 { 1 } else { 0 });
                if self.second_score {
                    out[0] = 1.0 - s;
                    out[1] = s;
                } else {
                    out[0] = self.post.apply_one(s);
                }
            } else {
                let mut best = 0;
                for (k, &v) in out.iter().enumerate() {
                    if v > out[best] {
                        best = k;
                    }
                }
                chosen.push(best);
                self.post.apply(out);
            }
        }
        let two = self.labels.len() == 2;
        let labels = match &self.labels {
            LinearLabels::Ints(ints) => {
                let values: Vec<i64> = chosen
                    .iter()
                    .map(|&k| match (targets, two) {
                        (1, true) => ints[k],
                        (1, false) => k as i64,
                        _ => ints[k],
                    })
                    .collect();
                owned(&[rows], values)?
            }
            LinearLabels::Text(text) => {
                let values: Vec<String> = chosen
                    .iter()
                    .map(|&k| match (targets, two) {
                        (1, false) => k.to_string(),
                        _ => text[k].clone(),
                    })
                    .collect();
                owned(&[rows], values)?
            }
        };
        Ok(tvec!(
            labels.into_tvalue(),
            owned(&[rows, width], scores)?.into_tvalue()
        ))
    }
}

impl TypedOp for Linear {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let input = inputs[0];
        ensure!(
            input.rank() == 2,
            "LinearClassifier takes rows: a rank-2 input"
        );
        ensure!(
            input.datum_type.is_number(),
            "LinearClassifier takes numbers, not {:?}",
            input.datum_type
        );
        let rows = input.shape[0].clone();
        Ok(tvec!(
            self.label_type().fact(std::slice::from_ref(&rows)),
            f32::fact(&[rows, self.width().to_dim()])
        ))
    }

    as_op!();
}

pub(super) fn array_feature_extractor(_ctx: &ParsingContext<'_>, _node: &NodeProto) -> Built {
    Ok((expand(Extract), vec![]))
}

/// `ArrayFeatureExtractor`: the elements of the last axis at the indices
/// of the second input, which becomes the last axis's length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extract;

impl Expansion for Extract {
    fn name(&self) -> StaticName {
        "ArrayFeatureExtractor".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].rank, &inputs[0].rank)?;
        Ok(())
    }

    wire_itself!();
}

own_typed_op!(Extract);

impl EvalOp for Extract {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext<'_>, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (x, indices) = args_2!(inputs);
        let indices = indices.cast_to::<i64>()?;
        let indices = indices.try_as_plain_ram()?;
        let indices = indices.as_slice::<i64>()?;
        let shape = x.shape().to_vec();
        ensure!(
            !shape.is_empty(),
            "ArrayFeatureExtractor takes a tensor of rank 1 or more"
        );
        let last = shape[shape.len() - 1];
        for &i in indices {
            ensure!(
                i >= 0 && (i as usize) < last,
                "ArrayFeatureExtractor: index {i} is outside the last axis ({last})"
            );
        }
        let picks: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
        let mut out_shape = shape.clone();
        *out_shape.last_mut().unwrap() = picks.len();
        let view = x.to_plain_array_view::<f32>();
        let out = match view {
            Ok(view) => {
                let flat: Vec<f32> = view.iter().copied().collect();
                let values: Vec<f32> = flat
                    .chunks_exact(last.max(1))
                    .flat_map(|row| picks.iter().map(move |&k| row[k]))
                    .collect();
                owned(&out_shape, values)?
            }
            Err(_) => {
                let x = x.cast_to::<i64>()?;
                let x = x.try_as_plain_ram()?;
                let flat = x.as_slice::<i64>()?;
                let values: Vec<i64> = flat
                    .chunks_exact(last.max(1))
                    .flat_map(|row| picks.iter().map(move |&k| row[k]))
                    .collect();
                owned(&out_shape, values)?
            }
        };
        Ok(tvec!(out.into_tvalue()))
    }
}

impl TypedOp for Extract {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let x = inputs[0];
        ensure!(
            x.rank() >= 1,
            "ArrayFeatureExtractor takes a tensor of rank 1 or more"
        );
        ensure!(
            x.datum_type == DatumType::F32 || x.datum_type.is_integer(),
            "ArrayFeatureExtractor takes float or integer tensors here, not {:?}",
            x.datum_type
        );
        let mut shape: TVec<TDim> = x.shape.iter().cloned().collect();
        *shape.last_mut().unwrap() = inputs[1].shape.volume();
        let datum = if x.datum_type == DatumType::F32 {
            DatumType::F32
        } else {
            DatumType::I64
        };
        Ok(tvec!(datum.fact(&*shape)))
    }

    as_op!();
}
