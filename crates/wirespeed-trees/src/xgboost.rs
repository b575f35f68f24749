//! Loading XGBoost's JSON model format (`Booster.save_model("model.json")`,
//! schema versions 1.0 to 3.x) into a [`TreeEnsemble`].
//!
//! The loader refuses what it cannot reproduce exactly (dart, gblinear,
//! categorical splits, multi-target trees, other objectives) instead of
//! mispredicting, and checks every index so prediction needs no bounds
//! logic of its own.

use std::path::Path;

use serde::Deserialize;

use crate::forest::{Node, SplitRule, TreeEnsemble, MAX_FEATURES};
use crate::{LoadError, Objective};

#[derive(Deserialize)]
pub(crate) struct ModelFile {
    pub(crate) learner: Learner,
}

#[derive(Deserialize)]
pub(crate) struct Learner {
    pub(crate) learner_model_param: LearnerModelParam,
    pub(crate) objective: ObjectiveSection,
    pub(crate) gradient_booster: GradientBooster,
}

#[derive(Deserialize)]
pub(crate) struct LearnerModelParam {
    pub(crate) base_score: String,
    pub(crate) num_class: String,
    pub(crate) num_feature: String,
    #[serde(default)]
    pub(crate) num_target: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct ObjectiveSection {
    pub(crate) name: String,
}

#[derive(Deserialize)]
pub(crate) struct GradientBooster {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) model: Option<GbTreeModel>,
}

#[derive(Deserialize)]
pub(crate) struct GbTreeModel {
    pub(crate) trees: Vec<TreeSection>,
    pub(crate) tree_info: Vec<i64>,
}

/// XGBoost writes `default_left` as integers (1.x to 2.x) or bools. Read
/// by a visitor of both rather than serde's untagged enum, which buffered
/// each value and built an error message for every integer (a tenth of the
/// start of a repository of tree models).
pub(crate) struct Flag(pub(crate) bool);

impl Flag {
    fn is_set(&self) -> bool {
        self.0
    }
}

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Flag, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Flag;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a bool or an integer")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Flag, E> {
                Ok(Flag(v != 0))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Flag, E> {
                Ok(Flag(v != 0))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Deserialize)]
pub(crate) struct TreeSection {
    pub(crate) left_children: Vec<i64>,
    pub(crate) right_children: Vec<i64>,
    pub(crate) split_indices: Vec<i64>,
    pub(crate) split_conditions: Vec<f32>,
    pub(crate) default_left: Vec<Flag>,
    #[serde(default)]
    pub(crate) split_type: Vec<i64>,
    #[serde(default)]
    pub(crate) categories_nodes: Vec<i64>,
    #[serde(default)]
    pub(crate) categories_segments: Vec<i64>,
    #[serde(default)]
    pub(crate) categories_sizes: Vec<i64>,
    #[serde(default)]
    pub(crate) categories: Vec<i64>,
    pub(crate) tree_param: TreeParam,
}

#[derive(Deserialize)]
pub(crate) struct TreeParam {
    pub(crate) num_nodes: String,
    #[serde(default)]
    pub(crate) size_leaf_vector: Option<String>,
}

/// Loads an XGBoost JSON model file.
pub fn load_xgboost_json(path: impl AsRef<Path>) -> Result<TreeEnsemble, LoadError> {
    parse_xgboost_json(&std::fs::read(path)?)
}

/// Parses an XGBoost JSON model from memory.
pub fn parse_xgboost_json(bytes: &[u8]) -> Result<TreeEnsemble, LoadError> {
    let file: ModelFile =
        serde_json::from_slice(bytes).map_err(|e| LoadError::format(e.to_string()))?;
    from_file(file)
}

/// Loads an XGBoost UBJSON model file (`save_model("model.ubj")`).
pub fn load_xgboost_ubjson(path: impl AsRef<Path>) -> Result<TreeEnsemble, LoadError> {
    parse_xgboost_ubjson(&std::fs::read(path)?)
}

/// Parses an XGBoost UBJSON model from memory: the same document as the
/// JSON format, in binary, checked the same way.
pub fn parse_xgboost_ubjson(bytes: &[u8]) -> Result<TreeEnsemble, LoadError> {
    let value = crate::ubjson::parse(bytes)?;
    let file: ModelFile =
        serde_json::from_value(value).map_err(|e| LoadError::format(e.to_string()))?;
    from_file(file)
}

