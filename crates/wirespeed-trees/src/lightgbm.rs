//! LightGBM's text model format (`Booster.save_model`), loaded into the
//! same flat ensemble as XGBoost.
//!
//! Hand-written because no maintained crate reads it: the format is `key=value`
//! lines, a header and then one block per tree. What matters is
//! reproducing LightGBM's decisions exactly:
//! - numerical splits go left on `x <= threshold` (a double); for `f32`
//!   inputs that is `x < t` with `t` the least `f32` above the threshold;
//! - `decision_type` packs the categorical flag (bit 0), `default_left`
//!   (bit 1) and the missing type (bits 2-3: None, Zero, NaN). With None,
//!   NaN is read as 0; with Zero, NaN and values within 1e-35 of 0 follow
//!   the default; with NaN, NaN follows the default;
//! - categorical splits send the categories in their bitset left and
//!   everything else (negative after truncation, unlisted, NaN) right;
//! - leaf values are doubles, summed in `f64` (`TreeEnsemble::leaf64`).
//!
//! Random forests (`average_output`) average their iterations. Linear
//! trees and objectives other than binary, multiclass and identity-link
//! regression are refused.

use std::collections::HashMap;
use std::path::Path;

use crate::forest::{Node, SplitRule, TreeEnsemble, MAX_FEATURES};
use crate::{LoadError, Objective};

fn invalid(message: impl Into<String>) -> LoadError {
    LoadError::LightGbm(message.into())
}

/// Loads a LightGBM text model file.
pub fn load_lightgbm(path: impl AsRef<Path>) -> Result<TreeEnsemble, LoadError> {
    let bytes = std::fs::read(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| invalid(format!("not UTF-8 text: {e}")))?;
    parse_lightgbm(text)
}

/// One `key=value` block: the header or a tree.
fn block<'a>(
    lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> HashMap<&'a str, &'a str> {
    let mut map = HashMap::new();
    while let Some(line) = lines.peek() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("Tree=") && !map.is_empty() || line == "end of trees" {
            break;
        }
        lines.next();
        if line.is_empty() {
            if map.is_empty() {
                continue;
            }
            break;
        }
        if let Some((k, v)) = line.split_once('=') {
            map.insert(k, v);
        } else {
            map.insert(line, "");
        }
    }
    map
}

fn field<'a>(map: &HashMap<&str, &'a str>, key: &str, what: &str) -> Result<&'a str, LoadError> {
    map.get(key)
        .copied()
        .ok_or_else(|| invalid(format!("{what} has no '{key}'")))
}

fn number<T: std::str::FromStr>(text: &str, key: &str, what: &str) -> Result<T, LoadError> {
    text.trim()
        .parse()
        .map_err(|_| invalid(format!("{what}: '{key}' is not a number: '{text}'")))
}

fn list<T: std::str::FromStr>(
    map: &HashMap<&str, &str>,
    key: &str,
    len: usize,
    what: &str,
) -> Result<Vec<T>, LoadError> {
    let text = field(map, key, what)?;
    let values: Vec<T> = text
        .split_whitespace()
        .map(|v| number(v, key, what))
        .collect::<Result<_, _>>()?;
    if values.len() != len {
        return Err(invalid(format!(
            "{what}: '{key}' has {} values, expected {len}",
            values.len()
        )));
    }
    Ok(values)
}

/// The least `f32` above `t`: for every `f32` x, `x <= t` exactly when
/// `x < strict(t)`.
fn strict(t: f64) -> f32 {
    let f = t as f32;
    if f64::from(f) > t {
        f
    } else {
        f.next_up()
    }
}

