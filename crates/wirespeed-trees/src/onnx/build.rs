//! Building an ensemble from ONNX's attributes: every length and index
//! checked, each tree flattened depth first into the runtime's node array
//! (a node two parents share placed once, a split whose branches meet
//! bypassed, cycles refused), and the leaves' weights attached.

use super::*;
use crate::forest::{Node, MAX_FEATURES};
use crate::Objective;

impl OnnxTrees {
    pub(super) fn build(
        nodes: &OnnxNodes,
        leaf_weights: &OnnxWeights,
        n_targets: usize,
        post_transform: PostTransform,
        base_values: Vec<f32>,
        kind: Kind,
    ) -> Result<OnnxTrees, LoadError> {
        check_lengths(nodes, leaf_weights, n_targets)?;
        let index = Index::of(nodes)?;
        let flat = index.flatten()?;
        let leaves = Leaves::attach(&index, &flat, leaf_weights, n_targets)?;
        let Flat {
            nodes: mut flat,
            tree_of,
            roots,
            num_features,
            ..
        } = flat;
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
        for (at, list) in leaves.per_node.iter().enumerate() {
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
            starts: leaves.starts,
            weights: leaves.weights,
            unique: leaves.unique,
            scored,
            n_targets,
            base_values,
            post_transform,
            kind,
        })
    }
}

/// Every attribute of the nodes and of the leaves has one entry per node
/// (or per weight), and the targets are few enough.
fn check_lengths(
    nodes: &OnnxNodes,
    leaf_weights: &OnnxWeights,
    n_targets: usize,
) -> Result<(), LoadError> {
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
    Ok(())
}

/// The nodes found by (tree, node id), the trees in the order they first
/// appear (as ONNX Runtime takes them), and which nodes another points to.
struct Index<'a> {
    nodes: &'a OnnxNodes,
    by_id: std::collections::HashMap<(i64, i64), usize>,
    tree_order: Vec<i64>,
    pointed: Vec<bool>,
}

