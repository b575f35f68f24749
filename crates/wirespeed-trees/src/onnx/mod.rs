//! ONNX's tree ensembles on this runtime: the `ai.onnx.ml` operators
//! `TreeEnsembleClassifier` and `TreeEnsembleRegressor`, as skl2onnx
//! writes random forests and gradient boosting and onnxmltools writes
//! XGBoost and LightGBM models, predicted with ONNX Runtime's arithmetic.
//!
//! The trees become the flat node array every other loader builds, so
//! they are walked by the same lockstep loops; a leaf keeps the list of
//! `(target, weight)` pairs ONNX gives it. Every branch mode becomes this
//! runtime's one test, `x < threshold` with a default branch for NaN, by
//! moving the threshold to the neighbouring `f32` (`x <= t` is `x <
//! next_up(t)`) and swapping the children (`x >= t` is `!(x < t)`);
//! `BRANCH_EQ` and `BRANCH_NEQ` take the slower special split. NaN goes
//! where ONNX Runtime sends it: to the true branch when
//! `nodes_missing_value_tracks_true` says so (and always for `BRANCH_NEQ`,
//! since `NaN != t`), else to the false branch.
//!
//! The arithmetic is ONNX Runtime's (`onnxruntime/core/providers/cpu/ml`),
//! as a client comparing the two will expect, including where the ONNX
//! specification leaves it open: features, thresholds and weights are
//! `f32`; each row's scores start at zero and add the trees in model order;
//! the base values come last; a one-target regressor applies only the
//! `PROBIT` transform; and a two-class classifier derives its second score
//! and its label by ONNX Runtime's binary rules ([`OnnxTrees::predict`]).
//!
//! `build.rs` checks the attributes and flattens the trees; `predict.rs`
//! walks them and finishes the scores as ONNX Runtime does.

mod build;
mod predict;
#[cfg(test)]
mod tests;

use crate::forest::TreeEnsemble;
use crate::LoadError;

/// Scores a row at most: a file cannot make every request allocate
/// without bound.
const MAX_TARGETS: usize = 1 << 20;

/// How a node decides (`nodes_modes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMode {
    /// `x <= t` is true.
    BranchLeq,
    /// `x < t` is true.
    BranchLt,
    /// `x >= t` is true.
    BranchGte,
    /// `x > t` is true.
    BranchGt,
    /// `x == t` is true.
    BranchEq,
    /// `x != t` is true.
    BranchNeq,
    /// A leaf.
    Leaf,
}

impl NodeMode {
    /// Parses one of `nodes_modes`.
    pub fn parse(name: &str) -> Result<NodeMode, LoadError> {
        Ok(match name {
            "BRANCH_LEQ" => NodeMode::BranchLeq,
            "BRANCH_LT" => NodeMode::BranchLt,
            "BRANCH_GTE" => NodeMode::BranchGte,
            "BRANCH_GT" => NodeMode::BranchGt,
            "BRANCH_EQ" => NodeMode::BranchEq,
            "BRANCH_NEQ" => NodeMode::BranchNeq,
            "LEAF" => NodeMode::Leaf,
            other => return Err(LoadError::onnx(format!("unknown node mode '{other}'"))),
        })
    }
}

/// How a regressor combines its trees (`aggregate_function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// The sum of the leaves.
    Sum,
    /// Their mean over the trees.
    Average,
    /// The least leaf.
    Min,
    /// The greatest leaf.
    Max,
}

impl Aggregate {
    /// Parses `aggregate_function`.
    pub fn parse(name: &str) -> Result<Aggregate, LoadError> {
        Ok(match name {
            "SUM" => Aggregate::Sum,
            "AVERAGE" => Aggregate::Average,
            "MIN" => Aggregate::Min,
            "MAX" => Aggregate::Max,
            other => {
                return Err(LoadError::onnx(format!(
                    "unknown aggregate_function '{other}'"
                )))
            }
        })
    }
}

/// What the scores go through last (`post_transform`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostTransform {
    /// Nothing.
    None,
    /// Softmax over a row's scores.
    Softmax,
    /// The logistic function of each score.
    Logistic,
    /// Softmax over a row's non-zero scores.
    SoftmaxZero,
    /// The probit (inverse normal CDF) of each score.
    Probit,
}

impl PostTransform {
    /// Parses `post_transform`.
    pub fn parse(name: &str) -> Result<PostTransform, LoadError> {
        Ok(match name {
            "NONE" => PostTransform::None,
            "SOFTMAX" => PostTransform::Softmax,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            other => return Err(LoadError::onnx(format!("unknown post_transform '{other}'"))),
        })
    }
}

