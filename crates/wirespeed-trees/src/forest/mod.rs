//! The forest: a tree ensemble ([`TreeEnsemble`]) in memory, and its
//! prediction loops.
//!
//! All trees live in one flat node array. A node is 16 bytes: the split
//! feature with flags in its top bits, the threshold (or the leaf value, or
//! a categorical split's bitset offset), and two absolute child indices.
//! While a loader builds the array, `left == 0` marks a leaf (index 0 is
//! the first tree's root, nobody's child); [`TreeEnsemble::finalize`] then
//! points each leaf's children at itself, so a walk can take a tree's full
//! depth in steps without asking whether it has arrived.
//!
//! Every split is `x < threshold`, NaN following the default branch: that
//! is XGBoost's rule, and LightGBM's `x <= t` on doubles becomes it exactly
//! for `f32` inputs by taking the least `f32` above `t` as the threshold.
//! Splits that need more (LightGBM's zero-as-missing and NaN-as-zero,
//! categorical sets) carry [`SPECIAL`] and take a slower branch; an
//! ensemble without them never looks.
//!
//! LightGBM sums its leaves in `f64`; its ensembles keep `f64` leaf values
//! beside the nodes and sum and transform in `f64`, so predictions match
//! the package to the last bits of an `f32`.
//!
//! `node.rs` is the node's layout; this file the ensemble and its walks.

use wirespeed_core::CpuPool;

use crate::Objective;

mod node;

pub(crate) use node::*;

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
    /// Categorical sets: each a word count, then that many bitset words.
    pub(crate) cat_sets: Vec<u32>,
    /// Whether any split is [`SPECIAL`].
    pub(crate) special: bool,
    /// LightGBM's leaf values in `f64`, by node index; empty for XGBoost.
    pub(crate) leaf64: Vec<f64>,
    /// LightGBM's `sigmoid:` parameter for binary models.
    pub(crate) sigmoid_scale: f64,
    /// Each tree's depth in splits, set by [`finalize`](Self::finalize).
    pub(crate) depths: Vec<u32>,
}

/// Rows per block in batch prediction: small enough that a block's rows and
/// its margins stay in L1 while every tree walks over them.
const ROW_BLOCK: usize = 64;

/// Rows walked down one tree together.
const LANES: usize = 8;

