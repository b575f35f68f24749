//! How close a binary tensor's decode (`RawFiller`: the size checks, the
//! buffer and the copies) comes to a plain `memcpy` of the same bytes into
//! a fresh buffer. Both pay for the new allocation's page faults; the filler
//! takes its bytes in 64 KiB pieces, as they come off the socket.
//!
//! ```text
//! cargo bench -p wirespeed-core --bench raw
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use wirespeed_core::raw::{write_raw, RawFiller};
use wirespeed_core::{DataType, TensorData};

fn raw(c: &mut Criterion) {
    let mut group = c.benchmark_group("raw");
    for count in [65536usize, 8 * 262144] {
        let values: Vec<f32> = (0..count).map(|i| i as f32 * 0.5).collect();
        let mut bytes = Vec::new();
        write_raw(&TensorData::Fp32(values), &mut bytes);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("memcpy", count), &bytes, |b, bytes| {
            b.iter(|| {
                let mut out = vec![0u8; bytes.len()];
                out.copy_from_slice(bytes);
                black_box(out)
            })
        });
        group.bench_with_input(
            BenchmarkId::new("raw_filler_fp32", count),
            &bytes,
            |b, bytes| {
                b.iter(|| {
                    let mut filler = RawFiller::new(DataType::Fp32, count, bytes.len(), 0).unwrap();
                    for piece in bytes.chunks(64 << 10) {
                        filler.push(piece).unwrap();
                    }
                    black_box(filler.finish().unwrap())
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, raw);
criterion_main!(benches);
