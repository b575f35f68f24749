//! The tree ensembles: `TreeEnsembleClassifier`, `TreeEnsembleRegressor`
//! and the opset 5 `TreeEnsemble`, read into `wirespeed_trees::onnx` and
//! run as one typed op that splits large batches over the CPU pool.

use std::sync::Arc;

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use wirespeed_core::CpuPool;
use wirespeed_trees::onnx::{
    Aggregate, NodeMode, OnnxNodes, OnnxTrees, OnnxWeights, PostTransform,
};

use super::{floats, ints, owned, tensor_attribute, Built};

fn tree_nodes(node: &NodeProto) -> TractResult<OnnxNodes> {
    let modes = node
        .get_attr_opt_vec::<String>("nodes_modes")?
        .unwrap_or_default()
        .iter()
        .map(|m| NodeMode::parse(m))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OnnxNodes {
        tree_ids: ints(node, "nodes_treeids")?,
        node_ids: ints(node, "nodes_nodeids")?,
        feature_ids: ints(node, "nodes_featureids")?,
        values: floats(node, "nodes_values")?.unwrap_or_default(),
        modes,
        true_ids: ints(node, "nodes_truenodeids")?,
        false_ids: ints(node, "nodes_falsenodeids")?,
        missing_tracks_true: ints(node, "nodes_missing_value_tracks_true")?
            .iter()
            .map(|&v| v != 0)
            .collect(),
    })
}

fn tree_weights(node: &NodeProto, prefix: &str) -> TractResult<OnnxWeights> {
    Ok(OnnxWeights {
        tree_ids: ints(node, &format!("{prefix}_treeids"))?,
        node_ids: ints(node, &format!("{prefix}_nodeids"))?,
        target_ids: ints(node, &format!("{prefix}_ids"))?,
        weights: floats(node, &format!("{prefix}_weights"))?.unwrap_or_default(),
    })
}

fn post_transform(node: &NodeProto) -> TractResult<PostTransform> {
    let name: Option<String> = node.get_attr_opt("post_transform")?;
    Ok(PostTransform::parse(name.as_deref().unwrap_or("NONE"))?)
}

pub(super) fn tree_classifier(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let ints_labels = node.get_attr_opt_vec::<i64>("classlabels_int64s")?;
    let text_labels = node.get_attr_opt_vec::<String>("classlabels_strings")?;
    let (labels, names) = match (ints_labels, text_labels) {
        (Some(labels), None) => (labels, None),
        (None, Some(names)) => ((0..names.len() as i64).collect(), Some(Arc::new(names))),
        _ => bail!(
            "a TreeEnsembleClassifier needs one of classlabels_int64s and classlabels_strings"
        ),
    };
    let trees = OnnxTrees::classifier(
        &tree_nodes(node)?,
        &tree_weights(node, "class")?,
        labels,
        post_transform(node)?,
        floats(node, "base_values")?.unwrap_or_default(),
    )?;
    Trees::built(trees, names)
}

pub(super) fn tree_regressor(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let aggregate: Option<String> = node.get_attr_opt("aggregate_function")?;
    let n_targets: Option<i64> = node.get_attr_opt("n_targets")?;
    let n_targets = n_targets.unwrap_or(1);
    ensure!(n_targets >= 1, "n_targets is {n_targets}");
    let trees = OnnxTrees::regressor(
        &tree_nodes(node)?,
        &tree_weights(node, "target")?,
        n_targets as usize,
        Aggregate::parse(aggregate.as_deref().unwrap_or("SUM"))?,
        post_transform(node)?,
        floats(node, "base_values")?.unwrap_or_default(),
    )?;
    Trees::built(trees, None)
}

/// Batches of at least this many rows, and this many rows times trees,
/// are split over the CPU pool's threads (by rows, so the answers are the
/// same). Below, waking a second thread costs about what it saves
/// (measured: 64 rows through 100 trees take 57 µs on one thread, and no
/// less on two).
const PARALLEL_ROWS: usize = 256;
const PARALLEL_WALKS: usize = 16_384;