/// Parses the text of a LightGBM model file.
pub fn parse_lightgbm(text: &str) -> Result<TreeEnsemble, LoadError> {
    let mut lines = text.lines().peekable();
    let header = block(&mut lines);
    if !header.contains_key("tree") {
        return Err(invalid(
            "the file does not start with LightGBM's 'tree' header",
        ));
    }
    // A random forest (`boosting: rf`) averages its iterations' trees.
    let average_output = header.contains_key("average_output");
    let what = "the header";
    let max_feature: usize = number(
        field(&header, "max_feature_idx", what)?,
        "max_feature_idx",
        what,
    )?;
    let num_features = max_feature + 1;
    if num_features >= MAX_FEATURES {
        return Err(LoadError::unsupported(format!(
            "{num_features} features are too many"
        )));
    }
    let num_class: usize = number(field(&header, "num_class", what)?, "num_class", what)?;
    let per_iteration: usize = match header.get("num_tree_per_iteration") {
        Some(v) => number(v, "num_tree_per_iteration", what)?,
        None => num_class,
    };
    let (objective, sigmoid_scale) =
        Objective::from_lightgbm_line(field(&header, "objective", what)?)?;
    let groups = if objective == Objective::LgbMulticlass {
        num_class
    } else {
        1
    };
    if per_iteration != groups || groups == 0 {
        return Err(invalid(format!(
            "num_tree_per_iteration is {per_iteration} for {groups} output groups; \
             one-vs-all and multi-output models are not supported"
        )));
    }

    let mut ensemble = TreeEnsemble {
        nodes: Vec::new(),
        roots: Vec::new(),
        tree_groups: Vec::new(),
        base_margins: vec![0.0; groups],
        num_features,
        objective,
        cat_sets: Vec::new(),
        special: false,
        leaf64: Vec::new(),
        sigmoid_scale,
        depths: Vec::new(),
    };
    loop {
        match lines.peek().map(|l| l.trim_end_matches('\r')) {
            None => return Err(invalid("the file ends before 'end of trees'")),
            Some("end of trees") => break,
            Some("") => {
                lines.next();
            }
            Some(line) if line.starts_with("Tree=") => {
                let t = ensemble.roots.len();
                let tree = block(&mut lines);
                add_tree(&mut ensemble, t, &tree, groups)?;
            }
            Some(other) => {
                return Err(invalid(format!(
                    "expected 'Tree=' or 'end of trees', found '{}'",
                    other.chars().take(40).collect::<String>()
                )))
            }
        }
    }
    if ensemble.roots.is_empty() {
        return Err(invalid("the model has no trees"));
    }
    if average_output {
        // LightGBM divides each class's sum by the iterations; each leaf
        // divided instead, in f64, differs from it far below f32's
        // precision.
        let iterations = (ensemble.roots.len() / groups).max(1) as f64;
        for leaf in &mut ensemble.leaf64 {
            *leaf /= iterations;
        }
    }
    ensemble.finalize();
    Ok(ensemble)
}

