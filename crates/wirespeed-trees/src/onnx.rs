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

use crate::ensemble::{Node, TreeEnsemble, MAX_FEATURES};
use crate::{LoadError, Objective};

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

    fn build(
        nodes: &OnnxNodes,
        leaf_weights: &OnnxWeights,
        n_targets: usize,
        post_transform: PostTransform,
        base_values: Vec<f32>,
        kind: Kind,
    ) -> Result<OnnxTrees, LoadError> {
        if n_targets > MAX_TARGETS {
            return Err(LoadError::onnx(format!(
                "{n_targets} targets or classes; at most {MAX_TARGETS} are served"
            )));
        }
        let n = nodes.tree_ids.len();
        let lengths = [
            ("nodes_nodeids", nodes.node_ids.len()),
            ("nodes_featureids", nodes.feature_ids.len()),
            ("nodes_values", nodes.values.len()),
            ("nodes_modes", nodes.modes.len()),
            ("nodes_truenodeids", nodes.true_ids.len()),
            ("nodes_falsenodeids", nodes.false_ids.len()),
        ];
        for (name, len) in lengths {
            if len != n {
                return Err(LoadError::onnx(format!(
                    "{name} has {len} entries, nodes_treeids {n}"
                )));
            }
        }
        if !nodes.missing_tracks_true.is_empty() && nodes.missing_tracks_true.len() != n {
            return Err(LoadError::onnx(format!(
                "nodes_missing_value_tracks_true has {} entries, nodes_treeids {n}",
                nodes.missing_tracks_true.len()
            )));
        }
        if n == 0 {
            return Err(LoadError::onnx("the ensemble has no nodes"));
        }
        let w = leaf_weights.tree_ids.len();
        if leaf_weights.node_ids.len() != w
            || leaf_weights.target_ids.len() != w
            || leaf_weights.weights.len() != w
        {
            return Err(LoadError::onnx(
                "the leaves' tree ids, node ids, targets and weights differ in length",
            ));
        }

        // Trees in the order they first appear, as ONNX Runtime takes them;
        // each node found by (tree, node id).
        let mut tree_order: Vec<i64> = Vec::new();
        let mut by_id = std::collections::HashMap::with_capacity(n);
        for i in 0..n {
            let key = (nodes.tree_ids[i], nodes.node_ids[i]);
            if by_id.insert(key, i).is_some() {
                return Err(LoadError::onnx(format!(
                    "node {} of tree {} appears twice",
                    key.1, key.0
                )));
            }
            if tree_order.last() != Some(&key.0) && !tree_order.contains(&key.0) {
                tree_order.push(key.0);
            }
        }
        let child = |i: usize, id: i64, which: &str| -> Result<usize, LoadError> {
            let tree = nodes.tree_ids[i];
            by_id.get(&(tree, id)).copied().ok_or_else(|| {
                LoadError::onnx(format!(
                    "node {} of tree {tree}: its {which} node {id} does not exist",
                    nodes.node_ids[i]
                ))
            })
        };

        // Each tree's root: the one node of the tree no other node points to.
        let mut pointed = vec![false; n];
        for i in 0..n {
            if nodes.modes[i] != NodeMode::Leaf {
                for (id, which) in [(nodes.true_ids[i], "true"), (nodes.false_ids[i], "false")] {
                    let c = child(i, id, which)?;
                    if c == i {
                        return Err(LoadError::onnx(format!(
                            "node {} of tree {} is its own child",
                            nodes.node_ids[i], nodes.tree_ids[i]
                        )));
                    }
                    pointed[c] = true;
                }
            }
        }
        let mut num_features = 0usize;
        let mut flat: Vec<Node> = Vec::with_capacity(n);
        let mut flat_source: Vec<usize> = Vec::with_capacity(n);
        let mut swapped: Vec<bool> = Vec::with_capacity(n);
        let mut tree_of: Vec<u32> = Vec::with_capacity(n);
        let mut placed: Vec<Option<u32>> = vec![None; n];
        let mut bypassed = vec![false; n];
        let mut roots = Vec::with_capacity(tree_order.len());
        for &tree in &tree_order {
            let mut tree_roots = (0..n).filter(|&i| nodes.tree_ids[i] == tree && !pointed[i]);
            let root = tree_roots.next().ok_or_else(|| {
                LoadError::onnx(format!("tree {tree} has no root (its nodes form a cycle)"))
            })?;
            if tree_roots.next().is_some() {
                return Err(LoadError::onnx(format!(
                    "tree {tree} has more than one root"
                )));
            }
            roots.push(flat.len() as u32);
            let tree_index = roots.len() as u32 - 1;
            // Depth first, each node's index fixed when it is reached;
            // children are patched in once they have theirs.
            // Depth first, each node placed when first reached; a node two
            // parents share (ONNX allows it: a set-membership split is a
            // chain of equality splits to one child) is placed once.
            let mut stack = vec![(root, usize::MAX, false)];
            while let Some((i, parent, is_true)) = stack.pop() {
                // A split whose two branches are one node goes there either
                // way (the opset 5 way to write a one-leaf tree): it is
                // that node, since a node with equal children is a leaf here.
                let mut i = i;
                let mut hops = 0;
                while nodes.modes[i] != NodeMode::Leaf && nodes.true_ids[i] == nodes.false_ids[i] {
                    bypassed[i] = true;
                    i = child(i, nodes.true_ids[i], "true")?;
                    hops += 1;
                    if hops > n {
                        return Err(LoadError::onnx(format!("tree {tree} has a cycle")));
                    }
                }
                let at = placed[i].unwrap_or(flat.len() as u32);
                if parent != usize::MAX {
                    // The true branch is the left child unless swapped.
                    flat[parent].set_child(is_true != swapped[parent], at);
                }
                if placed[i].is_some() {
                    continue;
                }
                placed[i] = Some(at);
                let at = at as usize;
                flat_source.push(i);
                tree_of.push(tree_index);
                if nodes.modes[i] == NodeMode::Leaf {
                    flat.push(Node::leaf(0.0));
                    swapped.push(false);
                    continue;
                }
                let feature = nodes.feature_ids[i];
                if feature < 0 || feature as usize >= MAX_FEATURES {
                    return Err(LoadError::onnx(format!(
                        "node {} of tree {tree} splits on feature {feature}",
                        nodes.node_ids[i]
                    )));
                }
                num_features = num_features.max(feature as usize + 1);
                let tracks_true = nodes.missing_tracks_true.get(i).copied().unwrap_or(false);
                let split = Split::of(nodes.modes[i], nodes.values[i], tracks_true);
                flat.push(split.node(feature as u32));
                swapped.push(split.swapped);
                stack.push((child(i, nodes.false_ids[i], "false")?, at, false));
                stack.push((child(i, nodes.true_ids[i], "true")?, at, true));
            }
        }
        if flat.len() + bypassed.iter().filter(|&&b| b).count() != n {
            return Err(LoadError::onnx(
                "some nodes belong to no tree: no root reaches them",
            ));
        }
        if let Some(tree) = cyclic(&flat, &roots) {
            return Err(LoadError::onnx(format!(
                "tree {} has a cycle",
                tree_order[tree]
            )));
        }

        // The leaves' weights, by flat index.
        let m = flat.len();
        let mut flat_of = vec![usize::MAX; n];
        for (at, &i) in flat_source.iter().enumerate() {
            flat_of[i] = at;
        }
        let mut per_node: Vec<Vec<(u32, f32)>> = vec![Vec::new(); m];
        for k in 0..w {
            let key = (leaf_weights.tree_ids[k], leaf_weights.node_ids[k]);
            let i = *by_id.get(&key).ok_or_else(|| {
                LoadError::onnx(format!(
                    "a weight names node {} of tree {}, which does not exist",
                    key.1, key.0
                ))
            })?;
            let target = leaf_weights.target_ids[k];
            if target < 0 || target as usize >= n_targets {
                return Err(LoadError::onnx(format!(
                    "a weight of node {} of tree {} goes to target {target}; there are {n_targets}",
                    key.1, key.0
                )));
            }
            // A bypassed split's weights are never reached, as in ONNX Runtime.
            if let Some(list) = per_node.get_mut(flat_of[i]) {
                list.push((target as u32, leaf_weights.weights[k]));
            }
        }
        let mut starts = Vec::with_capacity(m + 1);
        let mut weights = Vec::with_capacity(w);
        let mut unique = vec![0f32; m];
        starts.push(0u32);
        for (at, list) in per_node.iter().enumerate() {
            // Weights on split nodes are never reached, as in ONNX Runtime.
            if flat[at].is_unfinished_leaf() {
                weights.extend_from_slice(list);
                unique[at] = list.iter().map(|&(_, w)| w).sum();
            }
            starts.push(weights.len() as u32);
        }

        // When every leaf has one weight and every tree adds to one
        // target, the sums are the runtime's own margins: each leaf's
        // weight in its node, each tree in its target's group.
        let summed = !matches!(
            kind,
            Kind::Regressor {
                aggregate: Aggregate::Min | Aggregate::Max
            }
        );
        let mut tree_groups: Vec<Option<u32>> = vec![None; roots.len()];
        let mut one_per_leaf = summed;
        for (at, list) in per_node.iter().enumerate() {
            if !one_per_leaf || !flat[at].is_unfinished_leaf() {
                continue;
            }
            let group = &mut tree_groups[tree_of[at] as usize];
            match (list.as_slice(), *group) {
                ([(target, w)], None) => {
                    *group = Some(*target);
                    flat[at] = Node::leaf(*w);
                }
                ([(target, w)], Some(g)) if g == *target => flat[at] = Node::leaf(*w),
                _ => one_per_leaf = false,
            }
        }
        let scored = one_per_leaf.then(|| {
            let mut scored = vec![false; n_targets];
            for g in tree_groups.iter().flatten() {
                scored[*g as usize] = true;
            }
            scored
        });
        let mut trees = TreeEnsemble {
            nodes: flat,
            tree_groups: tree_groups.iter().map(|g| g.unwrap_or(0)).collect(),
            roots,
            base_margins: vec![0.0; n_targets],
            num_features,
            objective: Objective::RegSquaredError,
            cat_sets: Vec::new(),
            special: false,
            leaf64: Vec::new(),
            sigmoid_scale: 1.0,
            depths: Vec::new(),
        };
        trees.finalize();
        Ok(OnnxTrees {
            trees,
            starts,
            weights,
            unique,
            scored,
            n_targets,
            base_values,
            post_transform,
            kind,
        })
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

    /// Predicts `rows` (`stride` features a row, at least
    /// [`num_features`](Self::num_features); NaN is missing): `scores`
    /// gets [`width`](Self::width) values a row and, for a classifier,
    /// `labels` one label a row.
    ///
    /// A two-class classifier follows ONNX Runtime: with weights for one
    /// class only, the second score is `1 - s` (or, with negative weights,
    /// `-s` or the logistic of both signs) and the label is the second
    /// class when the score passes 0.5 (or 0); otherwise its label is the
    /// literal 1 when the second class's score is positive, else 0.
    ///
    /// # Panics
    /// If `stride` is less than `num_features` or the buffers have the wrong length.
    pub fn predict(&self, rows: &[f32], stride: usize, scores: &mut [f32], labels: &mut [i64]) {
        assert!(stride >= self.num_features() && stride > 0);
        let n_rows = rows.len() / stride;
        assert_eq!(scores.len(), n_rows * self.n_targets);
        if let Kind::Classifier { .. } = self.kind {
            assert_eq!(labels.len(), n_rows);
        }
        let t = self.n_targets;
        if let Kind::Regressor { aggregate } = self.kind {
            if t == 1 {
                return self.predict_one_target(rows, stride, aggregate, scores);
            }
        }
        let aggregate = match self.kind {
            Kind::Regressor { aggregate } => aggregate,
            Kind::Classifier { .. } => Aggregate::Sum,
        };
        let mut sums = vec![Score::default(); n_rows * t];
        if let Some(scored) = &self.scored {
            let mut margins = vec![0f32; n_rows * t];
            self.trees.sum_leaves(rows, stride, &mut margins);
            for (s, (&value, &has)) in sums
                .iter_mut()
                .zip(margins.iter().zip(scored.iter().cycle()))
            {
                *s = Score { value, has };
            }
        } else {
            self.trees.walk(rows, stride, |row, _, leaf| {
                let range = self.starts[leaf] as usize..self.starts[leaf + 1] as usize;
                let row_sums = &mut sums[row * t..(row + 1) * t];
                for &(target, w) in &self.weights[range] {
                    let s = &mut row_sums[target as usize];
                    s.value = match aggregate {
                        Aggregate::Sum | Aggregate::Average => s.value + w,
                        Aggregate::Min if s.has && s.value <= w => s.value,
                        Aggregate::Max if s.has && s.value >= w => s.value,
                        Aggregate::Min | Aggregate::Max => w,
                    };
                    s.has = true;
                }
            });
        }
        let mut row_scores = Vec::with_capacity(t);
        for (r, row) in sums.chunks_exact_mut(t).enumerate() {
            let out = &mut scores[r * t..(r + 1) * t];
            match &self.kind {
                Kind::Regressor { aggregate } => {
                    self.finish_targets(row, *aggregate, out);
                }
                Kind::Classifier {
                    labels: classes,
                    binary_case,
                    weights_all_positive,
                } => {
                    row_scores.clear();
                    row_scores.extend_from_slice(row);
                    labels[r] = self.finish_classes(
                        &mut row_scores,
                        classes,
                        *binary_case,
                        *weights_all_positive,
                        out,
                    );
                }
            }
        }
    }

    /// A regressor with one target: ONNX Runtime's single-score path, in
    /// which `PROBIT` is the only transform applied.
    fn predict_one_target(
        &self,
        rows: &[f32],
        stride: usize,
        aggregate: Aggregate,
        scores: &mut [f32],
    ) {
        let mut sums = vec![Score::default(); scores.len()];
        if self.scored.is_some() {
            let mut margins = vec![0f32; scores.len()];
            self.trees.sum_leaves(rows, stride, &mut margins);
            for (s, value) in sums.iter_mut().zip(margins) {
                *s = Score { value, has: true };
            }
        } else {
            self.trees.walk(rows, stride, |row, _, leaf| {
                let w = self.unique[leaf];
                let s = &mut sums[row];
                s.value = match aggregate {
                    Aggregate::Sum | Aggregate::Average => s.value + w,
                    Aggregate::Min if s.has && s.value <= w => s.value,
                    Aggregate::Max if s.has && s.value >= w => s.value,
                    Aggregate::Min | Aggregate::Max => w,
                };
                s.has = true;
            });
        }
        let origin = if self.base_values.len() == 1 {
            self.base_values[0]
        } else {
            0.0
        };
        let trees = self.num_trees() as f32;
        for (out, s) in scores.iter_mut().zip(&sums) {
            let value = match aggregate {
                Aggregate::Sum => s.value + origin,
                Aggregate::Average => s.value / trees + origin,
                Aggregate::Min | Aggregate::Max if s.has => s.value + origin,
                Aggregate::Min | Aggregate::Max => origin,
            };
            *out = self.post_transform.apply_one(value);
        }
    }

    /// A regressor's row of several targets: base values, then the transform.
    fn finish_targets(&self, row: &mut [Score], aggregate: Aggregate, out: &mut [f32]) {
        let use_base = self.base_values.len() == row.len();
        let trees = self.num_trees() as f32;
        for (j, (s, o)) in row.iter().zip(out.iter_mut()).enumerate() {
            let base = if use_base { self.base_values[j] } else { 0.0 };
            let value = match aggregate {
                Aggregate::Sum if use_base => s.value + base,
                Aggregate::Sum => s.value,
                Aggregate::Average if use_base => s.value / trees + base,
                Aggregate::Average => s.value / trees,
                Aggregate::Min | Aggregate::Max => base + if s.has { s.value } else { 0.0 },
            };
            *o = Score { value, has: s.has }.written();
        }
        self.post_transform.apply(out);
    }

    /// A classifier's row: its scores into `out` and its label.
    fn finish_classes(
        &self,
        row: &mut Vec<Score>,
        labels: &[i64],
        binary_case: bool,
        weights_all_positive: bool,
        out: &mut [f32],
    ) -> i64 {
        let base = &self.base_values;
        if row.len() > 2 {
            for (s, &b) in row.iter_mut().zip(base) {
                s.value = if s.has { s.value + b } else { b };
                s.has = true;
            }
            // The first greatest of the scored classes.
            let mut best: Option<usize> = None;
            for (k, s) in row.iter().enumerate() {
                if s.has && best.is_none_or(|b| s.value > row[b].value) {
                    best = Some(k);
                }
            }
            for (o, s) in out.iter_mut().zip(row.iter()) {
                *o = s.written();
            }
            self.post_transform.apply(out);
            return labels[best.unwrap_or(0)];
        }
        // Two classes: ONNX Runtime's binary rules.
        let mut second = -1;
        match base.len() {
            2 if row[1].has => {
                row[1].value = base[1] + row[0].value;
                row[0].value = -row[1].value;
            }
            2 => {
                row[1].value += base[1];
                row[0].value += base[0];
            }
            1 => {
                row[0].value += base[0];
                if !row[1].has {
                    row.pop();
                }
            }
            0 => {
                second = 3;
                if !row[1].has {
                    row.pop();
                }
            }
            _ => {}
        }
        let positive = if row.len() == 2 && row[1].has {
            row[1].value
        } else if row[0].has {
            row[0].value
        } else {
            0.0
        };
        let label = if binary_case {
            let (passes, pass, fail) = if weights_all_positive {
                (positive > 0.5, 0, 1)
            } else {
                (positive > 0.0, 2, 3)
            };
            second = if passes { pass } else { fail };
            if passes {
                labels[1]
            } else {
                labels[0]
            }
        } else if positive > 0.0 {
            1
        } else {
            0
        };
        out.fill(0.0);
        if row.len() == 2 {
            out[0] = row[0].written();
            out[1] = row[1].written();
            self.post_transform.apply(out);
            return label;
        }
        let s = row[0].written();
        match (self.post_transform, second) {
            (PostTransform::Probit, _) => out[0] = probit(s),
            (_, 0 | 1) => {
                out[0] = 1.0 - s;
                out[1] = s;
            }
            (PostTransform::Logistic, 2 | 3) => {
                out[0] = logistic(-s);
                out[1] = logistic(s);
            }
            (_, 2 | 3) => {
                out[0] = -s;
                out[1] = s;
            }
            _ => out[0] = s,
        }
        label
    }
}

