//! Feature preprocessing: raw records (named numbers and strings, some
//! missing) into the feature vector a tree ensemble takes, the way
//! go-featureprocessing and scikit-learn's transformers do, declared in
//! data rather than code.
//!
//! ```
//! use wirespeed_trees::{Column, Preprocessor, RawValue, Transform};
//!
//! let p = Preprocessor::new(vec![
//!     Column::number("age", Transform::MinMax { min: 0.0, max: 80.0 }).fill(0.0),
//!     Column::text("sex", Transform::OneHot { categories: vec!["male".into(), "female".into()], unknown_bucket: false }),
//! ]).unwrap();
//! let mut features = vec![0.0; p.width()];
//! p.transform_row(&[RawValue::Number(20.0), RawValue::Text("female")], &mut features);
//! assert_eq!(features, [0.25, 0.0, 1.0]);
//! ```

use std::collections::HashMap;

/// One value of a raw record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawValue<'a> {
    /// A number (NaN is missing).
    Number(f64),
    /// A string.
    Text(&'a str),
    /// No value.
    Missing,
}

/// What a column turns its value into.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// The number itself (1 feature).
    Identity,
    /// `(x - min) / (max - min)`, clamped to [0, 1] (1 feature).
    MinMax {
        /// The value that maps to 0.
        min: f64,
        /// The value that maps to 1.
        max: f64,
    },
    /// `(x - mean) / std` (1 feature).
    Standard {
        /// Subtracted.
        mean: f64,
        /// Divided by.
        std: f64,
    },
    /// The rank among sorted `quantiles`: `(i + 1) / n` for the first
    /// quantile `>= x` at index `i`, and 1 past the last (1 feature).
    Quantile {
        /// Sorted cut points.
        quantiles: Vec<f64>,
    },
    /// A string's code from `mapping`, or `default` when it is not there (1 feature).
    Ordinal {
        /// String to code.
        mapping: Vec<(String, f64)>,
        /// The code of an unknown string.
        default: f64,
    },
    /// One feature per category, 1 for the value's; an unknown string is
    /// all zeros, or 1 in one more feature with `unknown_bucket`.
    OneHot {
        /// The categories, in feature order.
        categories: Vec<String>,
        /// Whether unknown strings get a feature of their own.
        unknown_bucket: bool,
    },
}

/// Whether a column holds numbers or strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Numbers.
    Number,
    /// Strings.
    Text,
}

/// One named input column and its transform.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The column's name in the record.
    pub name: String,
    /// Numbers or strings.
    pub kind: ColumnKind,
    /// What it becomes.
    pub transform: Transform,
    /// The number a missing numeric value is read as (else NaN, which the
    /// trees treat as missing).
    pub fill_number: Option<f64>,
    /// The string a missing string is read as (else it is unknown).
    pub fill_text: Option<String>,
}

impl Column {
    /// A numeric column.
    pub fn number(name: &str, transform: Transform) -> Column {
        Column {
            name: name.to_owned(),
            kind: ColumnKind::Number,
            transform,
            fill_number: None,
            fill_text: None,
        }
    }

    /// A string column.
    pub fn text(name: &str, transform: Transform) -> Column {
        Column {
            name: name.to_owned(),
            kind: ColumnKind::Text,
            transform,
            fill_number: None,
            fill_text: None,
        }
    }

    /// Reads a missing number as `value`.
    pub fn fill(mut self, value: f64) -> Column {
        self.fill_number = Some(value);
        self
    }

    /// Features this column produces.
    pub fn width(&self) -> usize {
        match &self.transform {
            Transform::OneHot {
                categories,
                unknown_bucket,
            } => categories.len() + usize::from(*unknown_bucket),
            _ => 1,
        }
    }
}

/// Compiled string lookups, per column.
#[derive(Debug, Clone)]
enum Lookup {
    None,
    Codes(Table<f64>),
    Positions(Table<usize>),
}

/// A string table: a linear scan while it is small (faster than hashing a
/// short string), a hash map past [`SCAN_MAX`] entries.
#[derive(Debug, Clone)]
enum Table<T> {
    Scan(Vec<(String, T)>),
    Hash(HashMap<String, T>),
}

const SCAN_MAX: usize = 16;

impl<T: Copy> Table<T> {
    fn new(entries: Vec<(String, T)>) -> Table<T> {
        if entries.len() <= SCAN_MAX {
            Table::Scan(entries)
        } else {
            Table::Hash(entries.into_iter().collect())
        }
    }

