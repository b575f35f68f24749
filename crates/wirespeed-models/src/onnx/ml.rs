//! The `ai.onnx.ml` operators wirespeed puts in tract's ONNX register:
//! what scikit-learn, XGBoost and LightGBM models converted by skl2onnx
//! and onnxmltools are made of.
//!
//! - `TreeEnsembleClassifier` and `TreeEnsembleRegressor` run on
//!   wirespeed's tree runtime (`wirespeed_trees::onnx`), not on tract's
//!   own classifier, with ONNX Runtime's arithmetic; the rest of the
//!   graph (casts, scalers, linear models, concatenations) stays tract's.
//! - `LinearClassifier` (scikit-learn's logistic regression, linear SVC)
//!   is one node of its own rather than tract's expansion into six: its
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
//! Each is an [`Expansion`] (tract's way to add an operator: typing rules,
//! then the typed op it wires) around one typed op with its own `eval`.

use std::sync::Arc;

use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use wirespeed_core::CpuPool;
use wirespeed_trees::onnx::{
    Aggregate, NodeMode, OnnxNodes, OnnxTrees, OnnxWeights, PostTransform,
};

/// Gives the tree nodes of `typed` the server's CPU pool, over which they
/// split large batches.
pub(super) fn share_pool(typed: &mut TypedModel, pool: &CpuPool) {
    for node in typed.nodes_mut() {
        if let Some(trees) = node.op_as_mut::<Trees>() {
            trees.pool = Some(pool.clone());
        }
    }
}

/// Puts the operators above in `register`, replacing tract's own where
/// it has one.
pub(super) fn register(register: &mut OnnxOpRegister) {
    register.insert("TreeEnsembleClassifier", tree_classifier);
    register.insert("TreeEnsembleRegressor", tree_regressor);
    register.insert("TreeEnsemble", tree_ensemble);
    register.insert("LinearClassifier", linear_classifier);
    register.insert("ArrayFeatureExtractor", array_feature_extractor);
    register.insert("Scaler", scaler);
    register.insert("Imputer", imputer);
    register.insert("Binarizer", binarizer);
    register.insert("ZipMap", zip_map);
}

type Built = TractResult<(Box<dyn InferenceOp>, Vec<String>)>;

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

fn tree_classifier(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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
    Ok((
        expand(Trees {
            trees: Arc::new(trees),
            names,
            pool: None,
        }),
        vec![],
    ))
}

fn tree_regressor(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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
    Ok((
        expand(Trees {
            trees: Arc::new(trees),
            names: None,
            pool: None,
        }),
        vec![],
    ))
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
fn tree_ensemble(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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
    for (tree, &root) in roots.iter().enumerate() {
        let tree = tree as i64;
        ensure!(
            root >= 0 && (root as usize) < n,
            "tree_roots names node {root}; there are {n}"
        );
        let mut seen_nodes = vec![false; n];
        let mut seen_leaves = vec![false; leaf_weights.len()];
        let mut stack = vec![root as usize];
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen_nodes[i], true) {
                continue;
            }
            let mut child = |id: i64, leaf: bool, stack: &mut Vec<usize>| -> TractResult<i64> {
                if leaf {
                    ensure!(
                        id >= 0 && (id as usize) < leaf_weights.len(),
                        "node {i} points at leaf {id}; there are {}",
                        leaf_weights.len()
                    );
                    if !std::mem::replace(&mut seen_leaves[id as usize], true) {
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
    Ok((
        expand(Trees {
            trees: Arc::new(trees),
            names: None,
            pool: None,
        }),
        vec![],
    ))
}

/// A tree ensemble: a regressor's scores, or a classifier's labels and scores.
#[derive(Debug, Clone)]
struct Trees {
    trees: Arc<OnnxTrees>,
    /// A classifier's string labels, by index.
    names: Option<Arc<Vec<String>>>,
    /// The server's CPU pool, set once the graph is typed.
    pool: Option<CpuPool>,
}

impl PartialEq for Trees {
    fn eq(&self, other: &Trees) -> bool {
        Arc::ptr_eq(&self.trees, &other.trees)
    }
}

impl Eq for Trees {}

impl Trees {
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

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        model.wire_node(prefix, self.clone(), inputs)
    }
}

impl Op for Trees {
    fn name(&self) -> StaticName {
        Expansion::name(self)
    }

    op_as_typed_op!();
}

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
        let scores = Tensor::from_shape(&[rows, width], &scores)?.into_tvalue();
        if !self.is_classifier() {
            return Ok(tvec!(scores));
        }
        let labels = match &self.names {
            None => Tensor::from_shape(&[rows], &labels)?,
            Some(names) => {
                let text: Vec<String> = labels
                    .iter()
                    .map(|&l| names.get(l as usize).cloned().unwrap_or_default())
                    .collect();
                tensor1(&text)
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

fn linear_classifier(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        model.wire_node(prefix, self.clone(), inputs)
    }
}

impl Op for Linear {
    fn name(&self) -> StaticName {
        "LinearClassifier".into()
    }

    op_as_typed_op!();
}

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
                Tensor::from_shape(&[rows], &values)?
            }
            LinearLabels::Text(text) => {
                let values: Vec<String> = chosen
                    .iter()
                    .map(|&k| match (targets, two) {
                        (1, false) => k.to_string(),
                        _ => text[k].clone(),
                    })
                    .collect();
                tensor1(&values)
            }
        };
        Ok(tvec!(
            labels.into_tvalue(),
            Tensor::from_shape(&[rows, width], &scores)?.into_tvalue()
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

fn array_feature_extractor(_ctx: &ParsingContext<'_>, _node: &NodeProto) -> Built {
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

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        model.wire_node(prefix, self.clone(), inputs)
    }
}

impl Op for Extract {
    fn name(&self) -> StaticName {
        "ArrayFeatureExtractor".into()
    }

    op_as_typed_op!();
}

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
                Tensor::from_shape(&out_shape, &values)?
            }
            Err(_) => {
                let x = x.cast_to::<i64>()?;
                let x = x.try_as_plain_ram()?;
                let flat = x.as_slice::<i64>()?;
                let values: Vec<i64> = flat
                    .chunks_exact(last.max(1))
                    .flat_map(|row| picks.iter().map(move |&k| row[k]))
                    .collect();
                Tensor::from_shape(&out_shape, &values)?
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

fn scaler(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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

fn imputer(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
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

fn binarizer(_ctx: &ParsingContext<'_>, node: &NodeProto) -> Built {
    let threshold: Option<f32> = node.get_attr_opt("threshold")?;
    Ok((
        expand(ColumnMap::Binarizer {
            threshold: threshold.unwrap_or(0.0),
        }),
        vec![],
    ))
}

fn zip_map(_ctx: &ParsingContext<'_>, _node: &NodeProto) -> Built {
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

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        model.wire_node(prefix, self.clone(), inputs)
    }
}

impl Op for ColumnMap {
    fn name(&self) -> StaticName {
        self.op_name().into()
    }

    op_as_typed_op!();
}

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
        Ok(tvec!(Tensor::from_shape(&shape, &y)?.into_tvalue()))
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
