//! The in-memory tree ensemble and its prediction loops.
//!
//! All trees live in one flat node array. A node is 16 bytes: the split
//! feature with the default-left flag in its top bit, the threshold (or the
//! leaf value), and two absolute child indices. Index 0 is the first tree's
//! root, which is nobody's child, so `left == 0` marks a leaf.

use crate::Objective;

const DEFAULT_LEFT: u32 = 1 << 31;

/// One node of the flattened ensemble.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Node {
    /// Split feature index, with [`DEFAULT_LEFT`] set when missing values go left.
    feature: u32,
    /// The split threshold, or the leaf value.
    value: f32,
    left: u32,
    right: u32,
}

impl Node {
    pub(crate) fn leaf(value: f32) -> Node {
        Node {
            feature: 0,
            value,
            left: 0,
            right: 0,
        }
    }

    pub(crate) fn split(
        feature: u32,
        threshold: f32,
        default_left: bool,
        left: u32,
        right: u32,
    ) -> Node {
        debug_assert!(feature < DEFAULT_LEFT && left != 0 && right != 0);
        let flag = if default_left { DEFAULT_LEFT } else { 0 };
        Node {
            feature: feature | flag,
            value: threshold,
            left,
            right,
        }
    }

    #[inline(always)]
    fn is_leaf(&self) -> bool {
        self.left == 0
    }

    #[inline(always)]
    fn feature_index(&self) -> usize {
        (self.feature & !DEFAULT_LEFT) as usize
    }
}

/// A loaded, validated tree ensemble ready to predict.
///
/// Built by a loader such as [`crate::load_xgboost_json`]; every child index
/// and feature index has been checked, so prediction cannot go out of bounds
/// or loop.
#[derive(Debug, Clone)]
pub struct TreeEnsemble {
    pub(crate) nodes: Vec<Node>,
    /// Root node index of each tree.
    pub(crate) roots: Vec<u32>,
    /// Output group (class) each tree adds to.
    pub(crate) tree_groups: Vec<u32>,
    /// Starting margin per group.
    pub(crate) base_margins: Vec<f32>,
    pub(crate) num_features: usize,
    pub(crate) objective: Objective,
}

/// Rows per block in batch prediction: small enough that a block's rows and
/// its margins stay in L1 while every tree walks over them.
const ROW_BLOCK: usize = 64;

impl TreeEnsemble {
    /// The number of features each row must have.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// The number of margins per row: the class count for multiclass models, else 1.
    pub fn num_groups(&self) -> usize {
        self.base_margins.len()
    }

    /// The number of trees.
    pub fn num_trees(&self) -> usize {
        self.roots.len()
    }

    /// The objective.
    pub fn objective(&self) -> Objective {
        self.objective
    }

    /// The number of prediction values per row: 1, or the class count for `multi:softprob`.
    pub fn prediction_width(&self) -> usize {
        self.objective.prediction_width(self.num_groups())
    }

    #[inline(always)]
    fn leaf_value(&self, root: u32, row: &[f32]) -> f32 {
        let mut node = &self.nodes[root as usize];
        while !node.is_leaf() {
            let x = row[node.feature_index()];
            // `x < threshold` is false for NaN, so missing values take the
            // default branch only through the explicit check.
            let go_left = if x.is_nan() {
                node.feature & DEFAULT_LEFT != 0
            } else {
                x < node.value
            };
            node = &self.nodes[if go_left { node.left } else { node.right } as usize];
        }
        node.value
    }

    /// Sums the trees for `rows` (row-major, `num_features` per row; NaN is
    /// missing) into `margins` (`num_groups` per row).
    ///
    /// Each row's sum starts at the base margin and adds trees in model
    /// order, the same float additions XGBoost performs.
    ///
    /// # Panics
    /// If `rows` is not a whole number of rows or `margins` has the wrong length.
    pub fn predict_margins(&self, rows: &[f32], margins: &mut [f32]) {
        let nf = self.num_features;
        let groups = self.num_groups();
        assert!(
            nf > 0 && rows.len().is_multiple_of(nf),
            "rows must be a whole number of {nf}-feature rows"
        );
        let n_rows = rows.len() / nf;
        assert_eq!(
            margins.len(),
            n_rows * groups,
            "margins must hold {groups} values per row"
        );

        for (row_block, margin_block) in rows
            .chunks(ROW_BLOCK * nf)
            .zip(margins.chunks_mut(ROW_BLOCK * groups))
        {
            for m in margin_block.chunks_exact_mut(groups) {
                m.copy_from_slice(&self.base_margins);
            }
            for (&root, &group) in self.roots.iter().zip(&self.tree_groups) {
                for (row, m) in row_block
                    .chunks_exact(nf)
                    .zip(margin_block.chunks_exact_mut(groups))
                {
                    m[group as usize] += self.leaf_value(root, row);
                }
            }
        }
    }

    /// Turns margins from [`predict_margins`](Self::predict_margins) into
    /// predictions (`prediction_width` per row) with the objective's transform.
    pub fn transform(&self, margins: &[f32], predictions: &mut [f32]) {
        let groups = self.num_groups();
        let width = self.prediction_width();
        assert_eq!(margins.len() / groups * width, predictions.len());
        for (m, p) in margins
            .chunks_exact(groups)
            .zip(predictions.chunks_exact_mut(width))
        {
            self.objective.transform_row(m, p);
        }
    }

    /// Predicts `rows`, returning `prediction_width` values per row.
    pub fn predict(&self, rows: &[f32]) -> Vec<f32> {
        let n_rows = rows.len() / self.num_features.max(1);
        let mut margins = vec![0.0; n_rows * self.num_groups()];
        self.predict_margins(rows, &mut margins);
        let mut predictions = vec![0.0; n_rows * self.prediction_width()];
        self.transform(&margins, &mut predictions);
        predictions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stumps on feature 0 (threshold 0.5, missing goes left) and
    /// feature 1 (threshold 0, missing goes right).
    fn stumps() -> TreeEnsemble {
        let nodes = vec![
            Node::split(0, 0.5, true, 1, 2),
            Node::leaf(-1.0),
            Node::leaf(1.0),
            Node::split(1, 0.0, false, 4, 5),
            Node::leaf(0.25),
            Node::leaf(0.5),
        ];
        TreeEnsemble {
            nodes,
            roots: vec![0, 3],
            tree_groups: vec![0, 0],
            base_margins: vec![0.0],
            num_features: 2,
            objective: Objective::RegSquaredError,
        }
    }

    #[test]
    fn splits_go_left_on_less_than_and_missing_follows_default() {
        let e = stumps();
        let rows = [0.4, -1.0, 0.5, 0.0, f32::NAN, f32::NAN];
        assert_eq!(e.predict(&rows), vec![-1.0 + 0.25, 1.0 + 0.5, -1.0 + 0.5]);
    }

    #[test]
    fn blocks_do_not_change_results() {
        let e = stumps();
        let rows: Vec<f32> = (0..2 * 1000).map(|i| (i % 7) as f32 / 7.0 - 0.3).collect();
        let batch = e.predict(&rows);
        for (r, row) in rows.chunks(2).enumerate() {
            assert_eq!(batch[r], e.predict(row)[0]);
        }
    }
}