    #[inline]
    fn get(&self, key: &str) -> Option<T> {
        match self {
            // Short keys: comparing bytes inline beats a call to memcmp.
            Table::Scan(entries) => entries
                .iter()
                .find(|(k, _)| {
                    k.len() == key.len() && k.bytes().zip(key.bytes()).all(|(a, b)| a == b)
                })
                .map(|&(_, v)| v),
            Table::Hash(map) => map.get(key).copied(),
        }
    }
}

/// A declared feature pipeline: columns in feature order.
#[derive(Debug, Clone)]
pub struct Preprocessor {
    columns: Vec<Column>,
    /// The columns compiled: flat parameters, fills resolved, tables built.
    ops: Vec<Op>,
    width: usize,
}

/// One column, compiled for [`Preprocessor::transform_row`].
#[derive(Debug, Clone)]
enum Op {
    Number {
        fill: f64,
        kind: NumberOp,
    },
    Ordinal {
        table: Table<f64>,
        default: f64,
        fill: Option<Box<str>>,
    },
    OneHot {
        table: Table<usize>,
        width: usize,
        unknown_bucket: bool,
        fill: Option<Box<str>>,
    },
}

#[derive(Debug, Clone)]
enum NumberOp {
    Identity,
    MinMax { min: f64, range: f64 },
    Standard { mean: f64, std: f64 },
    Quantile { quantiles: Box<[f64]> },
}

impl Preprocessor {
    /// Checks the columns (names unique, transforms fit their kind,
    /// parameters usable) and compiles their lookups.
    pub fn new(columns: Vec<Column>) -> Result<Preprocessor, String> {
        let mut lookups = Vec::with_capacity(columns.len());
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|d| d.name == c.name) {
                return Err(format!("column '{}' is declared twice", c.name));
            }
            let text = matches!(
                c.transform,
                Transform::Ordinal { .. } | Transform::OneHot { .. }
            );
            if text != (c.kind == ColumnKind::Text) {
                return Err(format!(
                    "column '{}': {} transforms take {}",
                    c.name,
                    if text {
                        "ordinal and one-hot"
                    } else {
                        "numeric"
                    },
                    if text { "strings" } else { "numbers" }
                ));
            }
            let lookup = match &c.transform {
                Transform::MinMax { min, max }
                    if max.partial_cmp(min) != Some(std::cmp::Ordering::Greater) =>
                {
                    return Err(format!("column '{}': min-max needs max > min", c.name))
                }
                Transform::Standard { std, .. }
                    if std.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) =>
                {
                    return Err(format!(
                        "column '{}': standard scaling needs std > 0",
                        c.name
                    ))
                }
                Transform::Quantile { quantiles }
                    if quantiles.is_empty()
                        || !quantiles.is_sorted()
                        || quantiles.iter().any(|q| q.is_nan()) =>
                {
                    return Err(format!(
                        "column '{}': quantiles must be a non-empty sorted list",
                        c.name
                    ))
                }
                Transform::Ordinal { mapping, .. } => Lookup::Codes(Table::new(mapping.clone())),
                Transform::OneHot { categories, .. } => {
                    for (k, cat) in categories.iter().enumerate() {
                        if categories[..k].contains(cat) {
                            return Err(format!(
                                "column '{}': category '{cat}' is listed twice",
                                c.name
                            ));
                        }
                    }
                    Lookup::Positions(Table::new(categories.iter().cloned().zip(0..).collect()))
                }
                _ => Lookup::None,
            };
            lookups.push(lookup);
        }
        let ops = columns
            .iter()
            .zip(lookups)
            .map(|(c, lookup)| match (&c.transform, lookup) {
                (Transform::Ordinal { default, .. }, Lookup::Codes(table)) => Op::Ordinal {
                    table,
                    default: *default,
                    fill: c.fill_text.as_deref().map(Box::from),
                },
                (Transform::OneHot { unknown_bucket, .. }, Lookup::Positions(table)) => {
                    Op::OneHot {
                        table,
                        width: c.width(),
                        unknown_bucket: *unknown_bucket,
                        fill: c.fill_text.as_deref().map(Box::from),
                    }
                }
                (transform, _) => Op::Number {
                    fill: c.fill_number.unwrap_or(f64::NAN),
                    kind: match transform {
                        Transform::MinMax { min, max } => NumberOp::MinMax {
                            min: *min,
                            range: max - min,
                        },
                        Transform::Standard { mean, std } => NumberOp::Standard {
                            mean: *mean,
                            std: *std,
                        },
                        Transform::Quantile { quantiles } => NumberOp::Quantile {
                            quantiles: quantiles.clone().into_boxed_slice(),
                        },
                        _ => NumberOp::Identity,
                    },
                },
            })
            .collect();
        let width = columns.iter().map(Column::width).sum();
        Ok(Preprocessor {
            columns,
            ops,
            width,
        })
    }

    /// The columns, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Features per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Writes the features of one record (one value per column, in column
    /// order) to `out` (`width` values). A string where a number belongs,
    /// or the reverse, counts as missing.
    pub fn transform_row(&self, values: &[RawValue<'_>], out: &mut [f32]) {
        assert_eq!(values.len(), self.columns.len(), "one value per column");
        assert_eq!(out.len(), self.width, "width features");
        let mut at = 0;
        for (op, value) in self.ops.iter().zip(values) {
            match op {
                Op::Number { fill, kind } => {
                    let x = match value {
                        RawValue::Number(x) if !x.is_nan() => *x,
                        _ => *fill,
                    };
                    out[at] = number(kind, x) as f32;
                    at += 1;
                }
                Op::Ordinal {
                    table,
                    default,
                    fill,
                } => {
                    out[at] = text(value, fill)
                        .and_then(|t| table.get(t))
                        .unwrap_or(*default) as f32;
                    at += 1;
                }
                Op::OneHot {
                    table,
                    width,
                    unknown_bucket,
                    fill,
                } => {
                    let slot = &mut out[at..at + width];
                    slot.fill(0.0);
                    match text(value, fill).and_then(|t| table.get(t)) {
                        Some(k) => slot[k] = 1.0,
                        None if *unknown_bucket => slot[width - 1] = 1.0,
                        None => {}
                    }
                    at += width;
                }
            }
        }
    }
}