/// The `nodes_*` attributes, one entry a node.
#[derive(Debug, Clone, Default)]
pub struct OnnxNodes {
    /// `nodes_treeids`.
    pub tree_ids: Vec<i64>,
    /// `nodes_nodeids`.
    pub node_ids: Vec<i64>,
    /// `nodes_featureids`.
    pub feature_ids: Vec<i64>,
    /// `nodes_values` (or `nodes_values_as_tensor`, rounded to `f32`).
    pub values: Vec<f32>,
    /// `nodes_modes`.
    pub modes: Vec<NodeMode>,
    /// `nodes_truenodeids`.
    pub true_ids: Vec<i64>,
    /// `nodes_falsenodeids`.
    pub false_ids: Vec<i64>,
    /// `nodes_missing_value_tracks_true`; empty means false for all.
    pub missing_tracks_true: Vec<bool>,
}

/// The leaves' weights (`class_*` or `target_*`), one entry a weight.
#[derive(Debug, Clone, Default)]
pub struct OnnxWeights {
    /// The tree of the weight's leaf.
    pub tree_ids: Vec<i64>,
    /// The weight's leaf.
    pub node_ids: Vec<i64>,
    /// The class or target the weight adds to.
    pub target_ids: Vec<i64>,
    /// The weight.
    pub weights: Vec<f32>,
}

/// What the ensemble predicts.
#[derive(Debug, Clone)]
enum Kind {
    /// `n_targets` values a row, combined by `aggregate`.
    Regressor { aggregate: Aggregate },
    /// A score per class and a label.
    Classifier {
        /// The label values (for string labels, their indices).
        labels: Vec<i64>,
        /// Two classes, and weights for only one of them.
        binary_case: bool,
        /// No weight is negative.
        weights_all_positive: bool,
    },
}

/// An ONNX tree ensemble, loaded and validated, ready to predict.
#[derive(Debug, Clone)]
pub struct OnnxTrees {
    /// The trees, walked by the runtime's loops; its leaves' values are unused.
    trees: TreeEnsemble,
    /// By node index: the leaf's weights are `weights[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    weights: Vec<(u32, f32)>,
    /// By node index, for one-target regressors: the leaf's weights summed.
    unique: Vec<f32>,
    /// When every leaf has one weight and each tree one target: which
    /// targets any tree scores; the leaves' weights are then the nodes'
    /// values, summed by the runtime's own loops.
    scored: Option<Vec<bool>>,
    n_targets: usize,
    base_values: Vec<f32>,
    post_transform: PostTransform,
    kind: Kind,
}

/// One score of a row, and whether any tree gave it a value (ONNX
/// Runtime's `ScoreValue`).
#[derive(Debug, Clone, Copy, Default)]
struct Score {
    value: f32,
    has: bool,
}

impl Score {
    /// What ONNX Runtime writes out (and transforms) for a score: zero
    /// when no tree gave it a value, even if a base value was added.
    fn written(self) -> f32 {
        if self.has {
            self.value
        } else {
            0.0
        }
    }
}

impl OnnxTrees {
    /// A `TreeEnsembleRegressor`.
    pub fn regressor(
        nodes: &OnnxNodes,
        weights: &OnnxWeights,
        n_targets: usize,
        aggregate: Aggregate,
        post_transform: PostTransform,
        base_values: Vec<f32>,
    ) -> Result<OnnxTrees, LoadError> {
        if n_targets == 0 {
            return Err(LoadError::onnx("n_targets must be at least 1"));
        }
        OnnxTrees::build(
            nodes,
            weights,
            n_targets,
            post_transform,
            base_values,
            Kind::Regressor { aggregate },
        )
    }

    /// A `TreeEnsembleClassifier` whose classes are `labels` (for string
    /// labels, pass their indices `0..n` and map the predicted labels back).
    pub fn classifier(
        nodes: &OnnxNodes,
        weights: &OnnxWeights,
        labels: Vec<i64>,
        post_transform: PostTransform,
        base_values: Vec<f32>,
    ) -> Result<OnnxTrees, LoadError> {
        if labels.len() < 2 {
            return Err(LoadError::onnx(format!(
                "a classifier needs at least two class labels, this one has {}",
                labels.len()
            )));
        }
        let mut classes: Vec<i64> = weights.target_ids.clone();
        classes.sort_unstable();
        classes.dedup();
        let kind = Kind::Classifier {
            binary_case: labels.len() == 2 && classes.len() == 1,
            weights_all_positive: !weights.weights.iter().any(|&w| w < 0.0),
            labels: labels.clone(),
        };
        OnnxTrees::build(
            nodes,
            weights,
            labels.len(),
            post_transform,
            base_values,
            kind,
        )
    }

    /// The features a row must have at least: one past the greatest
    /// feature index a split reads.
    pub fn num_features(&self) -> usize {
        self.trees.num_features
    }

    /// The scores a row: the target count, or the class count.
    pub fn width(&self) -> usize {
        self.n_targets
    }

    /// The number of trees.
    pub fn num_trees(&self) -> usize {
        self.trees.roots.len()
    }

    /// The class labels of a classifier.
    pub fn labels(&self) -> Option<&[i64]> {
        match &self.kind {
            Kind::Classifier { labels, .. } => Some(labels),
            Kind::Regressor { .. } => None,
        }
    }
}
