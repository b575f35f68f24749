//! `transcoding`: the dimensions of JSON <-> gRPC transcoding benchmarks
//! (Envoy's gRPC-JSON transcoder and grpc-gateway measure along them):
//! array length, nesting depth, body length, how many segments the body
//! arrives in, and value types. Each cell sends the same tensor to the
//! `identity_*` models as V2 JSON over REST and as V2 gRPC, one request at a
//! time, and reports both latencies, the server's decode time for each
//! (its `Server-Timing`), and what JSON costs over protobuf.
//!
//! Cells the server cannot take as built are reported as not available:
//! nesting deeper than a 2-D tensor's rows needs a model of higher rank,
//! and message segments are an HTTP/1 body's chunks (a gRPC message is one
//! length-prefixed frame, split by HTTP/2 as it likes).

use super::{failure, Cell, Context, Outcome, ONE};
use crate::report::{ms, Table};
use crate::target::Target;
use crate::workload::{Floats, Payload, Protocol, Values, Workload};

struct Spec {
    label: String,
    model: &'static str,
    values: Values,
    nesting: usize,
    segments: usize,
}

fn fp32(width: usize) -> Values {
    Values::Fp32 {
        shape: [1, width],
        floats: Floats::Long,
    }
}

fn specs(short: bool) -> (Vec<Spec>, Vec<(String, String)>) {
    let spec = |label: String, model, values| Spec {
        label,
        model,
        values,
        nesting: 0,
        segments: 0,
    };
    let mut specs = Vec::new();
    let mut missing = Vec::new();
    let lengths: &[usize] = if short {
        &[1, 1024]
    } else {
        &[1, 256, 1024, 16384]
    };
    for &n in lengths {
        specs.push(spec(format!("array length {n}"), "identity_fp32", fp32(n)));
    }
    for nesting in [0, 1] {
        let mut s = spec(
            format!("nested layers {nesting} (16 x 1024)"),
            "identity_fp32",
            Values::Fp32 {
                shape: [16, 1024],
                floats: Floats::Long,
            },
        );
        s.nesting = nesting;
        specs.push(s);
    }
    for nesting in [8, 31] {
        missing.push((
            format!("nested layers {nesting}"),
            format!(
                "not available: needs a model of rank {}; the identity models have rank 2",
                nesting + 1
            ),
        ));
    }
    let bodies: &[(usize, &str)] = if short {
        &[(1, "1 B"), (1024, "1 KiB")]
    } else {
        &[
            (1, "1 B"),
            (1024, "1 KiB"),
            (1 << 20, "1 MiB"),
            (32 << 20, "32 MiB"),
        ]
    };
    for &(len, name) in bodies {
        specs.push(spec(
            format!("body length {name} (one BYTES element)"),
            "identity_bytes",
            Values::Bytes { len },
        ));
    }
    let segments: &[usize] = if short { &[1, 16] } else { &[1, 16, 256, 4096] };
    for &n in segments {
        let mut s = spec(
            format!("message segments {n} (16384 floats)"),
            "identity_fp32",
            fp32(16384),
        );
        s.segments = n;
        specs.push(s);
    }
    let shape = [1, 1024];
    for (name, model, values) in [
        (
            "FP32",
            "identity_fp32",
            Values::Fp32 {
                shape,
                floats: Floats::Long,
            },
        ),
        ("INT64", "identity_int64", Values::Int64 { shape }),
        ("BOOL", "identity_bool", Values::Bool { shape }),
    ] {
        specs.push(spec(format!("value type {name} (1024)"), model, values));
    }
    specs.push(spec(
        "value type BYTES (1 x 1 KiB)".into(),
        "identity_bytes",
        Values::Bytes { len: 1024 },
    ));
    (specs, missing)
}