/// A string column's value: its text, or the fill when it has none.
#[inline]
fn text<'a>(value: &RawValue<'a>, fill: &'a Option<Box<str>>) -> Option<&'a str> {
    match value {
        RawValue::Text(t) => Some(t),
        _ => fill.as_deref(),
    }
}

#[inline]
fn number(op: &NumberOp, x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    match op {
        NumberOp::Identity => x,
        NumberOp::MinMax { min, range } => ((x - min) / range).clamp(0.0, 1.0),
        NumberOp::Standard { mean, std } => (x - mean) / std,
        NumberOp::Quantile { quantiles } => {
            let i = quantiles.partition_point(|&q| q < x);
            if i >= quantiles.len() {
                1.0
            } else {
                (i + 1) as f64 / quantiles.len() as f64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transform() {
        let p = Preprocessor::new(vec![
            Column::number("a", Transform::Identity),
            Column::number(
                "b",
                Transform::Standard {
                    mean: 50.0,
                    std: 100.0,
                },
            )
            .fill(0.0),
            Column::number(
                "c",
                Transform::Quantile {
                    quantiles: vec![0.0, 1.0, 2.0, 3.0],
                },
            ),
            Column::text(
                "d",
                Transform::Ordinal {
                    mapping: vec![("x".into(), 1.0), ("y".into(), 2.0)],
                    default: 0.0,
                },
            ),
            Column::text(
                "e",
                Transform::OneHot {
                    categories: vec!["p".into(), "q".into()],
                    unknown_bucket: true,
                },
            ),
        ])
        .unwrap();
        assert_eq!(p.width(), 7);
        let mut out = vec![0.0; 7];
        p.transform_row(
            &[
                RawValue::Missing,
                RawValue::Missing,
                RawValue::Number(1.5),
                RawValue::Text("y"),
                RawValue::Text("zz"),
            ],
            &mut out,
        );
        assert!(out[0].is_nan());
        assert_eq!(&out[1..], [-0.5, 0.75, 2.0, 0.0, 0.0, 1.0]);
        p.transform_row(
            &[
                RawValue::Number(3.0),
                RawValue::Number(150.0),
                RawValue::Number(9.0),
                RawValue::Missing,
                RawValue::Text("p"),
            ],
            &mut out,
        );
        assert_eq!(out, [3.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn bad_declarations_are_refused() {
        let bad = [
            Column::number("a", Transform::MinMax { min: 1.0, max: 1.0 }),
            Column::number(
                "a",
                Transform::Quantile {
                    quantiles: vec![2.0, 1.0],
                },
            ),
            Column::text("a", Transform::Identity),
            Column::number(
                "a",
                Transform::Ordinal {
                    mapping: vec![],
                    default: 0.0,
                },
            ),
        ];
        for column in bad {
            assert!(Preprocessor::new(vec![column]).is_err());
        }
    }
}
