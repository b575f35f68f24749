//! Decoding FP32 infer requests: wirespeed's push decoder against
//! serde_json and sonic-rs into a typed struct, in the same run.
//!
//! Bodies are written as Python clients write them (flat `data`, default
//! `json.dumps` separators, values uniform in [-2, 2)): `long` is a float32
//! widened to float64 (`json.dumps(arr.tolist())`, ~19 characters a value),
//! `short` is rounded to 4 decimals.
//!
//! ```text
//! cargo bench -p wirespeed-json --bench decode                       # a representative subset
//! WIRESPEED_BENCH_GRID=full cargo bench -p wirespeed-json --bench decode   # Clipper's whole grid
//! WIRESPEED_BENCH_BODIES=/tmp/refbench_work/data cargo bench ...     # refbench's own body files
//! ```
//!
//! With `WIRESPEED_BENCH_BODIES`, bodies are read from the files the
//! reference harness (`../shared/refbench`) generated (`<style>_b<B>_n<N>.json`),
//! so both harnesses time the same bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde::Deserialize;
use wirespeed_core::CpuPool;
use wirespeed_json::{decode_infer_request, DecodeOptions, RequestDecoder};

#[derive(Deserialize)]
#[allow(dead_code)]
struct Request {
    inputs: Vec<Input>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Input {
    name: String,
    shape: Vec<usize>,
    datatype: String,
    data: Vec<f32>,
}

/// A body of `batch` x `n` FP32 values in `style` ("long" or "short").
pub fn body(batch: usize, n: usize, style: &str) -> Vec<u8> {
    if let Ok(dir) = std::env::var("WIRESPEED_BENCH_BODIES") {
        // refbench has batches 1, 8 and 32; other bodies are generated alike.
        if let Ok(bytes) =
            std::fs::read(std::path::Path::new(&dir).join(format!("{style}_b{batch}_n{n}.json")))
        {
            return bytes;
        }
    }
    let mut state = 0x2545_f491_4f6c_dd1du64 ^ (batch * 1_000_003 + n) as u64;
    let values: Vec<String> = (0..batch * n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
            match style {
                "long" => format!("{:?}", f64::from(x)),
                _ => format!("{:?}", (f64::from(x) * 1e4).round() / 1e4),
            }
        })
        .collect();
    format!(
        r#"{{"inputs": [{{"name": "x", "shape": [{batch}, {n}], "datatype": "FP32", "data": [{}]}}]}}"#,
        values.join(", ")
    )
    .into_bytes()
}

fn grid() -> Vec<(usize, usize)> {
    if std::env::var("WIRESPEED_BENCH_GRID").as_deref() == Ok("full") {
        let ns = [784, 1024, 4096, 16384, 65536, 262144];
        let bs = [1, 4, 8, 16, 32];
        ns.iter()
            .flat_map(|&n| bs.iter().map(move |&b| (b, n)))
            .collect()
    } else {
        vec![(1, 784), (8, 16384), (8, 262144)]
    }
}

fn decode(c: &mut Criterion) {
    let options = DecodeOptions::default();
    for style in ["long", "short"] {
        let mut group = c.benchmark_group(format!("decode_fp32_{style}"));
        group
            .sample_size(10)
            .warm_up_time(std::time::Duration::from_millis(500))
            .measurement_time(std::time::Duration::from_secs(2));
        for (batch, n) in grid() {
            let body = body(batch, n, style);
            let id = format!("b{batch}_n{n}");
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::new("wirespeed", &id), &body, |b, body| {
                b.iter(|| decode_infer_request(body, &options).unwrap())
            });
            group.bench_with_input(
                BenchmarkId::new("wirespeed_16k_chunks", &id),
                &body,
                |b, body| {
                    b.iter(|| {
                        let mut d =
                            RequestDecoder::new(options.clone()).with_body_len(body.len() as u64);
                        for chunk in body.chunks(16 * 1024) {
                            d.feed(chunk).unwrap();
                        }
                        d.finish().unwrap()
                    })
                },
            );
            if body.len() >= 1 << 20 {
                // This thread and one helper.
                let two = DecodeOptions {
                    pool: Some(CpuPool::new(1).expect("a helper thread")),
                    ..options.clone()
                };
                group.bench_with_input(
                    BenchmarkId::new("wirespeed_2_threads", &id),
                    &body,
                    |b, body| b.iter(|| decode_infer_request(body, &two).unwrap()),
                );
            }
            group.bench_with_input(BenchmarkId::new("serde_json", &id), &body, |b, body| {
                b.iter(|| serde_json::from_slice::<Request>(body).unwrap())
            });
            group.bench_with_input(BenchmarkId::new("sonic_rs", &id), &body, |b, body| {
                b.iter(|| sonic_rs::from_slice::<Request>(body).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, decode);
criterion_main!(benches);
