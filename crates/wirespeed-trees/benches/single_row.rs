//! One Titanic passenger, in-process: the Go ML latency ladder's embedded
//! case, to hold against leaves (`benchmarks/peers/leaves`). The model is
//! `models/titanic` (titanic_v090.xgb converted to JSON, 10 trees), the row
//! passenger 904; and the same passenger from its raw record through the
//! `titanic_raw` transforms (go-featureprocessing's parameters).
//!
//! ```text
//! cargo bench -p wirespeed-trees --bench single_row
//! ```

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use wirespeed_trees::{Column, Preprocessor, RawValue, Transform};

const ROW: [f32; 12] = [
    1.0,
    0.0,
    1.0,
    0.2875,
    0.333_333_34,
    0.0,
    0.322667,
    0.0,
    1.0,
    0.0,
    0.0,
    0.0,
];

fn titanic_preprocessor() -> Preprocessor {
    let one_hot = |cats: &[&str]| Transform::OneHot {
        categories: cats.iter().map(|c| c.to_string()).collect(),
        unknown_bucket: false,
    };
    Preprocessor::new(vec![
        Column::number("Pclass", Transform::Identity).fill(0.0),
        Column::text("Sex", one_hot(&["male", "female"])),
        Column::number(
            "Age",
            Transform::MinMax {
                min: 0.0,
                max: 80.0,
            },
        )
        .fill(0.0),
        Column::number(
            "SibSp",
            Transform::Quantile {
                quantiles: vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            },
        )
        .fill(0.0),
        Column::number("Parch", Transform::Identity).fill(0.0),
        Column::number(
            "Fare",
            Transform::Standard {
                mean: 50.0,
                std: 100.0,
            },
        )
        .fill(0.0),
        Column::text(
            "Cabin",
            Transform::Ordinal {
                mapping: vec![("C85".into(), 1.0), ("C123".into(), 2.0)],
                default: 0.0,
            },
        ),
        Column::text("Embarked", one_hot(&["S", "C", "Q", "None"])),
    ])
    .expect("valid columns")
}

fn single_row(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/titanic/model.json");
    let model = wirespeed_trees::load(&path).expect("the bundled model loads");
    let mut margin = [0f32; 1];
    model.predict_row_margins(&ROW, &mut margin);
    assert!((margin[0] - -0.184_351_92).abs() < 1e-6, "{margin:?}");

    c.bench_function("titanic/margin", |b| {
        b.iter(|| {
            model.predict_row_margins(black_box(&ROW), &mut margin);
            black_box(margin[0])
        })
    });
    let mut p = [0f32; 1];
    c.bench_function("titanic/probability", |b| {
        b.iter(|| {
            model.predict_row(black_box(&ROW), &mut p);
            black_box(p[0])
        })
    });

    let pre = titanic_preprocessor();
    let record = [
        RawValue::Number(1.0),
        RawValue::Text("female"),
        RawValue::Number(23.0),
        RawValue::Number(1.0),
        RawValue::Number(0.0),
        RawValue::Number(82.2667),
        RawValue::Text("B45"),
        RawValue::Text("S"),
    ];
    let mut features = [0f32; 12];
    pre.transform_row(&record, &mut features);
    model.predict_row(&features, &mut p);
    assert!((p[0] - 0.454_042_1).abs() < 1e-6, "{p:?}");
    c.bench_function("titanic/raw_record_features", |b| {
        b.iter(|| {
            pre.transform_row(black_box(&record), &mut features);
            black_box(features[0])
        })
    });
    c.bench_function("titanic/raw_record_probability", |b| {
        b.iter(|| {
            pre.transform_row(black_box(&record), &mut features);
            model.predict_row(&features, &mut p);
            black_box(p[0])
        })
    });
}

criterion_group!(benches, single_row);
criterion_main!(benches);