/// `TreeEnsemble` (ai.onnx.ml opset 5), whose nodes and leaves are indexed
/// arrays and whose set-membership splits list their members: written as
/// the older operators' nodes (tree, node id), a membership split as a
/// chain of equality splits, and run as a `TreeEnsembleRegressor`.
pub(super) fn tree_ensemble(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let required = |name: &str| -> TractResult<Vec<f64>> {
        tensor_attribute(node, name)?.ok_or_else(|| format_err!("TreeEnsemble needs {name}"))
    };
    let roots = ints(node, "tree_roots")?;
    let features = ints(node, "nodes_featureids")?;
    let n = features.len();
    let modes = required("nodes_modes")?;
    let splits = required("nodes_splits")?;
    let true_ids = ints(node, "nodes_truenodeids")?;
    let false_ids = ints(node, "nodes_falsenodeids")?;
    let true_leaves = ints(node, "nodes_trueleafs")?;
    let false_leaves = ints(node, "nodes_falseleafs")?;
    let tracks = ints(node, "nodes_missing_value_tracks_true")?;
    let leaf_targets = ints(node, "leaf_targetids")?;
    let leaf_weights = required("leaf_weights")?;
    for (name, len) in [
        ("nodes_modes", modes.len()),
        ("nodes_splits", splits.len()),
        ("nodes_truenodeids", true_ids.len()),
        ("nodes_falsenodeids", false_ids.len()),
        ("nodes_trueleafs", true_leaves.len()),
        ("nodes_falseleafs", false_leaves.len()),
    ] {
        ensure!(len == n, "{name} has {len} entries, nodes_featureids {n}");
    }
    ensure!(
        tracks.is_empty() || tracks.len() == n,
        "nodes_missing_value_tracks_true has {} entries, nodes_featureids {n}",
        tracks.len()
    );
    ensure!(
        leaf_targets.len() == leaf_weights.len(),
        "leaf_targetids and leaf_weights differ in length"
    );
    // Each membership split's members, in node order, separated by NaN.
    let members = tensor_attribute(node, "membership_values")?.unwrap_or_default();
    let mut sets = members.split(|m| m.is_nan());
    let mut set_of = vec![Vec::new(); n];
    for (i, &mode) in modes.iter().enumerate() {
        if mode == 6.0 {
            set_of[i] = sets.next().unwrap_or_default().to_vec();
            ensure!(!set_of[i].is_empty(), "membership node {i} has no members");
        }
    }
    let mode_of = |code: f64| -> TractResult<NodeMode> {
        Ok(match code as i64 {
            0 => NodeMode::BranchLeq,
            1 => NodeMode::BranchLt,
            2 => NodeMode::BranchGte,
            3 => NodeMode::BranchGt,
            4 => NodeMode::BranchEq,
            5 => NodeMode::BranchNeq,
            other => bail!("unknown node mode {other}"),
        })
    };
    // Node ids: interior nodes keep their index, leaf j is n + j, and the
    // extra links of membership chains come after.
    let leaf_id = |j: i64| n as i64 + j;
    let mut next_id = n as i64 + leaf_weights.len() as i64;
    let mut nodes = OnnxNodes::default();
    let mut weights = OnnxWeights::default();
    let push = |nodes: &mut OnnxNodes,
                tree: i64,
                id: i64,
                feature: i64,
                value: f32,
                mode: NodeMode,
                yes: i64,
                no: i64,
                nan_true: bool| {
        nodes.tree_ids.push(tree);
        nodes.node_ids.push(id);
        nodes.feature_ids.push(feature);
        nodes.values.push(value);
        nodes.modes.push(mode);
        nodes.true_ids.push(yes);
        nodes.false_ids.push(no);
        nodes.missing_tracks_true.push(nan_true);
    };
    // The last tree (plus one) that reached each node and leaf: one pass
    // over each tree's own nodes, however many trees there are.
    let mut seen_nodes = vec![0usize; n];
    let mut seen_leaves = vec![0usize; leaf_weights.len()];
    for (tree, &root) in roots.iter().enumerate() {
        let stamp = tree + 1;
        let tree = tree as i64;
        ensure!(
            root >= 0 && (root as usize) < n,
            "tree_roots names node {root}; there are {n}"
        );
        let mut stack = vec![root as usize];
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen_nodes[i], stamp) == stamp {
                continue;
            }
            let mut child = |id: i64, leaf: bool, stack: &mut Vec<usize>| -> TractResult<i64> {
                if leaf {
                    ensure!(
                        id >= 0 && (id as usize) < leaf_weights.len(),
                        "node {i} points at leaf {id}; there are {}",
                        leaf_weights.len()
                    );
                    if std::mem::replace(&mut seen_leaves[id as usize], stamp) != stamp {
                        let at = leaf_id(id);
                        push(&mut nodes, tree, at, 0, 0.0, NodeMode::Leaf, 0, 0, false);
                        weights.tree_ids.push(tree);
                        weights.node_ids.push(at);
                        weights.target_ids.push(leaf_targets[id as usize]);
                        weights.weights.push(leaf_weights[id as usize] as f32);
                    }
                    Ok(leaf_id(id))
                } else {
                    ensure!(
                        id >= 0 && (id as usize) < n,
                        "node {i} points at node {id}; there are {n}"
                    );
                    stack.push(id as usize);
                    Ok(id)
                }
            };
            let yes = child(true_ids[i], true_leaves[i] != 0, &mut stack)?;
            let no = child(false_ids[i], false_leaves[i] != 0, &mut stack)?;
            let nan_true = tracks.get(i).is_some_and(|&t| t != 0);
            if modes[i] == 6.0 {
                // x in {m1, m2, ..}: x == m1, else x == m2, .., else false.
                let set = &set_of[i];
                let mut id = i as i64;
                for (k, &member) in set.iter().enumerate() {
                    let last = k + 1 == set.len();
                    let next = if last { no } else { next_id };
                    push(
                        &mut nodes,
                        tree,
                        id,
                        features[i],
                        member as f32,
                        NodeMode::BranchEq,
                        yes,
                        next,
                        nan_true,
                    );
                    if !last {
                        id = next_id;
                        next_id += 1;
                    }
                }
            } else {
                push(
                    &mut nodes,
                    tree,
                    i as i64,
                    features[i],
                    splits[i] as f32,
                    mode_of(modes[i])?,
                    yes,
                    no,
                    nan_true,
                );
            }
        }
    }
    let aggregate = match node.get_attr_opt::<i64>("aggregate_function")?.unwrap_or(1) {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        other => bail!("unknown aggregate_function {other}"),
    };
    let post = match node.get_attr_opt::<i64>("post_transform")?.unwrap_or(0) {
        0 => PostTransform::None,
        1 => PostTransform::Softmax,
        2 => PostTransform::Logistic,
        3 => PostTransform::SoftmaxZero,
        4 => PostTransform::Probit,
        other => bail!("unknown post_transform {other}"),
    };
    let n_targets = node.get_attr_opt::<i64>("n_targets")?.unwrap_or(1);
    ensure!(n_targets >= 1, "n_targets is {n_targets}");
    let trees = OnnxTrees::regressor(
        &nodes,
        &weights,
        n_targets as usize,
        aggregate,
        post,
        vec![],
    )?;
    Trees::built(trees, None)
}