impl<'a> Index<'a> {
    fn of(nodes: &'a OnnxNodes) -> Result<Index<'a>, LoadError> {
        let n = nodes.tree_ids.len();
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
        let mut index = Index {
            nodes,
            by_id,
            tree_order,
            pointed: vec![false; n],
        };
        // Each tree's root: the one node of the tree no other node points to.
        for i in 0..n {
            if nodes.modes[i] != NodeMode::Leaf {
                for (id, which) in [(nodes.true_ids[i], "true"), (nodes.false_ids[i], "false")] {
                    let c = index.child(i, id, which)?;
                    if c == i {
                        return Err(LoadError::onnx(format!(
                            "node {} of tree {} is its own child",
                            nodes.node_ids[i], nodes.tree_ids[i]
                        )));
                    }
                    index.pointed[c] = true;
                }
            }
        }
        Ok(index)
    }

    /// Node `i`'s child `id` (`which` branch, for the error).
    fn child(&self, i: usize, id: i64, which: &str) -> Result<usize, LoadError> {
        let tree = self.nodes.tree_ids[i];
        self.by_id.get(&(tree, id)).copied().ok_or_else(|| {
            LoadError::onnx(format!(
                "node {} of tree {tree}: its {which} node {id} does not exist",
                self.nodes.node_ids[i]
            ))
        })
    }

    /// Tree `tree`'s one root.
    fn root(&self, tree: i64) -> Result<usize, LoadError> {
        let n = self.nodes.tree_ids.len();
        let mut roots = (0..n).filter(|&i| self.nodes.tree_ids[i] == tree && !self.pointed[i]);
        let root = roots.next().ok_or_else(|| {
            LoadError::onnx(format!("tree {tree} has no root (its nodes form a cycle)"))
        })?;
        if roots.next().is_some() {
            return Err(LoadError::onnx(format!(
                "tree {tree} has more than one root"
            )));
        }
        Ok(root)
    }

    /// Every tree in the runtime's node array.
    fn flatten(&self) -> Result<Flat, LoadError> {
        let n = self.nodes.tree_ids.len();
        let mut flat = Flat {
            nodes: Vec::with_capacity(n),
            source: Vec::with_capacity(n),
            swapped: Vec::with_capacity(n),
            tree_of: Vec::with_capacity(n),
            placed: vec![None; n],
            bypassed: vec![false; n],
            roots: Vec::with_capacity(self.tree_order.len()),
            num_features: 0,
        };
        for &tree in &self.tree_order {
            let root = self.root(tree)?;
            flat.roots.push(flat.nodes.len() as u32);
            self.place_tree(&mut flat, tree, root)?;
        }
        let bypassed = flat.bypassed.iter().filter(|&&b| b).count();
        if flat.nodes.len() + bypassed != n {
            return Err(LoadError::onnx(
                "some nodes belong to no tree: no root reaches them",
            ));
        }
        if let Some(tree) = cyclic(&flat.nodes, &flat.roots) {
            return Err(LoadError::onnx(format!(
                "tree {} has a cycle",
                self.tree_order[tree]
            )));
        }
        Ok(flat)
    }

    /// Places tree `tree` from `root`, depth first, each node placed when
    /// first reached (a node two parents share, which ONNX allows, since a
    /// set-membership split is a chain of equality splits to one child,
    /// is placed once); children are patched in once they have places.
    fn place_tree(&self, flat: &mut Flat, tree: i64, root: usize) -> Result<(), LoadError> {
        let nodes = self.nodes;
        let n = nodes.tree_ids.len();
        let tree_index = flat.roots.len() as u32 - 1;
        let mut stack = vec![(root, usize::MAX, false)];
        while let Some((i, parent, is_true)) = stack.pop() {
            // A split whose two branches are one node goes there either
            // way (the opset 5 way to write a one-leaf tree): it is that
            // node, since a node with equal children is a leaf here.
            let mut i = i;
            let mut hops = 0;
            while nodes.modes[i] != NodeMode::Leaf && nodes.true_ids[i] == nodes.false_ids[i] {
                flat.bypassed[i] = true;
                i = self.child(i, nodes.true_ids[i], "true")?;
                hops += 1;
                if hops > n {
                    return Err(LoadError::onnx(format!("tree {tree} has a cycle")));
                }
            }
            let at = flat.placed[i].unwrap_or(flat.nodes.len() as u32);
            if parent != usize::MAX {
                // The true branch is the left child unless swapped.
                flat.nodes[parent].set_child(is_true != flat.swapped[parent], at);
            }
            if flat.placed[i].is_some() {
                continue;
            }
            flat.placed[i] = Some(at);
            let at = at as usize;
            flat.source.push(i);
            flat.tree_of.push(tree_index);
            if nodes.modes[i] == NodeMode::Leaf {
                flat.nodes.push(Node::leaf(0.0));
                flat.swapped.push(false);
                continue;
            }
            let feature = nodes.feature_ids[i];
            if feature < 0 || feature as usize >= MAX_FEATURES {
                return Err(LoadError::onnx(format!(
                    "node {} of tree {tree} splits on feature {feature}",
                    nodes.node_ids[i]
                )));
            }
            flat.num_features = flat.num_features.max(feature as usize + 1);
            let tracks_true = nodes.missing_tracks_true.get(i).copied().unwrap_or(false);
            let split = Split::of(nodes.modes[i], nodes.values[i], tracks_true);
            flat.nodes.push(split.node(feature as u32));
            flat.swapped.push(split.swapped);
            stack.push((self.child(i, nodes.false_ids[i], "false")?, at, false));
            stack.push((self.child(i, nodes.true_ids[i], "true")?, at, true));
        }
        Ok(())
    }
}

/// The trees in the runtime's node array, and where each node came from.
struct Flat {
    nodes: Vec<Node>,
    /// Each placed node's index among ONNX's nodes.
    source: Vec<usize>,
    /// Each placed node's left child is its false branch.
    swapped: Vec<bool>,
    /// Each placed node's tree.
    tree_of: Vec<u32>,
    /// Each ONNX node's place, once placed.
    placed: Vec<Option<u32>>,
    /// ONNX nodes that are splits whose branches meet, never placed.
    bypassed: Vec<bool>,
    roots: Vec<u32>,
    num_features: usize,
}

/// The leaves' weights, by place: each node's `(target, weight)` list,
/// and the runtime's flat lists of them.
struct Leaves {
    per_node: Vec<Vec<(u32, f32)>>,
    starts: Vec<u32>,
    weights: Vec<(u32, f32)>,
    unique: Vec<f32>,
}

impl Leaves {
    fn attach(
        index: &Index<'_>,
        flat: &Flat,
        leaf_weights: &OnnxWeights,
        n_targets: usize,
    ) -> Result<Leaves, LoadError> {
        let n = index.nodes.tree_ids.len();
        let w = leaf_weights.tree_ids.len();
        let m = flat.nodes.len();
        let mut flat_of = vec![usize::MAX; n];
        for (at, &i) in flat.source.iter().enumerate() {
            flat_of[i] = at;
        }
        let mut per_node: Vec<Vec<(u32, f32)>> = vec![Vec::new(); m];
        for k in 0..w {
            let key = (leaf_weights.tree_ids[k], leaf_weights.node_ids[k]);
            let i = *index.by_id.get(&key).ok_or_else(|| {
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
            if flat.nodes[at].is_unfinished_leaf() {
                weights.extend_from_slice(list);
                unique[at] = list.iter().map(|&(_, w)| w).sum();
            }
            starts.push(weights.len() as u32);
        }
        Ok(Leaves {
            per_node,
            starts,
            weights,
            unique,
        })
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