/// The scikit-learn estimator an XGBoost model was saved from
/// (`"classifier"`, `"regressor"`, `"ranker"`), as its `scikit_learn`
/// attribute records it in a JSON or UBJSON file; `None` for a Booster
/// saved by itself (or a file of another format), which XGBoost's
/// scikit-learn interface loads as a regressor.
pub fn xgboost_estimator_type(bytes: &[u8]) -> Option<String> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let document: serde_json::Value = if crate::ubjson::looks_like(&bytes[start..]) {
        crate::ubjson::parse(bytes).ok()?
    } else {
        serde_json::from_slice(bytes).ok()?
    };
    let saved = document
        .pointer("/learner/attributes/scikit_learn")?
        .as_str()?;
    let saved: serde_json::Value = serde_json::from_str(saved).ok()?;
    Some(saved.get("_estimator_type")?.as_str()?.to_owned())
}

pub(crate) fn from_file(file: ModelFile) -> Result<TreeEnsemble, LoadError> {
    let learner = file.learner;
    let param = &learner.learner_model_param;

    let booster = &learner.gradient_booster;
    if booster.name != "gbtree" {
        return Err(LoadError::unsupported(format!(
            "booster '{}' is not supported; only 'gbtree' is (dart and gblinear are refused rather than mispredicted)",
            booster.name
        )));
    }
    let model = booster
        .model
        .as_ref()
        .ok_or_else(|| LoadError::format("gbtree booster has no 'model'"))?;

    let objective = Objective::from_xgboost_name(&learner.objective.name)?;
    let num_features: usize = parse_param("num_feature", &param.num_feature)?;
    let num_class: usize = parse_param("num_class", &param.num_class)?;
    if let Some(t) = &param.num_target {
        let num_target: usize = parse_param("num_target", t)?;
        if num_target > 1 {
            return Err(LoadError::unsupported(format!(
                "multi-target models (num_target = {num_target}) are not supported"
            )));
        }
    }
    if num_features == 0 {
        return Err(LoadError::format("num_feature is 0"));
    }
    // Feature indices share their word with the split flags.
    if num_features >= MAX_FEATURES {
        return Err(LoadError::unsupported(format!(
            "{num_features} features are too many (at most {})",
            MAX_FEATURES - 1
        )));
    }
    let groups = if objective.is_multiclass() {
        if num_class < 2 {
            return Err(LoadError::format(format!(
                "objective {} with num_class = {num_class}",
                objective.name()
            )));
        }
        num_class
    } else {
        if num_class > 1 {
            return Err(LoadError::format(format!(
                "objective {} with num_class = {num_class}",
                objective.name()
            )));
        }
        1
    };
    let base_margins = base_margins(&param.base_score, objective, groups)?;

    if model.tree_info.len() != model.trees.len() {
        return Err(LoadError::format(format!(
            "tree_info has {} entries for {} trees",
            model.tree_info.len(),
            model.trees.len()
        )));
    }

    let mut nodes = Vec::new();
    let mut cat_sets = Vec::new();
    let mut roots = Vec::with_capacity(model.trees.len());
    let mut tree_groups = Vec::with_capacity(model.trees.len());
    for (t, (tree, &group)) in model.trees.iter().zip(&model.tree_info).enumerate() {
        if group < 0 || group as usize >= groups {
            return Err(LoadError::format(format!(
                "tree {t} adds to group {group}, but the model has {groups}"
            )));
        }
        let root = u32::try_from(nodes.len()).ok().filter(|&r| r < (1 << 31));
        let root = root.ok_or_else(|| LoadError::unsupported("more than 2^31 nodes"))?;
        flatten_tree(t, tree, num_features, &mut nodes, &mut cat_sets)?;
        roots.push(root);
        tree_groups.push(group as u32);
    }
    let mut ensemble = TreeEnsemble {
        nodes,
        roots,
        tree_groups,
        base_margins,
        num_features,
        objective,
        special: false,
        cat_sets,
        leaf64: Vec::new(),
        sigmoid_scale: 1.0,
        depths: Vec::new(),
    };
    ensemble.finalize();
    Ok(ensemble)
}

/// The categories of each categorical split of tree `t`, by node.
fn categorical_sets(t: usize, tree: &TreeSection) -> Result<Vec<(usize, Vec<i64>)>, LoadError> {
    let n = tree.categories_nodes.len();
    if tree.categories_segments.len() != n || tree.categories_sizes.len() != n {
        return Err(LoadError::format(format!(
            "tree {t}: categories_nodes, categories_segments and categories_sizes differ in length"
        )));
    }
    let mut sets = Vec::with_capacity(n);
    for k in 0..n {
        let (node, start, size) = (
            tree.categories_nodes[k],
            tree.categories_segments[k],
            tree.categories_sizes[k],
        );
        let range = usize::try_from(start)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(s, n)| Some(s..s.checked_add(n)?))
            .filter(|r| r.end <= tree.categories.len());
        let (Ok(node), Some(range)) = (usize::try_from(node), range) else {
            return Err(LoadError::format(format!(
                "tree {t}: categorical split {k} points outside its node or category lists"
            )));
        };
        if tree.split_type.get(node) != Some(&1) {
            return Err(LoadError::format(format!(
                "tree {t}: node {node} has categories but is not a categorical split"
            )));
        }
        let categories = tree.categories[range].to_vec();
        if categories.iter().any(|&c| !(0..1 << 24).contains(&c)) {
            return Err(LoadError::format(format!(
                "tree {t}: node {node} has a category outside 0..2^24"
            )));
        }
        sets.push((node, categories));
    }
    if let Some(node) = tree
        .split_type
        .iter()
        .enumerate()
        .find(|&(i, &s)| s != 0 && !sets.iter().any(|(n, _)| *n == i))
        .map(|(i, _)| i)
    {
        return Err(LoadError::format(format!(
            "tree {t}: node {node} is a categorical split with no categories"
        )));
    }
    Ok(sets)
}

