//! XGBoost's legacy binary model format (`xgboost.model`: what
//! `Booster.save_model` wrote for any name not ending in `.json` or `.ubj`
//! until XGBoost 2.0, and what Triton's FIL backend reads as
//! `model_type: "xgboost"`), read into the same document the JSON loader
//! checks, so one set of checks and one prediction path serve every
//! XGBoost format.
//!
//! Hand-written because no crate reads it (XGBoost 3 itself no longer
//! does). The layout, little-endian, as XGBoost 1.x's `LearnerImpl::Load`
//! and `GBTreeModel::Load` write it:
//!
//! ```text
//! "binf"                      optional magic (1.x writes it)
//! LearnerModelParamLegacy     136 bytes: base_score f32, num_feature u32, num_class i32,
//!                             contain_extra_attrs i32, contain_eval_metrics i32, ...
//! objective name, booster name  each a u64 length and its bytes
//! GBTreeModelParam            160 bytes: num_trees i32, num_parallel_tree i32, ...,
//!                             size_leaf_vector i32 at byte 28
//! num_trees x tree:           TreeParam (148 bytes: num_nodes i32 at byte 4,
//!                             size_leaf_vector i32 at byte 20), then num_nodes x Node
//!                             (20 bytes: parent i32, left i32, right i32,
//!                             split index u32 with default-left in bit 31,
//!                             split condition or leaf value f32), then num_nodes x
//!                             node statistics (16 bytes, unused here), then the leaf
//!                             vector when size_leaf_vector != 0
//! num_trees x i32             tree_info: each tree's output group
//! ```
//!
//! What follows (attributes, evaluation metrics, dart's weights) does not
//! change a prediction and is not read; dart is refused by name like its
//! JSON form.

use crate::xgboost::{
    from_file, Flag, GbTreeModel, GradientBooster, Learner, LearnerModelParam, ModelFile,
    ObjectiveSection, TreeParam, TreeSection,
};
use crate::{LoadError, TreeEnsemble};

const LEARNER_PARAM: usize = 136;
const GBTREE_PARAM: usize = 160;
const TREE_PARAM: usize = 148;
const NODE: usize = 20;
const NODE_STAT: usize = 16;

/// Whether `bytes` start as a legacy binary model saved by XGBoost 1.x.
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(b"binf")
}

/// Loads an XGBoost legacy binary model file (`xgboost.model`).
pub fn load_xgboost_legacy(path: impl AsRef<std::path::Path>) -> Result<TreeEnsemble, LoadError> {
    parse_xgboost_legacy(&std::fs::read(path)?)
}

/// Parses an XGBoost legacy binary model from memory.
pub fn parse_xgboost_legacy(bytes: &[u8]) -> Result<TreeEnsemble, LoadError> {
    from_file(document(bytes)?)
}

/// The model as the JSON loader's document.
fn document(bytes: &[u8]) -> Result<ModelFile, LoadError> {
    let mut r = Reader {
        bytes: bytes.strip_prefix(b"binf").unwrap_or(bytes),
        at: 0,
    };
    let param = r.take(LEARNER_PARAM, "the learner's parameters")?;
    let base_score = f32_at(param, 0);
    let num_feature = u32_at(param, 4);
    let num_class = i32_at(param, 8);
    let objective = r.string("the objective's name")?;
    let booster = r.string("the booster's name")?;
    // Another booster is refused by `from_file`, by name, before any tree
    // is read.
    let model = if booster == "gbtree" {
        Some(r.gbtree()?)
    } else {
        None
    };
    Ok(ModelFile {
        learner: Learner {
            learner_model_param: LearnerModelParam {
                base_score: base_score.to_string(),
                num_class: num_class.to_string(),
                num_feature: num_feature.to_string(),
                num_target: None,
            },
            objective: ObjectiveSection { name: objective },
            gradient_booster: GradientBooster {
                name: booster,
                model,
            },
        },
    })
}