impl TreeEnsemble {
    /// Completes a loader's ensemble, whose trees it has validated: leaves
    /// point at themselves, and each tree's depth is measured.
    pub(crate) fn finalize(&mut self) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if node.left == 0 {
                *node = Node {
                    feature: 0,
                    value: node.value,
                    left: i as u32,
                    right: i as u32,
                };
            }
        }
        self.special = self.nodes.iter().any(|n| n.feature & SPECIAL != 0);
        // Each node's height once, children before parents: a child two
        // splits share (ONNX's membership chains) is not walked twice, so
        // no graph of shared children costs more than its size.
        let mut height = vec![u32::MAX; self.nodes.len()];
        let mut stack = Vec::new();
        for &root in &self.roots {
            stack.push((root as usize, false));
            while let Some((i, children_done)) = stack.pop() {
                if height[i] != u32::MAX {
                    continue;
                }
                let node = self.nodes[i];
                if node.is_leaf() {
                    height[i] = 0;
                } else if children_done {
                    let below = height[node.left as usize].max(height[node.right as usize]);
                    height[i] = below.saturating_add(1);
                } else {
                    stack.push((i, true));
                    stack.push((node.left as usize, false));
                    stack.push((node.right as usize, false));
                }
            }
        }
        self.depths = self.roots.iter().map(|&r| height[r as usize]).collect();
    }

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

    /// The index of the leaf `row` reaches from `root`.
    #[inline(always)]
    fn leaf<const SPECIAL_SPLITS: bool>(&self, root: u32, row: &[f32]) -> usize {
        let mut index = root as usize;
        loop {
            let node = &self.nodes[index];
            if node.is_leaf() {
                return index;
            }
            index = self.child::<SPECIAL_SPLITS>(node, row[node.feature_index()]);
        }
    }

    /// The child of split `node` that feature value `x` goes to: every walk
    /// takes this one step. `x < threshold` is false for NaN, so a missing
    /// value takes the default branch only through the NaN test; the choice
    /// is a select, not a branch on the data.
    #[inline(always)]
    fn child<const SPECIAL_SPLITS: bool>(&self, node: &Node, x: f32) -> usize {
        let go_left = if SPECIAL_SPLITS && node.feature & SPECIAL != 0 {
            self.special_goes_left(node, x)
        } else {
            (x < node.value) | (x.is_nan() & (node.feature & DEFAULT_LEFT != 0))
        };
        (if go_left { node.left } else { node.right }) as usize
    }

    /// LightGBM's missing-value rules and both libraries' categorical splits.
    #[cold]
    fn special_goes_left(&self, node: &Node, x: f32) -> bool {
        let f = node.feature;
        let mut x = x;
        if x.is_nan() {
            if f & NAN_AS_ZERO == 0 {
                return f & DEFAULT_LEFT != 0;
            }
            x = 0.0;
        }
        if f & EQUALS != 0 {
            return x == node.value;
        }
        if f & CATEGORICAL != 0 {
            let in_set_left = f & CAT_IN_SET_LEFT != 0;
            // XGBoost: a negative category is invalid (not in the set).
            // LightGBM truncates first, so -0.5 is category 0.
            let category = x as i64;
            let valid = category >= 0 && (in_set_left || x >= 0.0);
            let at = node.value.to_bits() as usize;
            let words = self.cat_sets[at] as usize;
            let set = &self.cat_sets[at + 1..at + 1 + words];
            let in_set = valid
                && set
                    .get((category / 32) as usize)
                    .is_some_and(|w| w >> (category % 32) & 1 == 1);
            return in_set == in_set_left;
        }
        if f & ZERO_MISSING != 0 && x.abs() <= 1e-35 {
            return f & DEFAULT_LEFT != 0;
        }
        x < node.value
    }

    /// The leaves [`LANES`] rows reach from `root`, walked in lockstep for
    /// the tree's full `depth`: the rows' node loads do not depend on each
    /// other, so the CPU overlaps them, and with leaves pointing at
    /// themselves no step asks whether a row has arrived. The choice of
    /// child is a select, not a branch.
    #[inline(always)]
    fn leaves<const SPECIAL_SPLITS: bool>(
        &self,
        root: u32,
        depth: u32,
        rows: &[f32],
        nf: usize,
        out: &mut [usize; LANES],
    ) {
        *out = [root as usize; LANES];
        for _ in 0..depth {
            for (k, index) in out.iter_mut().enumerate() {
                let node = &self.nodes[*index];
                *index = self.child::<SPECIAL_SPLITS>(node, rows[k * nf + node.feature_index()]);
            }
        }
    }

    /// Adds each tree's leaf for the rows of `block` (whole rows of `nf`
    /// values) to their margins, tree by tree, [`LANES`] rows at a time.
    #[inline(always)]
    fn add_block<T: Copy + std::ops::AddAssign>(
        &self,
        block: &[f32],
        nf: usize,
        sums: &mut [T],
        leaf: impl Fn(usize) -> T,
    ) {
        let groups = self.num_groups();
        let n = block.len() / nf;
        let whole = n / LANES * LANES;
        let mut lanes = [0usize; LANES];
        for ((&root, &group), &depth) in self.roots.iter().zip(&self.tree_groups).zip(&self.depths)
        {
            let group = group as usize;
            for first in (0..whole).step_by(LANES) {
                let rows = &block[first * nf..(first + LANES) * nf];
                if self.special {
                    self.leaves::<true>(root, depth, rows, nf, &mut lanes);
                } else {
                    self.leaves::<false>(root, depth, rows, nf, &mut lanes);
                }
                for (k, &index) in lanes.iter().enumerate() {
                    sums[(first + k) * groups + group] += leaf(index);
                }
            }
            for r in whole..n {
                let index = self.leaf_index(root, &block[r * nf..(r + 1) * nf]);
                sums[r * groups + group] += leaf(index);
            }
        }
    }

    /// Calls `visit(tree, leaf)` for every tree's leaf for one row, walking
    /// [`LANES`] trees in lockstep: for one row the trees are the
    /// independent walks whose loads the CPU can overlap.
    #[inline(always)]
    fn row_leaves<const SPECIAL_SPLITS: bool>(
        &self,
        row: &[f32],
        mut visit: impl FnMut(usize, usize),
    ) {
        let n = self.roots.len();
        let whole = n / LANES * LANES;
        for first in (0..whole).step_by(LANES) {
            let mut lanes = [0usize; LANES];
            for (lane, &root) in lanes.iter_mut().zip(&self.roots[first..first + LANES]) {
                *lane = root as usize;
            }
            let depth = self.depths[first..first + LANES]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            for _ in 0..depth {
                for index in lanes.iter_mut() {
                    let node = &self.nodes[*index];
                    *index = self.child::<SPECIAL_SPLITS>(node, row[node.feature_index()]);
                }
            }
            for (k, &index) in lanes.iter().enumerate() {
                visit(first + k, index);
            }
        }
        for t in whole..n {
            visit(t, self.leaf::<SPECIAL_SPLITS>(self.roots[t], row));
        }
    }

    /// One row's margins into `margins` (`num_groups`, starting from the base).
    #[inline(always)]
    fn row_margins<T: Copy + std::ops::AddAssign>(
        &self,
        row: &[f32],
        margins: &mut [T],
        leaf: impl Fn(usize) -> T,
    ) {
        let groups = &self.tree_groups;
        let mut add = |t: usize, i: usize| margins[groups[t] as usize] += leaf(i);
        if self.special {
            self.row_leaves::<true>(row, &mut add);
        } else {
            self.row_leaves::<false>(row, &mut add);
        }
    }

    #[inline(always)]
    fn leaf_index(&self, root: u32, row: &[f32]) -> usize {
        if self.special {
            self.leaf::<true>(root, row)
        } else {
            self.leaf::<false>(root, row)
        }
    }

    /// Adds every tree's leaf value to `sums` (`num_groups` a row, not
    /// reset) for the rows of `rows` (`stride` values a row, at least
    /// `num_features`), trees in model order: [`predict_margins`](Self::predict_margins)
    /// without the base margins, for rows wider than the trees read.
    pub(crate) fn sum_leaves(&self, rows: &[f32], stride: usize, sums: &mut [f32]) {
        let groups = self.num_groups();
        let n = rows.len() / stride;
        if n == 1 {
            self.row_margins(&rows[..stride], &mut sums[..groups], |i| {
                self.nodes[i].value
            });
            return;
        }
        for (block, sums) in rows[..n * stride]
            .chunks(ROW_BLOCK * stride)
            .zip(sums.chunks_mut(ROW_BLOCK * groups))
        {
            self.add_block(block, stride, sums, |i| self.nodes[i].value);
        }
    }

    /// Calls `visit(row, tree, leaf)` for every row of `rows` (row-major,
    /// `stride` values a row, at least `num_features`) and every tree; for
    /// each row the trees come in model order. One row walks [`LANES`]
    /// trees in lockstep; more walk [`LANES`] rows down each tree, a block
    /// of [`ROW_BLOCK`] rows at a time, as [`predict_margins`](Self::predict_margins) does.
    pub(crate) fn walk(&self, rows: &[f32], stride: usize, visit: impl FnMut(usize, usize, usize)) {
        if self.special {
            self.walk_with::<true>(rows, stride, visit);
        } else {
            self.walk_with::<false>(rows, stride, visit);
        }
    }

    #[inline(always)]
    fn walk_with<const SPECIAL_SPLITS: bool>(
        &self,
        rows: &[f32],
        stride: usize,
        mut visit: impl FnMut(usize, usize, usize),
    ) {
        debug_assert!(stride >= self.num_features && stride > 0);
        let n = rows.len() / stride;
        if n == 1 {
            self.row_leaves::<SPECIAL_SPLITS>(&rows[..stride], |t, i| visit(0, t, i));
            return;
        }
        let mut lanes = [0usize; LANES];
        for (b, block) in rows[..n * stride].chunks(ROW_BLOCK * stride).enumerate() {
            let first_row = b * ROW_BLOCK;
            let in_block = block.len() / stride;
            let whole = in_block / LANES * LANES;
            for (t, (&root, &depth)) in self.roots.iter().zip(&self.depths).enumerate() {
                for first in (0..whole).step_by(LANES) {
                    let lane_rows = &block[first * stride..(first + LANES) * stride];
                    self.leaves::<SPECIAL_SPLITS>(root, depth, lane_rows, stride, &mut lanes);
                    for (k, &index) in lanes.iter().enumerate() {
                        visit(first_row + first + k, t, index);
                    }
                }
                for r in whole..in_block {
                    let row = &block[r * stride..(r + 1) * stride];
                    visit(first_row + r, t, self.leaf::<SPECIAL_SPLITS>(root, row));
                }
            }
        }
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

        if !self.leaf64.is_empty() {
            self.predict64(rows, margins, None);
            return;
        }
        for (row_block, margin_block) in rows
            .chunks(ROW_BLOCK * nf)
            .zip(margins.chunks_mut(ROW_BLOCK * groups))
        {
            for m in margin_block.chunks_exact_mut(groups) {
                m.copy_from_slice(&self.base_margins);
            }
            self.add_block(row_block, nf, margin_block, |i| self.nodes[i].value);
        }
    }

    /// LightGBM's arithmetic: leaves summed in `f64`, and the transform
    /// (when `predictions` is given) applied in `f64` before rounding.
    fn predict64(&self, rows: &[f32], margins: &mut [f32], mut predictions: Option<&mut [f32]>) {
        let nf = self.num_features;
        let groups = self.num_groups();
        let width = self.prediction_width();
        let mut block = vec![0f64; ROW_BLOCK * groups];
        for (b, row_block) in rows.chunks(ROW_BLOCK * nf).enumerate() {
            let n = row_block.len() / nf;
            let sums = &mut block[..n * groups];
            for m in sums.chunks_exact_mut(groups) {
                for (m, &base) in m.iter_mut().zip(&self.base_margins) {
                    *m = f64::from(base);
                }
            }
            self.add_block(row_block, nf, sums, |i| self.leaf64[i]);
            let first = b * ROW_BLOCK;
            for (r, m) in sums.chunks_exact(groups).enumerate() {
                let row = first + r;
                for (out, &v) in margins[row * groups..(row + 1) * groups].iter_mut().zip(m) {
                    *out = v as f32;
                }
                if let Some(p) = predictions.as_deref_mut() {
                    self.objective.transform_row64(
                        m,
                        self.sigmoid_scale,
                        &mut p[row * width..(row + 1) * width],
                    );
                }
            }
        }
    }

    /// [`predict_margins_and_predictions`](Self::predict_margins_and_predictions)
    /// split by contiguous rows over the threads of `pool`: the same
    /// results, bit for bit (each row is summed by one thread, in tree
    /// order).
    pub fn predict_parallel(
        &self,
        rows: &[f32],
        margins: &mut [f32],
        predictions: &mut [f32],
        pool: &CpuPool,
    ) {
        let nf = self.num_features.max(1);
        let n_rows = rows.len() / nf;
        let threads = pool.threads().clamp(1, n_rows.div_ceil(ROW_BLOCK).max(1));
        if threads == 1 {
            self.predict_margins_and_predictions(rows, margins, predictions);
            return;
        }
        // Whole blocks per thread, so block boundaries match the serial path.
        let per = n_rows.div_ceil(ROW_BLOCK).div_ceil(threads) * ROW_BLOCK;
        let (groups, width) = (self.num_groups(), self.prediction_width());
        pool.scope(|scope| {
            for ((r, m), p) in rows
                .chunks(per * nf)
                .zip(margins.chunks_mut(per * groups))
                .zip(predictions.chunks_mut(per * width))
            {
                scope.spawn(move |_| self.predict_margins_and_predictions(r, m, p));
            }
        });
    }

    /// Margins and predictions in one pass (`margins`: `num_groups` per
    /// row, `predictions`: `prediction_width` per row).
    pub fn predict_margins_and_predictions(
        &self,
        rows: &[f32],
        margins: &mut [f32],
        predictions: &mut [f32],
    ) {
        if self.leaf64.is_empty() {
            self.predict_margins(rows, margins);
            self.transform(margins, predictions);
        } else {
            let n_rows = rows.len() / self.num_features.max(1);
            assert_eq!(margins.len(), n_rows * self.num_groups());
            assert_eq!(predictions.len(), n_rows * self.prediction_width());
            self.predict64(rows, margins, Some(predictions));
        }
    }

    /// Turns margins from [`predict_margins`](Self::predict_margins) into
    /// predictions (`prediction_width` per row) with the objective's transform.
    pub fn transform(&self, margins: &[f32], predictions: &mut [f32]) {
        let groups = self.num_groups();
        let width = self.prediction_width();
        assert_eq!(margins.len() / groups * width, predictions.len());
        let mut wide = vec![0f64; groups];
        for (m, p) in margins
            .chunks_exact(groups)
            .zip(predictions.chunks_exact_mut(width))
        {
            if self.objective.is_lightgbm() {
                for (w, &v) in wide.iter_mut().zip(m) {
                    *w = f64::from(v);
                }
                self.objective.transform_row64(&wide, self.sigmoid_scale, p);
            } else {
                self.objective.transform_row(m, p);
            }
        }
    }

    /// The margins of one row into `out` (`num_groups` values), without
    /// allocating: the embedded path when the raw score is wanted.
    ///
    /// # Panics
    /// If `row` does not have `num_features` values or `out` the wrong length.
    pub fn predict_row_margins(&self, row: &[f32], out: &mut [f32]) {
        assert_eq!(
            row.len(),
            self.num_features,
            "a row has num_features values"
        );
        if self.leaf64.is_empty() {
            out.copy_from_slice(&self.base_margins);
            self.row_margins(row, out, |i| self.nodes[i].value);
        } else {
            self.predict64(row, out, None);
        }
    }

    /// Predicts one row into `out` (`prediction_width` values), without
    /// allocating for models of up to 16 classes: the embedded path.
    ///
    /// # Panics
    /// If `row` does not have `num_features` values or `out` the wrong length.
    pub fn predict_row(&self, row: &[f32], out: &mut [f32]) {
        assert_eq!(
            row.len(),
            self.num_features,
            "a row has num_features values"
        );
        let groups = self.num_groups();
        if groups == 1 && self.leaf64.is_empty() {
            // The common case, without the general path's buffer or the
            // per-tree group look-up; the trees are added in model order.
            let mut margin = self.base_margins[0];
            let mut add = |_: usize, i: usize| margin += self.nodes[i].value;
            if self.special {
                self.row_leaves::<true>(row, &mut add);
            } else {
                self.row_leaves::<false>(row, &mut add);
            }
            self.objective.transform_row(&[margin], out);
            return;
        }
        if groups > 16 {
            out.copy_from_slice(&self.predict(row));
            return;
        }
        if self.leaf64.is_empty() {
            let mut margins = [0f32; 16];
            let margins = &mut margins[..groups];
            margins.copy_from_slice(&self.base_margins);
            self.row_margins(row, margins, |i| self.nodes[i].value);
            self.objective.transform_row(margins, out);
        } else {
            let mut margins = [0f64; 16];
            let margins = &mut margins[..groups];
            for (m, &b) in margins.iter_mut().zip(&self.base_margins) {
                *m = f64::from(b);
            }
            self.row_margins(row, margins, |i| self.leaf64[i]);
            self.objective
                .transform_row64(margins, self.sigmoid_scale, out);
        }
    }

    /// Predicts `rows` (row-major, `num_features` per row; NaN is missing),
    /// returning `prediction_width` values per row. The same as
    /// [`predict`](Self::predict).
    pub fn predict_batch(&self, rows: &[f32]) -> Vec<f32> {
        self.predict(rows)
    }

    /// Predicts `rows`, returning `prediction_width` values per row.
    pub fn predict(&self, rows: &[f32]) -> Vec<f32> {
        let n_rows = rows.len() / self.num_features.max(1);
        let mut margins = vec![0.0; n_rows * self.num_groups()];
        let mut predictions = vec![0.0; n_rows * self.prediction_width()];
        self.predict_margins_and_predictions(rows, &mut margins, &mut predictions);
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
        let mut e = TreeEnsemble {
            nodes,
            roots: vec![0, 3],
            tree_groups: vec![0, 0],
            base_margins: vec![0.0],
            num_features: 2,
            objective: Objective::RegSquaredError,
            cat_sets: Vec::new(),
            special: false,
            leaf64: Vec::new(),
            sigmoid_scale: 1.0,
            depths: Vec::new(),
        };
        e.finalize();
        e
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