/// The first tree (by index) in which a walk from the root can come back
/// to a node it has passed, before the leaves point at themselves.
fn cyclic(flat: &[Node], roots: &[u32]) -> Option<usize> {
    // 0: not reached, 1: on the current path, 2: done.
    let mut state = vec![0u8; flat.len()];
    for (tree, &root) in roots.iter().enumerate() {
        // (node, whether its children have been pushed)
        let mut stack = vec![(root as usize, false)];
        while let Some((i, expanded)) = stack.pop() {
            if expanded {
                state[i] = 2;
                continue;
            }
            match state[i] {
                1 => return Some(tree),
                2 => continue,
                _ => {}
            }
            state[i] = 1;
            stack.push((i, true));
            if !flat[i].is_unfinished_leaf() {
                for child in flat[i].children() {
                    match state[child as usize] {
                        1 => return Some(tree),
                        0 => stack.push((child as usize, false)),
                        _ => {}
                    }
                }
            }
        }
    }
    None
}

/// A node's decision in this runtime's form.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// `x < value` (or `x == value`) goes left.
    value: f32,
    equals: bool,
    /// The left child is the false branch.
    swapped: bool,
    /// NaN goes to the true branch.
    nan_true: bool,
}

impl Split {
    /// ONNX's `mode` on threshold `t` as a less-than (or equality) test.
    fn of(mode: NodeMode, t: f32, tracks_true: bool) -> Split {
        let nan_true = tracks_true || mode == NodeMode::BranchNeq;
        let less = |value: f32, swapped: bool| Split {
            value,
            equals: false,
            swapped,
            nan_true,
        };
        // `x < -inf` holds for no x: a test that always (swapped) or
        // never goes to the true branch.
        let never = less(f32::NEG_INFINITY, false);
        let always = less(f32::NEG_INFINITY, true);
        if t.is_nan() {
            return if mode == NodeMode::BranchNeq {
                always
            } else {
                never
            };
        }
        match mode {
            NodeMode::BranchLt => less(t, false),
            NodeMode::BranchGte => less(t, true),
            // x <= +inf holds for every number; else x <= t is x < next_up(t).
            NodeMode::BranchLeq if t == f32::INFINITY => always,
            NodeMode::BranchLeq => less(t.next_up(), false),
            NodeMode::BranchGt if t == f32::INFINITY => never,
            NodeMode::BranchGt => less(t.next_up(), true),
            NodeMode::BranchEq => Split {
                value: t,
                equals: true,
                swapped: false,
                nan_true,
            },
            NodeMode::BranchNeq => Split {
                value: t,
                equals: true,
                swapped: true,
                nan_true,
            },
            NodeMode::Leaf => never,
        }
    }

