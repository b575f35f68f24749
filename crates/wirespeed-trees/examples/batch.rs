//! Batch prediction throughput, driven by `benchmarks/scripts/trees_batch.py`,
//! which times xgboost and lightgbm on the same model and rows in the same
//! run.
//!
//! ```text
//! cargo run --release -p wirespeed-trees --example batch -- MODEL ROWS.f32 FEATURES THREADS REPEATS OUT.f32
//! ```
//!
//! `ROWS.f32` is raw little-endian `f32`, row-major. Prints the median
//! seconds per pass over the rows, and writes the predictions to `OUT.f32`
//! for the script to check against the packages.

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, rows, features, threads, repeats, out] = args.as_slice() else {
        eprintln!("usage: batch MODEL ROWS.f32 FEATURES THREADS REPEATS OUT.f32");
        std::process::exit(2);
    };
    let ensemble = wirespeed_trees::load(model).expect("model");
    let bytes = std::fs::read(rows).expect("rows");
    let rows: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let features: usize = features.parse().expect("features");
    assert_eq!(features, ensemble.num_features());
    let threads: usize = threads.parse().expect("threads");
    let pool = wirespeed_core::CpuPool::new(threads).expect("the threads start");
    let repeats: usize = repeats.parse().expect("repeats");
    let n = rows.len() / features;
    let mut margins = vec![0f32; n * ensemble.num_groups()];
    let mut predictions = vec![0f32; n * ensemble.prediction_width()];
    let mut times = Vec::new();
    for _ in 0..repeats {
        let t0 = Instant::now();
        ensemble.predict_parallel(&rows, &mut margins, &mut predictions, &pool);
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!("{}", times[times.len() / 2]);
    let mut raw = Vec::with_capacity(predictions.len() * 4);
    for p in &predictions {
        raw.extend_from_slice(&p.to_le_bytes());
    }
    std::fs::write(out, raw).expect("write predictions");
}
