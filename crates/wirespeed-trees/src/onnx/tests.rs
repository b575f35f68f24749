//! The tree ensembles of ONNX, against ONNX Runtime's arithmetic.

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
