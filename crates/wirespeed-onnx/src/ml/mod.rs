//! The `ai.onnx.ml` operators wirespeed puts in tract's ONNX register:
//! what scikit-learn, XGBoost and LightGBM models converted by skl2onnx
//! and onnxmltools are made of.
//!
//! - `TreeEnsembleClassifier` and `TreeEnsembleRegressor` run on
//!   wirespeed's tree runtime (`wirespeed_trees::onnx`), not on tract's
//!   own classifier, with ONNX Runtime's arithmetic; the rest of the
//!   graph (casts, scalers, linear models, concatenations) stays tract's.
//! - `LinearClassifier` (scikit-learn's logistic regression, linear SVC)
//!   is one node of its own rather than tract's expansion into many: its
//!   cost at batch 1 is the nodes, not the arithmetic. It follows ONNX
//!   Runtime's rules for one-score models.
//! - `ArrayFeatureExtractor` keeps the last axis, `[N, k]` for `k`
//!   indices, as ONNX Runtime answers (tract's drops it).
//! - `Scaler`, `Imputer` and `Binarizer`, which tract lacks, are
//!   element-wise maps over the last axis, computed in `f32` as ONNX
//!   Runtime computes them.
//! - `ZipMap` is refused at load with the converter option that leaves it
//!   out: its output, a sequence of maps, is no tensor a client can
//!   receive over V2.
//!
//! `trees.rs`, `linear.rs` and `columns.rs` hold them. Each is an [`Expansion`] (tract's way to add an operator: typing rules,
//! then the typed op it wires) around one typed op with its own `eval`.

/// An operator that is its own typed op: its `Op` is named as its
/// expansion is, and (`wire_itself!` inside its `Expansion`) its expansion
/// wires just itself.
macro_rules! own_typed_op {
    ($op:ty) => {
        impl Op for $op {
            fn name(&self) -> StaticName {
                Expansion::name(self)
            }

            op_as_typed_op!();
        }
    };
}

macro_rules! wire_itself {
    () => {
        fn wire(
            &self,
            prefix: &str,
            model: &mut TypedModel,
            inputs: &[OutletId],
        ) -> TractResult<TVec<OutletId>> {
            model.wire_node(prefix, self.clone(), inputs)
        }
    };
}

mod columns;
mod linear;
mod trees;

use tract_onnx::model::OnnxOpRegister;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use wirespeed_core::CpuPool;

/// Gives the tree nodes of `typed` the server's CPU pool, over which they
/// split large batches; returns how many trees they hold.
pub(super) fn share_pool(typed: &mut TypedModel, pool: &CpuPool) -> usize {
    let mut count = 0;
    for node in typed.nodes_mut() {
        if let Some(trees) = node.op_as_mut::<trees::Trees>() {
            trees.pool = Some(pool.clone());
            count += trees.num_trees();
        }
    }
    count
}

/// Puts the operators above in `register`, replacing tract's own where
/// it has one.
pub(super) fn register(register: &mut OnnxOpRegister) {
    register.insert("TreeEnsembleClassifier", trees::tree_classifier);
    register.insert("TreeEnsembleRegressor", trees::tree_regressor);
    register.insert("TreeEnsemble", trees::tree_ensemble);
    register.insert("LinearClassifier", linear::linear_classifier);
    register.insert("ArrayFeatureExtractor", linear::array_feature_extractor);
    register.insert("Scaler", columns::scaler);
    register.insert("Imputer", columns::imputer);
    register.insert("Binarizer", columns::binarizer);
    register.insert("ZipMap", columns::zip_map);
}

type Built = TractResult<(Box<dyn InferenceOp>, Vec<String>)>;

/// An op's result as a tensor of `shape`, taking `values` without a copy.
fn owned<T: Datum>(shape: &[usize], values: Vec<T>) -> TractResult<Tensor> {
    Ok(tract_ndarray::ArrayD::from_shape_vec(shape, values)?.into())
}

/// A float list attribute that may also come as a tensor of doubles
/// (`name_as_tensor`, ai.onnx.ml opset 3), rounded to `f32` as ONNX
/// Runtime rounds it for float inputs.
fn floats(node: &NodeProto, name: &str) -> TractResult<Option<Vec<f32>>> {
    if let Some(values) = node.get_attr_opt_vec::<f32>(name)? {
        return Ok(Some(values));
    }
    let Some(values) = tensor_attribute(node, &format!("{name}_as_tensor"))? else {
        return Ok(None);
    };
    Ok(Some(values.iter().map(|&d| d as f32).collect()))
}

/// A tensor attribute's numbers (float, double or integer elements).
fn tensor_attribute(node: &NodeProto, name: &str) -> TractResult<Option<Vec<f64>>> {
    let Some(tensor) = node.get_attr_opt::<&tract_onnx::pb::TensorProto>(name)? else {
        return Ok(None);
    };
    let raw = &tensor.raw_data;
    let values: Vec<f64> = if !tensor.double_data.is_empty() {
        tensor.double_data.clone()
    } else if !tensor.float_data.is_empty() {
        tensor.float_data.iter().map(|&f| f64::from(f)).collect()
    } else if !tensor.int32_data.is_empty() {
        tensor.int32_data.iter().map(|&i| f64::from(i)).collect()
    } else {
        // Little-endian raw data of the tensor's type.
        match (tensor.data_type, raw.len()) {
            (11, len) if len % 8 == 0 => raw
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            (1, len) if len % 4 == 0 => raw
                .chunks_exact(4)
                .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
                .collect(),
            (2, _) => raw.iter().map(|&b| f64::from(b)).collect(),
            (kind, _) => bail!("{name}: a tensor of type {kind} is not read here"),
        }
    };
    Ok(Some(values))
}

fn ints(node: &NodeProto, name: &str) -> TractResult<Vec<i64>> {
    Ok(node.get_attr_opt_vec::<i64>(name)?.unwrap_or_default())
}
