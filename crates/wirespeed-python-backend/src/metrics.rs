//! Triton's custom metrics (`pb_utils.MetricFamily` and its `Metric`s)
//! from Python models, kept by the server and exported on `/metrics` with
//! its own families.
//!
//! The values live here, as they live in Triton's server: a model's
//! `increment`, `set`, `observe` and `value()` inside `initialize` or
//! `execute` are each a call the worker makes and waits for
//! ([`operate`], `wire::Reply::Metric`), so a model that reads `/metrics`
//! right after sees its change, two `Metric`s of one label set share one
//! value, and the instances of a model add to one counter. A change made
//! where the worker cannot wait for the server (a thread of the model's
//! own, `finalize`, a family collected by Python) travels with the
//! worker's next message instead ([`apply`]).
//!
//! A series exists while some `Metric` holds it: each `Metric` made adds
//! a holder, and a family whose Python object is gone releases its
//! metrics' (Triton removes the series then); families are kept, with
//! their first kind and description, as Triton keeps them.
//!
//! Bounded: at most [`MAX_FAMILIES`] families and [`MAX_SERIES`] label sets
//! per family; changes past them, and names Prometheus would refuse, are
//! refused (the worker refuses bad names when they are made, so these
//! are a misbehaving worker's).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

/// The most custom families kept.
const MAX_FAMILIES: usize = 1024;

/// The most label sets (series) kept per family.
const MAX_SERIES: usize = 10_000;

/// One operation of a model's on its metrics, as the worker sends it.
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
    /// A `MetricFamily` made: the family exists from now on.
    Family,
    /// A `Metric` made: its series exists (at 0) while some `Metric`
    /// holds it.
    Create,
    /// A `Metric` let go (its family's Python object is gone).
    Delete,
    Increment,
    Set,
    Observe,
    /// `value()`: only read.
    Value,
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