/// Appends a bitset of `categories` (all in 0..2^24) to `cat_sets`: its
/// word count, then the words.
pub(crate) fn push_set(cat_sets: &mut Vec<u32>, categories: &[i64]) {
    let words = categories
        .iter()
        .map(|&c| c as usize / 32 + 1)
        .max()
        .unwrap_or(0);
    cat_sets.push(words as u32);
    let at = cat_sets.len();
    cat_sets.resize(at + words, 0);
    for &c in categories {
        cat_sets[at + c as usize / 32] |= 1 << (c % 32);
    }
}

fn parse_param<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, LoadError> {
    value
        .trim()
        .parse()
        .map_err(|_| LoadError::format(format!("learner_model_param.{name} is '{value}'")))
}

/// `base_score` is a number in prediction space, written `"5E-1"`, or from
/// XGBoost 3.1 on, a bracketed list with one value per group.
fn base_margins(text: &str, objective: Objective, groups: usize) -> Result<Vec<f32>, LoadError> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    let scores = inner
        .split(',')
        .map(|s| parse_param::<f32>("base_score", s))
        .collect::<Result<Vec<f32>, _>>()?;
    let scores = match scores.len() {
        1 => vec![scores[0]; groups],
        n if n == groups => scores,
        n => {
            return Err(LoadError::format(format!(
                "base_score has {n} values for {groups} groups"
            )))
        }
    };
    if objective.has_logistic_link() && scores.iter().any(|&s| !(s > 0.0 && s < 1.0)) {
        return Err(LoadError::format(format!(
            "base_score {text} is outside (0, 1) for {}",
            objective.name()
        )));
    }
    Ok(scores
        .into_iter()
        .map(|s| objective.base_margin(s))
        .collect())
}

