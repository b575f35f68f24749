//! `Scaler`, `Imputer` and `Binarizer`, maps of each value by its column,
//! and `ZipMap`'s refusal.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;

use super::{floats, owned, Built};

/// `Scaler`, `Imputer` and `Binarizer`: a map of each value by its column
/// (the last axis), in `f32`.
#[derive(Debug, Clone, PartialEq)]
enum ColumnMap {
    /// `(x - offset) * scale`.
    Scaler { offset: Vec<f32>, scale: Vec<f32> },
    /// `imputed` where `x` is `replaced` (NaN: where `x` is NaN).
    Imputer { imputed: Vec<f32>, replaced: f32 },
    /// 1 where `x > threshold`, else 0.
    Binarizer { threshold: f32 },
}

impl Eq for ColumnMap {}

/// The value of a per-column attribute for column `c`: one value for all,
/// or one a column.
fn per_column(values: &[f32], c: usize) -> f32 {
    if values.len() == 1 {
        values[0]
    } else {
        values[c]
    }
}

impl ColumnMap {
    /// The per-column attributes' length, which the column count must match.
    fn columns(&self) -> Option<usize> {
        let len = match self {
            ColumnMap::Scaler { offset, scale } => offset.len().max(scale.len()),
            ColumnMap::Imputer { imputed, .. } => imputed.len(),
            ColumnMap::Binarizer { .. } => 1,
        };
        (len > 1).then_some(len)
    }

    fn apply(&self, x: f32, c: usize) -> f32 {
        match self {
            ColumnMap::Scaler { offset, scale } => {
                (x - per_column(offset, c)) * per_column(scale, c)
            }
            ColumnMap::Imputer { imputed, replaced } => {
                let replace = if replaced.is_nan() {
                    x.is_nan()
                } else {
                    x == *replaced
                };
                if replace {
                    per_column(imputed, c)
                } else {
                    x
                }
            }
            ColumnMap::Binarizer { threshold } => {
                if x > *threshold {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            ColumnMap::Scaler { .. } => "Scaler",
            ColumnMap::Imputer { .. } => "Imputer",
            ColumnMap::Binarizer { .. } => "Binarizer",
        }
    }
}

pub(super) fn scaler(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let offset = floats(node, "offset")?.unwrap_or_else(|| vec![0.0]);
    let scale = floats(node, "scale")?.unwrap_or_else(|| vec![1.0]);
    ensure!(
        !offset.is_empty() && !scale.is_empty(),
        "Scaler needs offset and scale values"
    );
    ensure!(
        offset.len() == 1 || scale.len() == 1 || offset.len() == scale.len(),
        "Scaler has {} offsets and {} scales",
        offset.len(),
        scale.len()
    );
    Ok((expand(ColumnMap::Scaler { offset, scale }), vec![]))
}

pub(super) fn imputer(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    if node
        .get_attr_opt_vec::<i64>("imputed_value_int64s")?
        .is_some()
    {
        bail!("Imputer on integer features is not supported; impute float features (imputed_value_floats)")
    }
    let imputed = floats(node, "imputed_value_floats")?.unwrap_or_default();
    ensure!(!imputed.is_empty(), "Imputer needs imputed_value_floats");
    let replaced: Option<f32> = node.get_attr_opt("replaced_value_float")?;
    Ok((
        expand(ColumnMap::Imputer {
            imputed,
            replaced: replaced.unwrap_or(0.0),
        }),
        vec![],
    ))
}

pub(super) fn binarizer(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let threshold: Option<f32> = node.get_attr_opt("threshold")?;
    Ok((
        expand(ColumnMap::Binarizer {
            threshold: threshold.unwrap_or(0.0),
        }),
        vec![],
    ))
}

pub(super) fn zip_map(_ctx: &ParsingContext<'_>, _node: &NodeProto) -> Built {
    bail!(
        "ZipMap turns the probabilities into a sequence of maps, which no V2 tensor carries; \
         convert the model without it: options={{'zipmap': False}} for skl2onnx, zipmap=False \
         for onnxmltools"
    )
}

impl Expansion for ColumnMap {
    fn name(&self) -> StaticName {
        self.op_name().into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, DatumType::F32)?;
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        Ok(())
    }

    wire_itself!();
}

own_typed_op!(ColumnMap);

impl EvalOp for ColumnMap {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext<'_>, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let shape = input.shape().to_vec();
        let columns = shape.last().copied().unwrap_or(1).max(1);
        if let Some(expected) = self.columns() {
            ensure!(
                columns == expected,
                "{} has values for {expected} columns, the input has {columns}",
                self.op_name()
            );
        }
        let x = input.cast_to::<f32>()?;
        let x = x.try_as_plain_ram()?;
        let x = x.as_slice::<f32>()?;
        let y: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| self.apply(v, i % columns))
            .collect();
        Ok(tvec!(owned(&shape, y)?.into_tvalue()))
    }
}

impl TypedOp for ColumnMap {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let input = inputs[0];
        ensure!(
            input.datum_type.is_number(),
            "{} takes numbers, not {:?}",
            self.op_name(),
            input.datum_type
        );
        if let (Some(expected), Some(last)) = (self.columns(), input.shape.last()) {
            if let Ok(columns) = last.to_usize() {
                ensure!(
                    columns == expected,
                    "{} has values for {expected} columns, the input has {columns}",
                    self.op_name()
                );
            }
        }
        Ok(tvec!(f32::fact(input.shape.iter())))
    }

    as_op!();
}