impl MetricKind {
    fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// A series' labels, by name.
pub type Labels = Vec<(String, String)>;

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
    pub series: Vec<(Labels, SeriesValue)>,
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

struct Series {
    value: SeriesValue,
    /// The `Metric`s that hold it.
    holders: u64,
}

struct Family {
    help: String,
    kind: MetricKind,
    series: BTreeMap<Labels, Series>,
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

/// Applies changes that travelled with a worker's message: each as
/// [`operate`] does, a refused one logged.
pub(crate) fn apply(model: &str, updates: Vec<Update>) {
    for update in updates {
        let family = update.family.clone();
        if let Err(error) = operate(update) {
            tracing::warn!(model, %family, %error, "a custom metric change refused");
        }
    }
}

/// Carries out one operation: the value it reads (`value()`), or what
/// Triton's server would answer it, in Triton's words where the model may
/// match them.
pub(crate) fn operate(update: Update) -> Result<Option<f64>, String> {
    let Update {
        family: name,
        description,
        kind,
        labels,
        op,
        value,
        buckets,
    } = update;
    if !valid_name(&name, false) || !labels.keys().all(|l| valid_name(l, true)) {
        return Err(format!(
            "the metric family '{name}' or one of its label names is not a Prometheus name"
        ));
    }
    let mut families = registry().lock().unwrap_or_else(|e| e.into_inner());
    if !families.contains_key(&name) {
        if matches!(op, Op::Delete | Op::Value) {
            return Ok(None);
        }
        if families.len() >= MAX_FAMILIES {
            return Err(format!("more than {MAX_FAMILIES} custom metric families"));
        }
        families.insert(
            name.clone(),
            Family {
                help: description,
                kind,
                series: BTreeMap::new(),
            },
        );
    }
    let family = families.get_mut(&name).expect("inserted above");
    if family.kind != kind {
        return Err(format!(
            "Error when creating MetricFamily: the metric family '{name}' exists as a {}, not a {}",
            family.kind.name(),
            kind.name()
        ));
    }
    if op == Op::Family {
        return Ok(None);
    }
    let labels: Labels = labels.into_iter().collect();
    if op == Op::Delete {
        if let Some(series) = family.series.get_mut(&labels) {
            series.holders = series.holders.saturating_sub(1);
            if series.holders == 0 {
                family.series.remove(&labels);
            }
        }
        return Ok(None);
    }
    if !family.series.contains_key(&labels) {
        if op != Op::Create {
            // Released meanwhile (its family's object is gone).
            return Err(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."
                    .into(),
            );
        }
        if family.series.len() >= MAX_SERIES {
            return Err(format!(
                "more than {MAX_SERIES} label sets in the metric family '{name}'"
            ));
        }
        let value = match kind {
            MetricKind::Histogram => {
                if buckets.iter().any(|b| !b.is_finite())
                    || buckets.windows(2).any(|w| w[0] >= w[1])
                {
                    return Err("Error when creating Metric: histogram buckets must be finite and strictly increasing".into());
                }
                SeriesValue::Histogram {
                    buckets: buckets.iter().map(|&b| (b, 0)).collect(),
                    count: 0,
                    sum: 0.0,
                }
            }
            _ => SeriesValue::Value(0.0),
        };
        family
            .series
            .insert(labels.clone(), Series { value, holders: 0 });
    }
    let series = family.series.get_mut(&labels).expect("inserted above");
    match (op, &mut series.value) {
        (Op::Create, _) => series.holders += 1,
        (Op::Value, SeriesValue::Value(v)) => return Ok(Some(*v)),
        (Op::Increment, SeriesValue::Value(v)) if kind == MetricKind::Gauge => *v += value,
        (Op::Increment, SeriesValue::Value(v)) if value >= 0.0 => *v += value,
        (Op::Set, SeriesValue::Value(v)) if kind == MetricKind::Gauge => *v = value,
        (
            Op::Observe,
            SeriesValue::Histogram {
                buckets,
                count,
                sum,
            },
        ) => {
            for (bound, n) in buckets.iter_mut() {
                if value <= *bound {
                    *n += 1;
                }
            }
            *count += 1;
            *sum += value;
        }
        (op, _) => return Err(format!("a {} metric does not take {op:?}", kind.name())),
    }
    Ok(None)
}

/// Answers a worker's [`Reply::Metric`](super::wire::Reply::Metric): the
/// changes it kept first, then the operation.
pub(crate) fn answer(
    model: &str,
    metric: Update,
    pending: Vec<Update>,
    call: Option<u64>,
) -> super::wire::MetricAnswer {
    apply(model, pending);
    let (value, error) = match operate(metric) {
        Ok(value) => (value, None),
        Err(error) => (None, Some(error)),
    };
    super::wire::MetricAnswer {
        op: "metric_result",
        value,
        error,
        call,
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
                .map(|(labels, series)| (labels.clone(), series.value.clone()))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(json: serde_json::Value) -> Result<Option<f64>, String> {
        operate(serde_json::from_value(json).unwrap())
    }

    fn series(name: &str) -> Option<Vec<(Labels, SeriesValue)>> {
        custom_metrics()
            .into_iter()
            .find(|f| f.name == name)
            .map(|f| f.series)
    }

    #[test]
    fn two_metrics_of_one_label_set_share_a_value_until_both_are_let_go() {
        let labels = serde_json::json!({"model": "m"});
        let counter = |op_name: &str, value: f64| {
            op(
                serde_json::json!({"family": "t_requests", "description": "d", "kind": "counter",
                "labels": labels, "op": op_name, "value": value}),
            )
        };
        assert_eq!(counter("family", 0.0), Ok(None));
        assert_eq!(counter("create", 0.0), Ok(None));
        assert_eq!(counter("create", 0.0), Ok(None));
        assert_eq!(counter("increment", 2.0), Ok(None));
        assert_eq!(counter("increment", 3.0), Ok(None));
        assert!(counter("increment", -1.0).is_err());
        assert!(counter("set", 1.0).is_err());
        assert_eq!(counter("value", 0.0), Ok(Some(5.0)));
        assert_eq!(counter("delete", 0.0), Ok(None));
        assert_eq!(counter("value", 0.0), Ok(Some(5.0)));
        assert_eq!(counter("delete", 0.0), Ok(None));
        assert_eq!(series("t_requests"), Some(vec![]));
        assert!(counter("increment", 1.0)
            .unwrap_err()
            .contains("'MetricFamily' has been deleted"));
        // Made again with another kind: refused, the first kept.
        assert!(
            op(serde_json::json!({"family": "t_requests", "kind": "gauge", "op": "family"}))
                .unwrap_err()
                .contains("exists as a counter")
        );
    }

    #[test]
    fn a_gauge_keeps_the_last_value_and_a_histogram_counts_into_its_buckets() {
        let gauge = |op_name: &str, value: f64| {
            op(
                serde_json::json!({"family": "t_level", "kind": "gauge", "op": op_name, "value": value}),
            )
        };
        gauge("create", 0.0).unwrap();
        gauge("set", 7.0).unwrap();
        gauge("increment", -3.0).unwrap();
        assert_eq!(gauge("value", 0.0), Ok(Some(4.0)));
        let histogram = |op_name: &str, value: f64, buckets: serde_json::Value| {
            op(
                serde_json::json!({"family": "t_sizes", "kind": "histogram", "op": op_name,
                "value": value, "buckets": buckets}),
            )
        };
        assert!(histogram("create", 0.0, serde_json::json!([5.0, 1.0])).is_err());
        assert!(histogram("create", 0.0, serde_json::json!([1.0, 1.0])).is_err());
        histogram("create", 0.0, serde_json::json!([1.0, 5.0])).unwrap();
        histogram("observe", 3.0, serde_json::json!([])).unwrap();
        assert!(histogram("increment", 3.0, serde_json::json!([])).is_err());
        assert_eq!(
            series("t_sizes").unwrap()[0].1,
            SeriesValue::Histogram {
                buckets: vec![(1.0, 0), (5.0, 1)],
                count: 1,
                sum: 3.0
            }
        );
        assert!(
            op(serde_json::json!({"family": "bad name", "kind": "gauge", "op": "create"})).is_err()
        );
        assert!(series("bad name").is_none());
    }
}
