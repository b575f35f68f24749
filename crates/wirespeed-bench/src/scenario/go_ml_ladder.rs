//! `go-ml-ladder`: the latency ladder of the Go ML benchmark
//! (nikolaydubina/go-ml-benchmarks): one Titanic passenger, end to end,
//! from in-process calls down through every transport and encoding, in
//! ns/op. The rungs here are wirespeed's: the tree ensemble called in
//! process, the model behind its `Model` trait, then V2 raw, binary and
//! JSON over a Unix socket and TCP, gRPC over both, and TF Serving and
//! Clipper JSON, one request at a time. ns/op is the mean time per request,
//! as Go's benchmarks report it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use wirespeed_core::Model as _;
use wirespeed_core::{Tensor, TensorData};
use wirespeed_trees::TreeModel;

use super::{failure, Cell, Context, Outcome, ONE};
use crate::report::Table;
use crate::target::Target;
use crate::workload::{titanic_row, Payload, Protocol, Values, Workload};

/// The published rungs, by the rung of ours they compare with.
fn published(label: &str) -> &'static str {
    match label {
        "in-process: trees" => "491 ns (Go: go-featureprocessing + leaves, in process)",
        "uds v2-raw" => "243 µs (Python: raw bytes over a Unix socket)",
        "tcp grpc" => "367 µs (C++ gRPC server)",
        "tcp v2-json" => "22 ms (Python Flask, JSON)",
        _ => "",
    }
}

/// The median ns per call of `f` over batches run for about `budget`.
fn ns_per_op(budget: Duration, mut f: impl FnMut()) -> f64 {
    const BATCH: u32 = 2_000;
    for _ in 0..BATCH {
        f();
    }
    let mut batches = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || batches.len() < 5 {
        let t = Instant::now();
        for _ in 0..BATCH {
            f();
        }
        batches.push(t.elapsed().as_nanos() as f64 / f64::from(BATCH));
    }
    batches.sort_by(f64::total_cmp);
    batches[batches.len() / 2]
}

fn in_process(context: &Context) -> anyhow::Result<Vec<(String, f64)>> {
    let budget = if context.short {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(2)
    };
    let path = context.models.join("titanic").join("model.json");
    let trees = wirespeed_trees::load(&path)
        .with_context(|| format!("loading {} for the in-process rung", path.display()))?;
    let row = titanic_row();
    let mut out = [0f32; 1];
    let trees_ns = ns_per_op(budget, || {
        trees.predict_row(black_box(&row), &mut out);
        black_box(&out);
    });
    let pool = wirespeed_core::CpuPool::new(1)?;
    let folder = context.models.join("titanic");
    let model = TreeModel::load_folder(&folder, &pool)
        .map_err(|e| anyhow::anyhow!("loading the model {}: {e}", folder.display()))?;
    let outputs: Vec<usize> = (0..model.metadata().outputs.len()).collect();
    let mut failed = None;
    let model_ns = ns_per_op(budget, || {
        let input = Tensor {
            name: "features".into(),
            shape: vec![1, 12],
            data: TensorData::Fp32(row.to_vec()),
            parameters: Vec::new(),
        };
        if let Err(e) = model.infer(std::slice::from_ref(&input), &outputs) {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        anyhow::bail!("the titanic model failed in process: {e}");
    }
    Ok(vec![
        ("in-process: trees".into(), trees_ns),
        ("in-process: model".into(), model_ns),
    ])
}

pub(super) async fn run(context: &Context) -> anyhow::Result<Outcome> {
    let extra = in_process(context)?;
    let requests = if context.short {
        Some(200)
    } else {
        Some(100_000)
    };
    let windows = context.windows(requests);
    let passenger = || Payload::Tensor(Values::Titanic { rows: 1 });
    let workload = |protocol| Workload::new(protocol, "titanic", "features", passenger());
    let primary = &context.http[0];
    let mut rungs: Vec<(String, Option<Target>, Protocol, String)> = Vec::new();
    let uds_missing =
        "not available: give the server --http-uds PATH and this scenario --http-uds PATH";
    for protocol in [Protocol::V2Raw, Protocol::V2Binary, Protocol::V2Json] {
        rungs.push((
            format!("uds {}", protocol.name()),
            context.http_uds.clone(),
            protocol,
            uds_missing.into(),
        ));
    }
    rungs.push((
        "uds grpc".into(),
        context.grpc_uds.clone(),
        Protocol::Grpc,
        "not available: give the server --grpc-uds PATH and this scenario --grpc-uds PATH".into(),
    ));
    rungs.push((
        "tcp grpc".into(),
        context.grpc.clone(),
        Protocol::Grpc,
        "not available: --grpc off".into(),
    ));
    for protocol in [
        Protocol::V2Raw,
        Protocol::V2Binary,
        Protocol::V2Json,
        Protocol::TfServing,
        Protocol::Clipper,
    ] {
        rungs.push((
            format!("tcp {}", protocol.name()),
            Some(primary.clone()),
            protocol,
            String::new(),
        ));
    }
    let mut cells = Vec::new();
    for (label, target, protocol, missing) in rungs {
        let Some(target) = target else {
            cells.push(Cell::not_available(label, missing));
            continue;
        };
        // Peers are measured on the rung they all speak: V2 JSON over TCP.
        let mut targets = vec![target];
        if label == "tcp v2-json" {
            targets = context.http.clone();
        }
        cells.push(
            context
                .cell(label, &workload(protocol), ONE, windows, None, &targets)
                .await?,
        );
    }
    let table = table(&extra, &cells);
    Ok(Outcome {
        scenario: super::Name::GoMlLadder,
        short: context.short,
        cells,
        extra,
        table,
    })
}

fn ns(value: f64) -> String {
    format!("{value:.0}")
}

fn table(extra: &[(String, f64)], cells: &[Cell]) -> String {
    let mut t = Table::new([
        "rung",
        "target",
        "ns/op",
        "p50 ns",
        "p99 ns",
        "requests",
        "published",
    ]);
    for (label, value) in extra {
        t.row([
            label.clone(),
            "in process".into(),
            ns(*value),
            String::new(),
            String::new(),
            String::new(),
            published(label).to_owned(),
        ]);
    }
    for cell in cells {
        if let Some(why) = &cell.not_available {
            t.row([
                cell.label.clone(),
                String::new(),
                why.clone(),
                String::new(),
                String::new(),
                String::new(),
                published(&cell.label).to_owned(),
            ]);
            continue;
        }
        for m in &cell.measurements {
            if let Some(failed) = failure(m) {
                t.row([
                    cell.label.clone(),
                    m.target.clone(),
                    failed,
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                continue;
            }
            let l = &m.summary.latency;
            t.row([
                cell.label.clone(),
                m.target.clone(),
                ns(l.mean * 1e6),
                ns(l.p50 * 1e6),
                ns(l.p99 * 1e6),
                m.summary.answered.to_string(),
                published(&cell.label).to_owned(),
            ]);
        }
    }
    format!(
        "go-ml-ladder: one Titanic passenger end to end, one request at a time (ns/op = mean)\n\
         (published: nikolaydubina/go-ml-benchmarks)\n\n{}",
        t.render()
    )
}