    /// The node, its children still to be patched in.
    fn node(self, feature: u32) -> Node {
        // NaN goes left when the side it goes to is the left one.
        let default_left = self.nan_true != self.swapped;
        // Placeholder children (non-zero, so the node is not a leaf),
        // set as the children are placed.
        if self.equals {
            Node::equals(feature, self.value, default_left, u32::MAX, u32::MAX)
        } else {
            Node::split(feature, self.value, default_left, u32::MAX, u32::MAX)
        }
    }
}

impl PostTransform {
    /// The transform of a row of two or more scores, as ONNX Runtime's
    /// `write_scores` computes it (the linear models' too).
    pub fn apply(self, scores: &mut [f32]) {
        transform(self, scores);
    }

    /// The transform of one score alone: ONNX Runtime applies only
    /// `PROBIT` to a single score.
    pub fn apply_one(self, score: f32) -> f32 {
        if self == PostTransform::Probit {
            probit(score)
        } else {
            score
        }
    }
}

/// ONNX Runtime's `write_scores` for a row of two or more scores.
fn transform(post: PostTransform, scores: &mut [f32]) {
    match post {
        PostTransform::None => {}
        PostTransform::Probit => scores.iter_mut().for_each(|s| *s = probit(*s)),
        PostTransform::Logistic => scores.iter_mut().for_each(|s| *s = logistic(*s)),
        PostTransform::Softmax => {
            let max = scores
                .iter()
                .fold(-f32::MAX, |m, &s| if s > m { s } else { m });
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
        PostTransform::SoftmaxZero => {
            let max = scores
                .iter()
                .fold(-f32::MAX, |m, &s| if s > m { s } else { m });
            let exp_neg_max = (-max).exp();
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                if *s > 0.000_000_1 || *s < -0.000_000_1 {
                    *s = (*s - max).exp();
                    sum += *s;
                } else {
                    *s *= exp_neg_max;
                }
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
    }
}

/// ONNX Runtime's logistic function, exact on both sides of zero.
fn logistic(x: f32) -> f32 {
    let v = 1.0 / (1.0 + (-x.abs()).exp());
    if x < 0.0 {
        1.0 - v
    } else {
        v
    }
}

/// ONNX Runtime's probit: `sqrt(2) * erfinv(2x - 1)` with its
/// approximation of `erfinv`.
fn probit(x: f32) -> f32 {
    std::f32::consts::SQRT_2 * erf_inv(2.0 * x - 1.0)
}

fn erf_inv(x: f32) -> f32 {
    let sign = if x < 0.0 { -1.0f32 } else { 1.0 };
    let x = (1.0 - x) * (1.0 + x);
    let log = x.ln();
    let v = 2.0 / (std::f32::consts::PI * 0.147) + 0.5 * log;
    let v2 = 1.0 / 0.147f32 * log;
    let v3 = -v + (v * v - v2).sqrt();
    sign * v3.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One stump on feature 0: node 0 splits at `t` with `mode`, leaf 1
    /// (true) and leaf 2 (false); `weights` are (leaf, class, weight).
    fn stump(
        mode: NodeMode,
        t: f32,
        tracks_true: bool,
        weights: &[(i64, i64, f32)],
    ) -> (OnnxNodes, OnnxWeights) {
        let nodes = OnnxNodes {
            tree_ids: vec![0, 0, 0],
            node_ids: vec![0, 1, 2],
            feature_ids: vec![0, 0, 0],
            values: vec![t, 0.0, 0.0],
            modes: vec![mode, NodeMode::Leaf, NodeMode::Leaf],
            true_ids: vec![1, 0, 0],
            false_ids: vec![2, 0, 0],
            missing_tracks_true: vec![tracks_true, false, false],
        };
        let weights = OnnxWeights {
            tree_ids: vec![0; weights.len()],
            node_ids: weights.iter().map(|w| w.0).collect(),
            target_ids: weights.iter().map(|w| w.1).collect(),
            weights: weights.iter().map(|w| w.2).collect(),
        };
        (nodes, weights)
    }

    fn regress(mode: NodeMode, t: f32, tracks_true: bool, xs: &[f32]) -> Vec<f32> {
        let (nodes, weights) = stump(mode, t, tracks_true, &[(1, 0, 1.0), (2, 0, 2.0)]);
        let trees = OnnxTrees::regressor(
            &nodes,
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap();
        let mut out = vec![0.0; xs.len()];
        trees.predict(xs, 1, &mut out, &mut []);
        out
    }

    /// Every mode decides as its comparison does, at and around the
    /// threshold, at the infinities, and for NaN with and without
    /// `missing_value_tracks_true`.
    #[test]
    fn every_mode_decides_as_its_comparison() {
        let t = 0.5f32;
        let xs = [
            f32::NEG_INFINITY,
            t.next_down(),
            t,
            t.next_up(),
            f32::INFINITY,
            f32::NAN,
        ];
        type Compare = fn(f32, f32) -> bool;
        let cases: [(NodeMode, Compare); 6] = [
            (NodeMode::BranchLeq, |x, t| x <= t),
            (NodeMode::BranchLt, |x, t| x < t),
            (NodeMode::BranchGte, |x, t| x >= t),
            (NodeMode::BranchGt, |x, t| x > t),
            (NodeMode::BranchEq, |x, t| x == t),
            (NodeMode::BranchNeq, |x, t| x != t),
        ];
        for threshold in [t, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            for (mode, cmp) in cases {
                for tracks in [false, true] {
                    let got = regress(mode, threshold, tracks, &xs);
                    let want: Vec<f32> = xs
                        .iter()
                        .map(|&x| {
                            let truth = cmp(x, threshold) || (tracks && x.is_nan());
                            if truth {
                                1.0
                            } else {
                                2.0
                            }
                        })
                        .collect();
                    assert_eq!(got, want, "{mode:?} {threshold} tracks_true={tracks}");
                }
            }
        }
    }

    fn classify(
        weights: &[(i64, i64, f32)],
        labels: &[i64],
        base: &[f32],
        post: PostTransform,
    ) -> (Vec<i64>, Vec<f32>) {
        let (nodes, weights) = stump(NodeMode::BranchLeq, 0.0, false, weights);
        let trees =
            OnnxTrees::classifier(&nodes, &weights, labels.to_vec(), post, base.to_vec()).unwrap();
        let mut scores = vec![0.0; 4];
        let mut out = vec![0; 2];
        trees.predict(&[-1.0, 1.0], 1, &mut scores, &mut out);
        (out, scores)
    }

    /// ONNX Runtime 1.32's answers for two-class stumps (rows -1 and 1),
    /// written out from running its TreeEnsembleClassifier.
    #[test]
    fn two_classes_follow_onnx_runtime() {
        use PostTransform::*;
        let both = [(1, 0, 0.7), (1, 1, 0.3), (2, 0, 0.2), (2, 1, 0.8)];
        assert_eq!(
            classify(&both, &[0, 1], &[], None),
            (vec![1, 1], vec![0.7, 0.3, 0.2, 0.8])
        );
        assert_eq!(classify(&both, &[5, 9], &[], None).0, vec![1, 1]);
        assert_eq!(
            classify(&[(1, 1, 0.3), (2, 1, 0.8)], &[0, 1], &[], None),
            (vec![0, 1], vec![0.0, 0.3, 0.0, 0.8])
        );
        let (labels, scores) = classify(&[(1, 0, 0.3), (2, 0, 0.8)], &[0, 1], &[], None);
        assert_eq!(labels, vec![0, 1]);
        assert_eq!(scores, vec![0.7, 0.3, 1.0 - 0.8, 0.8]);
        let (labels, scores) = classify(&[(1, 0, -0.3), (2, 0, 0.8)], &[0, 1], &[0.5], Logistic);
        assert_eq!(labels, vec![1, 1]);
        for (got, want) in scores
            .iter()
            .zip([0.450_166_05, 0.549_833_95, 0.214_164_97, 0.785_835])
        {
            assert!((got - want).abs() < 1e-7, "{scores:?}");
        }
        // A score no tree gave is written as zero, its base value dropped.
        assert_eq!(
            classify(&[(1, 1, 0.3), (2, 1, 0.8)], &[0, 1], &[0.1, 0.3], None),
            (vec![0, 0], vec![0.0, 0.3, 0.0, 0.3])
        );
        assert_eq!(
            classify(&both, &[0, 1], &[0.1, 0.2], None),
            (vec![1, 1], vec![-0.9, 0.9, -0.4, 0.4])
        );
        assert_eq!(
            classify(&[(1, 0, -0.7), (2, 1, 0.2)], &[0, 1], &[], None),
            (vec![0, 1], vec![0.7, -0.7, 0.0, 0.2])
        );
    }

    /// Two splits that share a child (a set-membership chain), and a
    /// cycle, which is refused.
    #[test]
    fn shared_children_are_placed_once_and_cycles_refused() {
        use NodeMode::*;
        let nodes = |true_of_2: i64| OnnxNodes {
            tree_ids: vec![0; 4],
            node_ids: vec![0, 1, 2, 3],
            feature_ids: vec![0; 4],
            values: vec![1.0, 2.0, 0.0, 0.0],
            modes: vec![
                BranchEq,
                BranchEq,
                if true_of_2 == 0 { Leaf } else { BranchLeq },
                Leaf,
            ],
            true_ids: vec![2, 2, true_of_2, 0],
            false_ids: vec![1, 3, 1, 0],
            missing_tracks_true: vec![],
        };
        let weights = OnnxWeights {
            tree_ids: vec![0, 0],
            node_ids: vec![2, 3],
            target_ids: vec![0, 0],
            weights: vec![10.0, 20.0],
        };
        let member = OnnxTrees::regressor(
            &nodes(0),
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap();
        let mut out = [0.0; 4];
        member.predict(&[1.0, 2.0, 3.0, f32::NAN], 1, &mut out, &mut []);
        assert_eq!(out, [10.0, 10.0, 20.0, 20.0]);
        let err = OnnxTrees::regressor(
            &nodes(1),
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
    }

    /// 64 splits whose both children are the next split: 2^64 paths, one
    /// graph of 65 nodes, measured and walked in its size.
    #[test]
    fn a_chain_of_shared_children_loads_in_its_size() {
        let n = 64i64;
        let nodes = OnnxNodes {
            tree_ids: vec![0; n as usize + 1],
            node_ids: (0..=n).collect(),
            feature_ids: vec![0; n as usize + 1],
            values: vec![0.5; n as usize + 1],
            modes: (0..=n)
                .map(|i| {
                    if i < n {
                        NodeMode::BranchLt
                    } else {
                        NodeMode::Leaf
                    }
                })
                .collect(),
            true_ids: (1..=n + 1).collect(),
            false_ids: (1..=n + 1).collect(),
            missing_tracks_true: vec![],
        };
        let weights = OnnxWeights {
            tree_ids: vec![0],
            node_ids: vec![n],
            target_ids: vec![0],
            weights: vec![3.0],
        };
        let trees = OnnxTrees::regressor(
            &nodes,
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap();
        let mut out = [0.0; 2];
        trees.predict(&[0.0, 1.0], 1, &mut out, &mut []);
        assert_eq!(out, [3.0, 3.0]);
    }

    #[test]
    fn bad_trees_are_load_errors() {
        let (mut nodes, weights) = stump(NodeMode::BranchLeq, 0.0, false, &[(1, 0, 1.0)]);
        nodes.true_ids[0] = 7;
        let err = OnnxTrees::regressor(
            &nodes,
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("true node 7 does not exist"),
            "{err}"
        );
        let (mut nodes, weights) = stump(NodeMode::BranchLeq, 0.0, false, &[(1, 0, 1.0)]);
        nodes.false_ids[0] = 0;
        assert!(OnnxTrees::regressor(
            &nodes,
            &weights,
            1,
            Aggregate::Sum,
            PostTransform::None,
            vec![]
        )
        .is_err());
        let (nodes, weights) = stump(NodeMode::BranchLeq, 0.0, false, &[(1, 3, 1.0)]);
        let err = OnnxTrees::regressor(
            &nodes,
            &weights,
            2,
            Aggregate::Sum,
            PostTransform::None,
            vec![],
        )
        .unwrap_err();
        assert!(err.to_string().contains("target 3"), "{err}");
    }
}