/// A cursor over the file that never reads past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], LoadError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(LoadError::format(format!(
                "the file ends inside {what} (byte {} of {}): not a whole XGBoost binary model",
                self.at,
                self.bytes.len()
            )));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn string(&mut self, what: &str) -> Result<String, LoadError> {
        let len = self.take(8, what)?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let text = self.take(len, what)?;
        String::from_utf8(text.to_vec())
            .map_err(|_| LoadError::format(format!("{what} is not text")))
    }

    /// The gbtree booster: its trees and each one's output group.
    fn gbtree(&mut self) -> Result<GbTreeModel, LoadError> {
        let param = self.take(GBTREE_PARAM, "the booster's parameters")?;
        let num_trees = usize::try_from(i32_at(param, 0))
            .map_err(|_| LoadError::format("a negative number of trees"))?;
        // Trees are read one by one: a count the file cannot hold ends at
        // its end, never in an allocation of that count.
        let mut trees = Vec::new();
        for t in 0..num_trees {
            trees.push(self.tree(t)?);
        }
        let info = self.take(4 * num_trees, "tree_info")?;
        let tree_info = (0..num_trees)
            .map(|t| i64::from(i32_at(info, 4 * t)))
            .collect();
        Ok(GbTreeModel { trees, tree_info })
    }

    /// Tree `t` as the JSON document's arrays.
    fn tree(&mut self, t: usize) -> Result<TreeSection, LoadError> {
        let what = format!("tree {t}");
        let param = self.take(TREE_PARAM, &what)?;
        let n = usize::try_from(i32_at(param, 4))
            .map_err(|_| LoadError::format(format!("{what} has a negative node count")))?;
        let size_leaf_vector = i32_at(param, 20);
        // Checked against what is left before anything is allocated.
        let nodes = self.take(n.saturating_mul(NODE), &what)?;
        self.take(n.saturating_mul(NODE_STAT), &what)?;
        if size_leaf_vector != 0 {
            let count = self.take(8, &what)?;
            let count = u64::from_le_bytes(count.try_into().expect("8 bytes"));
            self.take(
                usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(4),
                &what,
            )?;
        }
        let mut tree = TreeSection {
            left_children: Vec::with_capacity(n),
            right_children: Vec::with_capacity(n),
            split_indices: Vec::with_capacity(n),
            split_conditions: Vec::with_capacity(n),
            default_left: Vec::with_capacity(n),
            split_type: Vec::new(),
            categories_nodes: Vec::new(),
            categories_segments: Vec::new(),
            categories_sizes: Vec::new(),
            categories: Vec::new(),
            tree_param: TreeParam {
                num_nodes: n.to_string(),
                size_leaf_vector: Some(size_leaf_vector.to_string()),
            },
        };
        for node in nodes.chunks_exact(NODE) {
            let index = u32_at(node, 12);
            tree.left_children.push(i64::from(i32_at(node, 4)));
            tree.right_children.push(i64::from(i32_at(node, 8)));
            tree.split_indices.push(i64::from(index & 0x7fff_ffff));
            tree.default_left.push(Flag(index >> 31 != 0));
            tree.split_conditions.push(f32_at(node, 16));
        }
        Ok(tree)
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    u32_at(bytes, at) as i32
}

fn f32_at(bytes: &[u8], at: usize) -> f32 {
    f32::from_bits(u32_at(bytes, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-stump binary:logistic model in the legacy layout.
    fn stump(objective: &str, booster: &str) -> Vec<u8> {
        let mut b = b"binf".to_vec();
        let mut param = vec![0u8; LEARNER_PARAM];
        param[0..4].copy_from_slice(&0.5f32.to_le_bytes());
        param[4..8].copy_from_slice(&2u32.to_le_bytes());
        b.extend(param);
        for s in [objective, booster] {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        }
        let mut gbtree = vec![0u8; GBTREE_PARAM];
        gbtree[0..4].copy_from_slice(&1i32.to_le_bytes());
        b.extend(gbtree);
        let mut tree = vec![0u8; TREE_PARAM];
        tree[4..8].copy_from_slice(&3i32.to_le_bytes());
        b.extend(tree);
        // Root: feature 1 < 0.5, missing goes left; two leaves.
        for (parent, left, right, index, value) in [
            (-1i32, 1i32, 2i32, 1u32 | 1 << 31, 0.5f32),
            (i32::MIN, -1, -1, 0, -0.25),
            (0, -1, -1, 0, 0.75),
        ] {
            for word in [
                parent as u32,
                left as u32,
                right as u32,
                index,
                value.to_bits(),
            ] {
                b.extend(word.to_le_bytes());
            }
        }
        b.extend(vec![0u8; 3 * NODE_STAT]);
        b.extend(0i32.to_le_bytes());
        b
    }

    #[test]
    fn a_stump_predicts_as_its_json_form() {
        let e = parse_xgboost_legacy(&stump("binary:logitraw", "gbtree")).unwrap();
        // logitraw takes base_score as a margin, as in the JSON test.
        assert_eq!(e.predict(&[0.0, 0.0]), vec![0.5 - 0.25]);
        assert_eq!(e.predict(&[0.0, 1.0]), vec![0.5 + 0.75]);
        assert_eq!(e.predict(&[0.0, f32::NAN]), vec![0.5 - 0.25]);
        assert!(looks_like(&stump("binary:logitraw", "gbtree")));
    }

    #[test]
    fn truncation_and_other_boosters_are_refused_by_name() {
        let whole = stump("binary:logistic", "gbtree");
        for cut in [3, 100, 160, 200, 400, whole.len() - 1] {
            let e = parse_xgboost_legacy(&whole[..cut]).unwrap_err().to_string();
            assert!(e.contains("the file ends inside"), "{cut}: {e}");
        }
        let e = parse_xgboost_legacy(&stump("binary:logistic", "dart"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("'dart'"), "{e}");
        let e = parse_xgboost_legacy(&stump("rank:pairwise", "gbtree"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank:pairwise"), "{e}");
    }
}
