//! Clipper's model selection layer, as an application runs it: its
//! [`Selector`] says which of its candidate models answer each query (one,
//! or a weighted blend of all), and learns from feedback which to prefer.
//! The policies (Exp3, Exp4, fixed, weighted) and their state are in
//! `policy.rs`.
//!
//! A query's *key* (a user id, Clipper's `uid`) selects the state it is
//! answered and learned with: each key has its own, and a query without
//! one shares the application's.

use wirespeed_core::{Tensor, TensorData};

/// One model an application can answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The model.
    pub model: String,
    /// Its version; `None` for the one served by default.
    pub version: Option<String>,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}:{v}", self.model),
            None => f.write_str(&self.model),
        }
    }
}

/// Who answers one query.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// One candidate, by index.
    One(usize),
    /// Every candidate, its outputs averaged with these weights (one per
    /// candidate, summing to 1).
    Blend(Vec<f64>),
}

/// A candidate whose prediction a piece of feedback is scored against,
/// and the probability with which it was drawn for it (1 where every
/// candidate is scored).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// The candidate, by index.
    pub candidate: usize,
    /// The probability it was drawn with, in (0, 1].
    pub probability: f64,
}

/// What an application's selector reports, for the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelectionReport {
    /// The policy's name (`exp3`, `exp4`, `fixed`, `weighted`).
    pub policy: &'static str,
    /// Per candidate: queries it was chosen for (or blended into).
    pub selections: Vec<u64>,
    /// Per candidate: its weight in the state shared by queries without
    /// a key, normalised to sum to 1.
    pub weights: Vec<f64>,
    /// Per candidate: answers cut at the latency objective.
    pub stragglers: Vec<u64>,
    /// Feedback calls learned from.
    pub feedback: u64,
    /// Keys (users) with a state of their own now.
    pub keys: u64,
    /// Keys whose state was dropped to make room (least recently used).
    pub evicted: u64,
}

/// An application's policy and its state: which candidates answer a
/// query, and what feedback teaches it. Shared by every request of the
/// application; implementations synchronise inside.
pub trait Selector: Send + Sync {
    /// The candidate models, in the application's order.
    fn candidates(&self) -> &[Candidate];

    /// The request parameter whose value is a query's key (`uid`).
    fn key(&self) -> &str;

    /// Who answers a query of `key` (`None`: no key given).
    fn choose(&self, key: Option<&str>) -> Choice;

    /// The candidates whose predictions feedback for a query of `key` is
    /// scored against: none for a policy that does not learn.
    fn to_score(&self, key: Option<&str>) -> Vec<Draw>;

    /// Learns from feedback: each scored draw with its loss, in [0, 1].
    fn learn(&self, key: Option<&str>, scored: &[(Draw, f64)]);

    /// Counts answers of `candidate` that missed the latency objective.
    fn straggled(&self, candidate: usize);

    /// The counters and weights now.
    fn report(&self) -> SelectionReport;
}

/// The loss of `prediction` against `label`, in [0, 1]: the mean absolute
/// difference over the prediction's elements, each capped at 1 (for a
/// binary label and a 0/1 prediction, the 0-1 loss). `label` is one value
/// for every element, or one per element. `None` for a prediction that is
/// not numbers, or labels that do not fit it.
pub(crate) fn absolute_loss(label: &[f64], prediction: &Tensor) -> Option<f64> {
    let values = numbers(&prediction.data)?;
    if values.is_empty() || (label.len() != 1 && label.len() != values.len()) {
        return None;
    }
    let total: f64 = values
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            let want = if label.len() == 1 { label[0] } else { label[i] };
            let d = (want - y).abs();
            if d.is_nan() {
                1.0
            } else {
                d.min(1.0)
            }
        })
        .sum();
    Some(total / values.len() as f64)
}

/// A tensor's elements as `f64`, for numeric datatypes.
pub(crate) fn numbers(data: &TensorData) -> Option<Vec<f64>> {
    Some(match data {
        TensorData::Fp32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Fp64(v) => v.clone(),
        TensorData::Fp16(v) => v.iter().map(|x| x.to_f64()).collect(),
        TensorData::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        TensorData::Int8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Int16(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Int32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Int64(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::Uint8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Uint16(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Uint32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Uint64(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        TensorData::Bytes(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_the_capped_mean_absolute_difference() {
        let t = |v: Vec<f32>| Tensor {
            name: "y".into(),
            shape: vec![v.len()],
            data: TensorData::Fp32(v),
            parameters: Vec::new(),
        };
        assert_eq!(absolute_loss(&[1.0], &t(vec![1.0])), Some(0.0));
        assert_eq!(absolute_loss(&[1.0], &t(vec![0.0])), Some(1.0));
        assert_eq!(absolute_loss(&[10.0], &t(vec![0.0, 9.5])), Some(0.75));
        assert_eq!(absolute_loss(&[0.0, 1.0], &t(vec![0.25, 1.0])), Some(0.125));
        assert_eq!(absolute_loss(&[0.0, 1.0, 2.0], &t(vec![0.0, 1.0])), None);
        let words = Tensor {
            name: "y".into(),
            shape: vec![1],
            data: TensorData::Bytes(vec![b"a".to_vec()]),
            parameters: Vec::new(),
        };
        assert_eq!(absolute_loss(&[0.0], &words), None);
    }
}
