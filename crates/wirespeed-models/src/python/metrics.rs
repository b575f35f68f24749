//! Triton's custom metrics (`pb_utils.MetricFamily` and its `Metric`s)
//! from Python models, kept by the server and exported on `/metrics` with
//! its own families.
//!
//! A worker keeps no count of its own that the server relies on: each
//! change a model makes (`increment`, `set`, `observe`) travels with the
//! worker's next message (`ready`, `done`, `error`) and is applied here, so
//! the instances of a model add to one counter, as they do in Triton where
//! the metric lives in the server. A gauge holds the last value set.
//!
//! Bounded: at most [`MAX_FAMILIES`] families and [`MAX_SERIES`] label sets
//! per family; changes past them, and names Prometheus would refuse, are
//! dropped with a warning (the worker refuses bad names when they are
//! made, so these are a misbehaving worker's).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

/// The most custom families kept.
const MAX_FAMILIES: usize = 1024;

/// The most label sets (series) kept per family.
const MAX_SERIES: usize = 10_000;

/// One change a model made, as the worker reports it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Update {
    family: String,
    #[serde(default)]
    description: String,
    kind: MetricKind,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    op: Op,
    #[serde(default)]
    value: f64,
    #[serde(default)]
    buckets: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    /// Made: the series exists (at 0) from now on.
    Create,
    Increment,
    Set,
    Observe,
}

/// A custom family's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Set, or moved either way.
    Gauge,
    /// Observations counted into buckets.
    Histogram,
}

/// One custom family, as `/metrics` writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomFamily {
    /// The family's name, as the model gave it.
    pub name: String,
    /// Its description.
    pub help: String,
    /// Its kind.
    pub kind: MetricKind,
    /// Each label set and its value.
    pub series: Vec<(Vec<(String, String)>, SeriesValue)>,
}

/// A series' value.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesValue {
    /// A counter's or a gauge's.
    Value(f64),
    /// A histogram's: cumulative counts per upper bound, the count and sum.
    Histogram {
        /// Each upper bound and the observations at or below it.
        buckets: Vec<(f64, u64)>,
        /// The observations.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

struct Family {
    help: String,
    kind: MetricKind,
    series: BTreeMap<Vec<(String, String)>, SeriesValue>,
}

fn registry() -> &'static Mutex<BTreeMap<String, Family>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<String, Family>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Whether `name` is a Prometheus metric name (`label`: a label name).
fn valid_name(name: &str, label: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (!label && c == ':');
    chars.next().is_some_and(first_ok)
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (!label && c == ':'))
        && !(label && name.starts_with("__"))
}

/// Applies a model's changes.
pub(crate) fn apply(model: &str, updates: Vec<Update>) {
    if updates.is_empty() {
        return;
    }
    let mut families = registry().lock().unwrap_or_else(|e| e.into_inner());
    for update in updates {
        if !valid_name(&update.family, false) || !update.labels.keys().all(|l| valid_name(l, true))
        {
            tracing::warn!(model, family = %update.family, "a custom metric with a name Prometheus refuses: dropped");
            continue;
        }
        if !families.contains_key(&update.family) && families.len() >= MAX_FAMILIES {
            tracing::warn!(model, family = %update.family, "more than {MAX_FAMILIES} custom metric families: dropped");
            continue;
        }
        let family = families
            .entry(update.family.clone())
            .or_insert_with(|| Family {
                help: update.description.clone(),
                kind: update.kind,
                series: BTreeMap::new(),
            });
        if family.kind != update.kind {
            tracing::warn!(model, family = %update.family, "a custom metric family made again with another kind: dropped");
            continue;
        }
        let labels: Vec<(String, String)> = update.labels.into_iter().collect();
        if !family.series.contains_key(&labels) && family.series.len() >= MAX_SERIES {
            tracing::warn!(model, family = %update.family, "more than {MAX_SERIES} label sets in a custom metric family: dropped");
            continue;
        }
        let series = family
            .series
            .entry(labels)
            .or_insert_with(|| match update.kind {
                MetricKind::Histogram => {
                    let mut bounds = update.buckets.clone();
                    bounds.retain(|b| b.is_finite());
                    bounds.sort_by(f64::total_cmp);
                    bounds.dedup();
                    SeriesValue::Histogram {
                        buckets: bounds.into_iter().map(|b| (b, 0)).collect(),
                        count: 0,
                        sum: 0.0,
                    }
                }
                _ => SeriesValue::Value(0.0),
            });
        match (update.op, series) {
            (Op::Create, _) => {}
            (Op::Increment, SeriesValue::Value(v)) if update.kind == MetricKind::Gauge => {
                *v += update.value
            }
            (Op::Increment, SeriesValue::Value(v)) if update.value >= 0.0 => *v += update.value,
            (Op::Set, SeriesValue::Value(v)) if update.kind == MetricKind::Gauge => {
                *v = update.value
            }
            (
                Op::Observe,
                SeriesValue::Histogram {
                    buckets,
                    count,
                    sum,
                },
            ) => {
                for (bound, n) in buckets.iter_mut() {
                    if update.value <= *bound {
                        *n += 1;
                    }
                }
                *count += 1;
                *sum += update.value;
            }
            (op, _) => {
                tracing::warn!(model, family = %update.family, ?op, "a change its kind does not take: dropped");
            }
        }
    }
}

/// Every custom family and its series now, by name.
pub fn custom_metrics() -> Vec<CustomFamily> {
    let families = registry().lock().unwrap_or_else(|e| e.into_inner());
    families
        .iter()
        .map(|(name, f)| CustomFamily {
            name: name.clone(),
            help: f.help.clone(),
            kind: f.kind,
            series: f
                .series
                .iter()
                .map(|(labels, value)| (labels.clone(), value.clone()))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(json: serde_json::Value) -> Update {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn instances_add_to_one_counter_and_a_gauge_keeps_the_last_value() {
        let labels = serde_json::json!({"model": "m"});
        apply(
            "m",
            vec![
                update(
                    serde_json::json!({"family": "t_requests", "description": "d", "kind": "counter", "labels": labels, "op": "increment", "value": 2.0}),
                ),
                update(
                    serde_json::json!({"family": "t_requests", "kind": "counter", "labels": labels, "op": "increment", "value": 3.0}),
                ),
                update(
                    serde_json::json!({"family": "t_requests", "kind": "counter", "labels": labels, "op": "increment", "value": -1.0}),
                ),
                update(
                    serde_json::json!({"family": "t_level", "kind": "gauge", "op": "set", "value": 7.0}),
                ),
                update(
                    serde_json::json!({"family": "t_level", "kind": "gauge", "op": "set", "value": 4.0}),
                ),
                update(
                    serde_json::json!({"family": "t_sizes", "kind": "histogram", "op": "observe", "value": 3.0, "buckets": [1.0, 5.0]}),
                ),
                update(
                    serde_json::json!({"family": "bad name", "kind": "gauge", "op": "set", "value": 1.0}),
                ),
            ],
        );
        let all = custom_metrics();
        let get = |name: &str| all.iter().find(|f| f.name == name).cloned();
        let requests = get("t_requests").unwrap();
        assert_eq!(requests.help, "d");
        assert_eq!(requests.series[0].1, SeriesValue::Value(5.0));
        assert_eq!(get("t_level").unwrap().series[0].1, SeriesValue::Value(4.0));
        assert_eq!(
            get("t_sizes").unwrap().series[0].1,
            SeriesValue::Histogram {
                buckets: vec![(1.0, 0), (5.0, 1)],
                count: 1,
                sum: 3.0
            }
        );
        assert!(get("bad name").is_none());
    }
}