pub(super) async fn run(context: &Context) -> anyhow::Result<Outcome> {
    let (specs, missing) = specs(context.short);
    let requests = if context.short {
        Some(40)
    } else {
        Some(20_000)
    };
    let mut cells = Vec::new();
    for spec in specs {
        let mut json = Workload::new(
            Protocol::V2Json,
            spec.model,
            "INPUT0",
            Payload::Tensor(spec.values.clone()),
        );
        json.binary_output = true;
        json.nesting = spec.nesting;
        json.segments = spec.segments;
        let label = spec.label;
        let mut cell = context
            .cell(
                format!("{label} | json"),
                &json,
                ONE,
                context.windows(requests),
                None,
                &context.http[..1],
            )
            .await?;
        let grpc_cell = match (&context.grpc, spec.segments > 1) {
            (_, true) => Cell::not_available(
                format!("{label} | grpc"),
                "not available: segments are HTTP/1 chunks",
            ),
            (None, _) => {
                Cell::not_available(format!("{label} | grpc"), "not available: --grpc off")
            }
            (Some(grpc), false) => {
                let grpc_load = Workload::new(
                    Protocol::Grpc,
                    spec.model,
                    "INPUT0",
                    Payload::Tensor(spec.values),
                );
                context
                    .cell(
                        format!("{label} | grpc"),
                        &grpc_load,
                        ONE,
                        context.windows(requests),
                        None,
                        std::slice::from_ref::<Target>(grpc),
                    )
                    .await?
            }
        };
        cell.label = label.clone();
        cells.push(cell);
        let mut grpc_cell = grpc_cell;
        grpc_cell.label = format!("{label} (grpc)");
        cells.push(grpc_cell);
    }
    for (label, why) in missing {
        cells.push(Cell::not_available(label, why));
    }
    let table = table(&cells);
    Ok(Outcome {
        scenario: super::Name::Transcoding,
        short: context.short,
        cells,
        extra: Vec::new(),
        table,
    })
}

fn table(cells: &[Cell]) -> String {
    let mut t = Table::new([
        "cell",
        "json p50 ms",
        "grpc p50 ms",
        "json / grpc",
        "json decode p50",
        "grpc decode p50",
        "json body KB",
    ]);
    let mut i = 0;
    while i < cells.len() {
        let json = &cells[i];
        if let Some(why) = &json.not_available {
            t.row([json.label.clone(), why.clone()]);
            i += 1;
            continue;
        }
        let grpc = cells.get(i + 1).filter(|c| c.label.ends_with("(grpc)"));
        i += if grpc.is_some() { 2 } else { 1 };
        let describe = |cell: Option<&Cell>| -> (String, String, Option<f64>) {
            let Some(cell) = cell else {
                return ("n/a".into(), "n/a".into(), None);
            };
            if let Some(why) = &cell.not_available {
                return (why.clone(), String::new(), None);
            }
            let Some(m) = cell.measurements.first() else {
                return ("n/a".into(), "n/a".into(), None);
            };
            if let Some(failed) = failure(m) {
                return (failed, String::new(), None);
            }
            let decode = m
                .summary
                .server
                .get("decode")
                .map_or("n/a".into(), |d| ms(d.p50));
            (
                ms(m.summary.latency.p50),
                decode,
                Some(m.summary.latency.p50),
            )
        };
        let (json_p50, json_decode, a) = describe(Some(json));
        let (grpc_p50, grpc_decode, b) = describe(grpc);
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => String::new(),
        };
        let kb = json
            .measurements
            .first()
            .filter(|m| m.summary.throughput > 0.0)
            .map_or(String::new(), |m| {
                format!("{:.1}", m.summary.mb_out_per_s * 1e3 / m.summary.throughput)
            });
        t.row([
            json.label.clone(),
            json_p50,
            grpc_p50,
            ratio,
            json_decode,
            grpc_decode,
            kb,
        ]);
    }
    format!(
        "transcoding: the same tensor as V2 JSON (REST) and V2 gRPC, one request at a time; times in ms\n\n{}",
        t.render()
    )
}