/// A tree ensemble: a regressor's scores, or a classifier's labels and scores.
#[derive(Debug, Clone)]
pub(super) struct Trees {
    trees: Arc<OnnxTrees>,
    /// A classifier's string labels, by index.
    names: Option<Arc<Vec<String>>>,
    /// The server's CPU pool, set once the graph is typed.
    pub(super) pool: Option<CpuPool>,
}

impl PartialEq for Trees {
    fn eq(&self, other: &Trees) -> bool {
        Arc::ptr_eq(&self.trees, &other.trees)
    }
}

impl Eq for Trees {}

impl Trees {
    /// The expansion of `trees`, whose string labels, if any, are `names`.
    fn built(trees: OnnxTrees, names: Option<Arc<Vec<String>>>) -> Built {
        let op = Trees {
            trees: Arc::new(trees),
            names,
            pool: None,
        };
        Ok((expand(op), vec![]))
    }

    pub(super) fn num_trees(&self) -> usize {
        self.trees.num_trees()
    }

    fn is_classifier(&self) -> bool {
        self.trees.labels().is_some()
    }

    fn label_type(&self) -> DatumType {
        if self.names.is_some() {
            DatumType::String
        } else {
            DatumType::I64
        }
    }
}

impl Trees {
    /// Predicts on this thread, or for a large batch on all of the pool's,
    /// each taking whole rows.
    fn predict(&self, rows: &[f32], stride: usize, scores: &mut [f32], labels: &mut [i64]) {
        let n = rows.len() / stride;
        let threads = self.pool.as_ref().map_or(1, CpuPool::threads);
        let (Some(pool), true) = (
            &self.pool,
            threads > 1 && n >= PARALLEL_ROWS && n * self.trees.num_trees() >= PARALLEL_WALKS,
        ) else {
            return self.trees.predict(rows, stride, scores, labels);
        };
        let per = n.div_ceil(threads).next_multiple_of(8);
        let width = self.trees.width();
        let label_chunk = if labels.is_empty() { 0 } else { per };
        let mut labels = labels.chunks_mut(label_chunk.max(1));
        // The first rows on this thread, the others offered to the pool.
        pool.scope(|scope| {
            let mut first = None;
            for (rows, scores) in rows
                .chunks(per * stride)
                .zip(scores.chunks_mut(per * width))
            {
                let labels = if label_chunk == 0 {
                    &mut [][..]
                } else {
                    labels.next().unwrap_or_default()
                };
                if first.is_none() {
                    first = Some((rows, scores, labels));
                    continue;
                }
                let trees = &self.trees;
                scope.spawn(move |_| trees.predict(rows, stride, scores, labels));
            }
            if let Some((rows, scores, labels)) = first {
                self.trees.predict(rows, stride, scores, labels);
            }
        });
    }
}