fn add_tree(
    e: &mut TreeEnsemble,
    t: usize,
    tree: &HashMap<&str, &str>,
    groups: usize,
) -> Result<(), LoadError> {
    let what = format!("tree {t}");
    let what = what.as_str();
    if tree.get("is_linear").is_some_and(|v| v.trim() != "0") {
        return Err(LoadError::unsupported(format!("{what} is a linear tree")));
    }
    let num_leaves: usize = number(field(tree, "num_leaves", what)?, "num_leaves", what)?;
    if num_leaves == 0 {
        return Err(invalid(format!("{what} has no leaves")));
    }
    let leaf_value: Vec<f64> = list(tree, "leaf_value", num_leaves, what)?;
    let offset = e.nodes.len();
    let root = u32::try_from(offset)
        .ok()
        .filter(|&r| r < (1 << 31))
        .ok_or_else(|| LoadError::unsupported("more than 2^31 nodes"))?;
    e.roots.push(root);
    e.tree_groups.push((t % groups) as u32);
    // Internal nodes first (0..n), then the leaves (n..n + num_leaves).
    let n = num_leaves - 1;
    e.nodes.resize(offset + n + num_leaves, Node::leaf(0.0));
    e.leaf64.resize(offset + n + num_leaves, 0.0);
    for (j, &v) in leaf_value.iter().enumerate() {
        if !v.is_finite() {
            return Err(invalid(format!("{what}: leaf {j} is {v}")));
        }
        e.nodes[offset + n + j] = Node::leaf(v as f32);
        e.leaf64[offset + n + j] = v;
    }
    if n == 0 {
        return Ok(());
    }
    let split_feature: Vec<i64> = list(tree, "split_feature", n, what)?;
    let threshold: Vec<f64> = list(tree, "threshold", n, what)?;
    let decision_type: Vec<u8> = list(tree, "decision_type", n, what)?;
    let left_child: Vec<i64> = list(tree, "left_child", n, what)?;
    let right_child: Vec<i64> = list(tree, "right_child", n, what)?;
    let num_cat: usize = match tree.get("num_cat") {
        Some(v) => number(v, "num_cat", what)?,
        None => 0,
    };
    let (cat_boundaries, cat_threshold): (Vec<usize>, Vec<u32>) = if num_cat > 0 {
        let boundaries: Vec<usize> = list(tree, "cat_boundaries", num_cat + 1, what)?;
        let words = field(tree, "cat_threshold", what)?
            .split_whitespace()
            .map(|v| number(v, "cat_threshold", what))
            .collect::<Result<Vec<u32>, _>>()?;
        if boundaries.windows(2).any(|w| w[0] > w[1]) || boundaries.last() != Some(&words.len()) {
            return Err(invalid(format!(
                "{what}: cat_boundaries do not fit cat_threshold"
            )));
        }
        (boundaries, words)
    } else {
        (Vec::new(), Vec::new())
    };

    // Every node reached exactly once from the root: a tree, so prediction ends.
    let mut seen_internal = vec![false; n];
    let mut seen_leaf = vec![false; num_leaves];
    let mut stack = vec![0usize];
    seen_internal[0] = true;
    let abs = |c: i64| -> usize {
        if c >= 0 {
            offset + c as usize
        } else {
            offset + n + (!c) as usize
        }
    };
    while let Some(i) = stack.pop() {
        for child in [left_child[i], right_child[i]] {
            let fresh = if child >= 0 {
                (child as usize) < n && !std::mem::replace(&mut seen_internal[child as usize], true)
            } else {
                ((!child) as usize) < num_leaves
                    && !std::mem::replace(&mut seen_leaf[(!child) as usize], true)
            };
            if !fresh || child == 0 {
                return Err(invalid(format!(
                    "{what}: node {i} has an invalid or repeated child {child}"
                )));
            }
            if child >= 0 {
                stack.push(child as usize);
            }
        }
        let feature = split_feature[i];
        if feature < 0 || feature as usize >= e.num_features {
            return Err(invalid(format!(
                "{what}: node {i} splits on feature {feature}, but the model has {}",
                e.num_features
            )));
        }
        let d = decision_type[i];
        let missing = (d >> 2) & 3;
        if missing == 3 {
            return Err(invalid(format!(
                "{what}: node {i} has an unknown missing type"
            )));
        }
        let rule = SplitRule {
            default_left: d & 2 != 0,
            zero_missing: missing == 1,
            nan_as_zero: missing != 2,
        };
        let (left, right) = (abs(left_child[i]) as u32, abs(right_child[i]) as u32);
        e.nodes[offset + i] = if d & 1 != 0 {
            let k = threshold[i];
            let cat = (k >= 0.0 && k.fract() == 0.0 && (k as usize) < num_cat)
                .then_some(k as usize)
                .ok_or_else(|| invalid(format!("{what}: node {i} names categorical set {k}")))?;
            let words = &cat_threshold[cat_boundaries[cat]..cat_boundaries[cat + 1]];
            let set = u32::try_from(e.cat_sets.len())
                .map_err(|_| LoadError::unsupported("too many categorical splits"))?;
            e.cat_sets.push(words.len() as u32);
            e.cat_sets.extend_from_slice(words);
            // NaN always goes right, whatever the missing type.
            let rule = SplitRule::default();
            Node::categorical(feature as u32, set, true, rule, left, right)
        } else {
            if threshold[i].is_nan() {
                return Err(invalid(format!("{what}: node {i} has a NaN threshold")));
            }
            Node::rule_split(feature as u32, strict(threshold[i]), rule, left, right)
        };
    }
    if seen_internal.iter().any(|s| !s) || seen_leaf.iter().any(|s| !s) {
        return Err(invalid(format!(
            "{what}: some nodes are not reachable from the root"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUMP: &str = "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\n\
        max_feature_idx=1\nobjective=regression\n\nTree=0\nnum_leaves=2\nnum_cat=0\n\
        split_feature=1\nthreshold=0.5\ndecision_type=2\nleft_child=-1\nright_child=-2\n\
        leaf_value=1.25 -2.5\nshrinkage=1\n\n\nend of trees\n";

    #[test]
    fn a_stump_splits_on_less_or_equal() {
        let e = parse_lightgbm(STUMP).unwrap();
        // x <= 0.5 goes left; NaN with missing type None is 0, so left.
        let p = e.predict(&[0.0, 0.5, 0.0, 0.50000006, 0.0, f32::NAN]);
        assert_eq!(p, vec![1.25, -2.5, 1.25]);
    }

    #[test]
    fn strict_thresholds_are_exact() {
        for t in [0.5f64, 0.1, -0.3, 1e-40, 3.4e38, 1.0 / 3.0] {
            let s = strict(t);
            let below = s.next_down();
            assert!(f64::from(below) <= t && f64::from(s) > t, "{t}");
        }
    }

    #[test]
    fn broken_files_say_what_is_wrong() {
        let cases = [
            (
                STUMP.replace("left_child=-1", "left_child=5"),
                "invalid or repeated child",
            ),
            (
                STUMP.replace("split_feature=1", "split_feature=7"),
                "feature 7",
            ),
            (
                STUMP.replace("leaf_value=1.25 -2.5", "leaf_value=1.25"),
                "leaf_value",
            ),
            (STUMP.replace("end of trees\n", ""), "ends before"),
            (
                STUMP.replace("objective=regression", "objective=lambdarank"),
                "lambdarank",
            ),
            (
                STUMP.replace("threshold=0.5", "threshold=x"),
                "not a number",
            ),
            (STUMP[..60].to_owned(), "max_feature_idx"),
        ];
        for (text, words) in cases {
            let e = parse_lightgbm(&text).unwrap_err().to_string();
            assert!(e.contains(words), "{words}: {e}");
        }
    }
}