/// Appends tree `t`'s nodes to `nodes`, with child indices made absolute,
/// after checking that they form one tree rooted at node 0.
fn flatten_tree(
    t: usize,
    tree: &TreeSection,
    num_features: usize,
    nodes: &mut Vec<Node>,
    cat_sets: &mut Vec<u32>,
) -> Result<(), LoadError> {
    let n: usize = parse_param("num_nodes", &tree.tree_param.num_nodes)?;
    if let Some(size) = &tree.tree_param.size_leaf_vector {
        if parse_param::<usize>("size_leaf_vector", size)? > 1 {
            return Err(LoadError::unsupported(
                "multi-target trees (vector leaves) are not supported",
            ));
        }
    }
    let categorical = categorical_sets(t, tree)?;
    let lengths = [
        ("left_children", tree.left_children.len()),
        ("right_children", tree.right_children.len()),
        ("split_indices", tree.split_indices.len()),
        ("split_conditions", tree.split_conditions.len()),
        ("default_left", tree.default_left.len()),
    ];
    if n == 0 {
        return Err(LoadError::format(format!("tree {t} has no nodes")));
    }
    if let Some((field, len)) = lengths.iter().find(|(_, len)| *len != n) {
        return Err(LoadError::format(format!(
            "tree {t}: {field} has {len} entries for {n} nodes"
        )));
    }

    // Every node reachable from the root exactly once: a tree, so
    // prediction terminates.
    let mut seen = vec![false; n];
    let mut stack = vec![0usize];
    seen[0] = true;
    let offset = nodes.len();
    let mut flat = vec![Node::leaf(0.0); n];
    while let Some(i) = stack.pop() {
        let (left, right) = (tree.left_children[i], tree.right_children[i]);
        if left == -1 {
            if right != -1 {
                return Err(LoadError::format(format!(
                    "tree {t} node {i} has a right child but no left one"
                )));
            }
            flat[i] = Node::leaf(tree.split_conditions[i]);
            continue;
        }
        let feature = tree.split_indices[i];
        if feature < 0 || feature as usize >= num_features {
            return Err(LoadError::format(format!(
                "tree {t} node {i} splits on feature {feature}, but the model has {num_features}"
            )));
        }
        for child in [left, right] {
            if child <= 0 || child as usize >= n || seen[child as usize] {
                return Err(LoadError::format(format!(
                    "tree {t} node {i} has an invalid child {child}"
                )));
            }
            seen[child as usize] = true;
            stack.push(child as usize);
        }
        let abs = |c: i64| (offset + c as usize) as u32;
        let default_left = tree.default_left[i].is_set();
        flat[i] = match categorical.iter().find(|(node, _)| *node == i) {
            // XGBoost sends the listed categories right, everything else
            // (an unlisted or negative category) left, NaN by default_left.
            Some((_, categories)) => {
                let set = u32::try_from(cat_sets.len())
                    .map_err(|_| LoadError::unsupported("too many categorical splits"))?;
                push_set(cat_sets, categories);
                let rule = SplitRule {
                    default_left,
                    ..SplitRule::default()
                };
                Node::categorical(feature as u32, set, false, rule, abs(left), abs(right))
            }
            None => Node::split(
                feature as u32,
                tree.split_conditions[i],
                default_left,
                abs(left),
                abs(right),
            ),
        };
    }
    nodes.extend(flat);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(objective: &str, num_class: u32, tree: &str, tree_info: &str) -> String {
        format!(
            r#"{{"learner":{{"learner_model_param":{{"base_score":"5E-1","num_class":"{num_class}","num_feature":"2"}},
            "objective":{{"name":"{objective}"}},
            "gradient_booster":{{"name":"gbtree","model":{{"trees":[{tree}],"tree_info":{tree_info}}}}}}}}}"#
        )
    }

    const STUMP: &str = r#"{"left_children":[1,-1,-1],"right_children":[2,-1,-1],"split_indices":[1,0,0],
        "split_conditions":[0.5,-0.25,0.75],"default_left":[1,0,0],"tree_param":{"num_nodes":"3"}}"#;

    #[test]
    fn a_stump_predicts_from_a_logitraw_base_score_taken_as_a_margin() {
        let e = parse_xgboost_json(model("binary:logitraw", 0, STUMP, "[0]").as_bytes()).unwrap();
        assert_eq!(e.predict(&[0.0, 0.0]), vec![0.5 - 0.25]);
        assert_eq!(e.predict(&[0.0, 1.0]), vec![0.5 + 0.75]);
        assert_eq!(e.predict(&[0.0, f32::NAN]), vec![0.5 - 0.25]);
    }

    #[test]
    fn unsupported_features_are_refused_by_name() {
        let dart = r#"{"learner":{"learner_model_param":{"base_score":"5E-1","num_class":"0","num_feature":"2"},
            "objective":{"name":"binary:logistic"},"gradient_booster":{"name":"dart","gbtree":{}}}}"#;
        let e = parse_xgboost_json(dart.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("'dart'"), "{e}");

        let categorical = STUMP.replace(r#""tree_param""#, r#""split_type":[1,0,0],"tree_param""#);
        let e = parse_xgboost_json(model("binary:logistic", 0, &categorical, "[0]").as_bytes())
            .unwrap_err();
        assert!(e.to_string().contains("categorical"), "{e}");
    }

    #[test]
    fn corrupt_trees_are_refused_not_trusted() {
        for (from, to) in [
            ("[1,-1,-1]", "[1,-1,7]"),
            ("[2,-1,-1]", "[1,-1,-1]"),
            ("[1,0,0]", "[5,0,0]"),
        ] {
            let bad = STUMP.replacen(from, to, 1);
            let r = parse_xgboost_json(model("binary:logistic", 0, &bad, "[0]").as_bytes());
            assert!(matches!(r, Err(LoadError::Format(_))), "{from} -> {to}");
        }
        let r = parse_xgboost_json(model("binary:logistic", 0, STUMP, "[3]").as_bytes());
        assert!(r.is_err());
    }

    #[test]
    fn malformed_files_name_the_problem() {
        let good = model("binary:logistic", 0, STUMP, "[0]");
        let cases = [
            // Truncated JSON.
            (good[..good.len() / 2].to_owned(), "EOF"),
            // A node missing from the arrays.
            (
                good.replace(r#""num_nodes":"3""#, r#""num_nodes":"4""#),
                "3 entries for 4 nodes",
            ),
            // A child index out of range.
            (good.replace("[2,-1,-1]", "[9,-1,-1]"), "invalid child 9"),
            // A cycle back to the root.
            (good.replace("[2,-1,-1]", "[0,-1,-1]"), "invalid child 0"),
            // A feature beyond the input width.
            (good.replace("[1,0,0]", "[2,0,0]"), "feature 2"),
            // So many features that indices would reach the split flags.
            (
                good.replace(r#""num_feature":"2""#, r#""num_feature":"100000000""#),
                "too many",
            ),
        ];
        for (text, words) in cases {
            let e = parse_xgboost_json(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(words), "{words}: {e}");
        }
    }
}