impl Expansion for Trees {
    fn name(&self) -> StaticName {
        if self.is_classifier() {
            "TreeEnsembleClassifier".into()
        } else {
            "TreeEnsembleRegressor".into()
        }
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "wirespeed-trees: {} trees, {} scores a row",
            self.trees.num_trees(),
            self.trees.width()
        )])
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(if self.is_classifier() { 2 } else { 1 })
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, self.nboutputs()?)?;
        s.equals(&inputs[0].rank, 2)?;
        let scores = outputs.len() - 1;
        s.equals(&outputs[scores].datum_type, DatumType::F32)?;
        s.equals(&outputs[scores].rank, 2)?;
        s.equals(&outputs[scores].shape[0], &inputs[0].shape[0])?;
        s.equals(&outputs[scores].shape[1], self.trees.width().to_dim())?;
        if scores == 1 {
            s.equals(&outputs[0].datum_type, self.label_type())?;
            s.equals(&outputs[0].rank, 1)?;
            s.equals(&outputs[0].shape[0], &inputs[0].shape[0])?;
        }
        Ok(())
    }

    wire_itself!();
}

own_typed_op!(Trees);

impl EvalOp for Trees {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext<'_>, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let shape = input.shape().to_vec();
        let (rows, stride) = (shape[0], shape[1]);
        ensure!(
            stride >= self.trees.num_features(),
            "the trees read feature {} but the rows have {stride} features",
            self.trees.num_features() - 1
        );
        let features = input.cast_to::<f32>()?;
        let features = features.try_as_plain_ram()?;
        let features = features.as_slice::<f32>()?;
        let width = self.trees.width();
        let mut scores = vec![0f32; rows * width];
        let mut labels = vec![0i64; if self.is_classifier() { rows } else { 0 }];
        if rows > 0 && stride > 0 {
            self.predict(features, stride, &mut scores, &mut labels);
        }
        let scores = owned(&[rows, width], scores)?.into_tvalue();
        if !self.is_classifier() {
            return Ok(tvec!(scores));
        }
        let labels = match &self.names {
            None => owned(&[rows], labels)?,
            Some(names) => {
                let text: Vec<String> = labels
                    .iter()
                    .map(|&l| names.get(l as usize).cloned().unwrap_or_default())
                    .collect();
                owned(&[rows], text)?
            }
        };
        Ok(tvec!(labels.into_tvalue(), scores))
    }
}

impl TypedOp for Trees {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let input = inputs[0];
        ensure!(
            input.datum_type != DatumType::F64,
            "{} takes float (or integer) features; this graph gives it doubles: convert the model \
             with float inputs (FloatTensorType, or a float32 sample for skl2onnx's to_onnx)",
            Expansion::name(self)
        );
        ensure!(
            input.datum_type.is_float() || input.datum_type.is_integer(),
            "{} takes numbers, not {:?}",
            Expansion::name(self),
            input.datum_type
        );
        ensure!(
            input.rank() == 2,
            "{} takes rows: a rank-2 input",
            Expansion::name(self)
        );
        if let Ok(features) = input.shape[1].to_usize() {
            ensure!(
                features >= self.trees.num_features(),
                "the trees read feature {} but the input has {features} features",
                self.trees.num_features() - 1
            );
        }
        let rows = input.shape[0].clone();
        let scores = f32::fact(&[rows.clone(), self.trees.width().to_dim()]);
        if !self.is_classifier() {
            return Ok(tvec!(scores));
        }
        Ok(tvec!(self.label_type().fact(&[rows]), scores))
    }

    as_op!();
}
