//! One node of the flat array: 16 bytes, the split feature with its flags
//! in the top bits, the threshold (or the leaf value, or a categorical
//! split's bitset offset), and two absolute child indices.

pub(super) const DEFAULT_LEFT: u32 = 1 << 31;
/// The split needs the general decision below.
pub(super) const SPECIAL: u32 = 1 << 30;
/// Categorical: `value`'s bits index the set in `cat_sets`.
pub(super) const CATEGORICAL: u32 = 1 << 29;
/// Categories in the set go left (LightGBM); otherwise they go right (XGBoost).
pub(super) const CAT_IN_SET_LEFT: u32 = 1 << 28;
/// A value within 1e-35 of zero is missing (LightGBM's `missing_type=Zero`).
pub(super) const ZERO_MISSING: u32 = 1 << 27;
/// NaN is read as 0 rather than missing (LightGBM's `missing_type` None or Zero).
pub(super) const NAN_AS_ZERO: u32 = 1 << 26;
/// `x == value` goes left (ONNX's `BRANCH_EQ`, and `BRANCH_NEQ` with its
/// children swapped).
pub(super) const EQUALS: u32 = 1 << 25;
pub(super) const FLAGS: u32 =
    DEFAULT_LEFT | SPECIAL | CATEGORICAL | CAT_IN_SET_LEFT | ZERO_MISSING | NAN_AS_ZERO | EQUALS;
/// Feature indices must stay below the flags.
pub(crate) const MAX_FEATURES: usize = 1 << 25;

/// How a special split decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SplitRule {
    pub(crate) default_left: bool,
    pub(crate) zero_missing: bool,
    pub(crate) nan_as_zero: bool,
}

/// One node of the flattened ensemble.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Node {
    /// Split feature index, with [`DEFAULT_LEFT`] set when missing values go left.
    pub(super) feature: u32,
    /// The split threshold, or the leaf value.
    pub(super) value: f32,
    pub(super) left: u32,
    pub(super) right: u32,
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
        debug_assert!((feature as usize) < MAX_FEATURES && left != 0 && right != 0);
        let flag = if default_left { DEFAULT_LEFT } else { 0 };
        Node {
            feature: feature | flag,
            value: threshold,
            left,
            right,
        }
    }

    /// A numerical split with LightGBM's missing-value rules.
    pub(crate) fn rule_split(
        feature: u32,
        threshold: f32,
        rule: SplitRule,
        left: u32,
        right: u32,
    ) -> Node {
        debug_assert!((feature as usize) < MAX_FEATURES && left != 0 && right != 0);
        let mut flags = 0;
        if rule.zero_missing {
            // NaN is read as 0, which is missing: NaN takes the default too.
            flags |= ZERO_MISSING | SPECIAL;
            if rule.default_left {
                flags |= DEFAULT_LEFT;
            }
        } else if rule.nan_as_zero {
            // NaN read as 0 goes where 0 goes: a default branch, fixed now.
            if 0.0 < threshold {
                flags |= DEFAULT_LEFT;
            }
        } else if rule.default_left {
            flags |= DEFAULT_LEFT;
        }
        Node {
            feature: feature | flags,
            value: threshold,
            left,
            right,
        }
    }

    /// A categorical split on the set at `set` in `cat_sets`.
    pub(crate) fn categorical(
        feature: u32,
        set: u32,
        in_set_left: bool,
        rule: SplitRule,
        left: u32,
        right: u32,
    ) -> Node {
        let mut node = Node::rule_split(
            feature,
            f32::from_bits(set),
            SplitRule::default(),
            left,
            right,
        );
        node.feature |= SPECIAL | CATEGORICAL;
        if rule.default_left {
            node.feature |= DEFAULT_LEFT;
        }
        if rule.nan_as_zero {
            node.feature |= NAN_AS_ZERO;
        }
        if in_set_left {
            node.feature |= CAT_IN_SET_LEFT;
        }
        node
    }

    /// An equality split: `x == value` goes left, NaN follows the default.
    pub(crate) fn equals(
        feature: u32,
        value: f32,
        default_left: bool,
        left: u32,
        right: u32,
    ) -> Node {
        let mut node = Node::split(feature, value, default_left, left, right);
        node.feature |= SPECIAL | EQUALS;
        node
    }

    /// Points the left (or right) child at `at`, for loaders that place a
    /// node before its children.
    pub(crate) fn set_child(&mut self, left: bool, at: u32) {
        if left {
            self.left = at;
        } else {
            self.right = at;
        }
    }

    /// The left and right children of a split.
    pub(crate) fn children(&self) -> [u32; 2] {
        [self.left, self.right]
    }

    /// A leaf, before [`TreeEnsemble::finalize`].
    pub(crate) fn is_unfinished_leaf(&self) -> bool {
        self.left == 0
    }

    /// A leaf, once finalized: both children are itself.
    #[inline(always)]
    pub(super) fn is_leaf(&self) -> bool {
        self.left == self.right
    }

    #[inline(always)]
    pub(super) fn feature_index(&self) -> usize {
        (self.feature & !FLAGS) as usize
    }
}
