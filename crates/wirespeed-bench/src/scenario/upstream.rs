//! `upstream`: wirespeed in front of another inference server, against
//! that server alone, each comparison in one measurement with windows
//! interleaved. The four figures:
//!
//! 1. a 262144x8 FP32 V2 JSON request (json.dumps-style floats) to the
//!    upstream's REST port (`--compare`) and to wirespeed in front of it
//!    (`--http`), model `sum` with input `x`: at least 10x faster through
//!    wirespeed;
//! 2. one 10-feature row over gRPC to the upstream's gRPC port
//!    (`--upstream-grpc`) and to wirespeed (`--grpc`), model `xgb`: the p50
//!    wirespeed adds, at most 50 µs;
//! 3. the same at 16 connections: throughput at least 0.9x the upstream's;
//! 4. the proxy's ceiling: a wirespeed identity server over a Unix socket
//!    (`--grpc-uds`) and a wirespeed in front of it (`--ceiling-front`):
//!    the added p50, at most 20 µs.
//!
//! The names are those of the peers' setup (`../shared/peers`: KServe and
//! MLServer serving `sum` and `xgb`); `benchmarks/scripts/upstream.sh`
//! starts everything and runs this.

use super::{failure, Cell, Context, Outcome, ONE};
use crate::engine::Load;
use crate::report::{ms, Table};
use crate::target::Target;
use crate::workload::{Floats, Payload, Protocol, Values, Workload};

/// What the upstream scenario compares, beside the context's targets.
pub(crate) struct Pairs {
    /// The upstream's gRPC port, directly.
    pub(crate) upstream_grpc: Option<Target>,
    /// A wirespeed in front of the `--grpc-uds` identity server.
    pub(crate) ceiling_front: Option<Target>,
}

/// What a cell is held to.
enum Goal {
    /// The direct p50 over the one through wirespeed, at least this.
    Faster(f64),
    /// The p50 wirespeed adds, at most this many ms.
    Adds(f64),
    /// Throughput through wirespeed over the direct one, at least this.
    Throughput(f64),
}

pub(super) async fn run(context: &Context, pairs: &Pairs) -> anyhow::Result<Outcome> {
    let requests = if context.short { Some(20) } else { None };
    let large = Workload::new(
        Protocol::V2Json,
        "sum",
        "x",
        Payload::Tensor(Values::Fp32 {
            shape: if context.short {
                [1024, 8]
            } else {
                [262144, 8]
            },
            floats: Floats::Long,
        }),
    );
    let row = |protocol| {
        Workload::new(
            protocol,
            "xgb",
            "x",
            Payload::Tensor(Values::Fp32 {
                shape: [1, 10],
                floats: Floats::Long,
            }),
        )
    };
    let identity = Workload::new(
        Protocol::Grpc,
        "identity_fp32",
        "INPUT0",
        Payload::Tensor(Values::Fp32 {
            shape: [1, 8],
            floats: Floats::Long,
        }),
    );
    let mut cells = Vec::new();
    let mut goals = Vec::new();
    let label = "large: 262144x8 FP32 V2 JSON, REST directly vs through wirespeed";
    match context.http.get(1) {
        Some(direct) => {
            let targets = [direct.clone(), context.http[0].clone()];
            let windows = context.windows(requests);
            cells.push(
                context
                    .cell(label, &large, ONE, windows, None, &targets)
                    .await?,
            );
        }
        None => cells.push(Cell::not_available(
            label,
            "not available: give the upstream's REST URL with --compare",
        )),
    }
    goals.push(Goal::Faster(10.0));
    for (label, load, goal) in [
        ("one row over gRPC, 1 connection", ONE, Goal::Adds(0.050)),
        (
            "one row over gRPC, 16 connections",
            Load::Closed { connections: 16 },
            Goal::Throughput(0.9),
        ),
    ] {
        match (&pairs.upstream_grpc, &context.grpc) {
            (Some(direct), Some(front)) => {
                let targets = [direct.clone(), front.clone()];
                let windows = context.windows(requests);
                cells.push(
                    context
                        .cell(label, &row(Protocol::Grpc), load, windows, None, &targets)
                        .await?,
                );
            }
            _ => cells.push(Cell::not_available(
                label,
                "not available: give --upstream-grpc and --grpc",
            )),
        }
        goals.push(goal);
    }
    let label = "the proxy's ceiling: wirespeed identity over a Unix socket, 1 connection";
    match (&context.grpc_uds, &pairs.ceiling_front) {
        (Some(direct), Some(front)) => {
            let targets = [direct.clone(), front.clone()];
            let windows = context.windows(requests);
            cells.push(
                context
                    .cell(label, &identity, ONE, windows, None, &targets)
                    .await?,
            );
        }
        _ => cells.push(Cell::not_available(
            label,
            "not available: give --grpc-uds (an identity wirespeed) and --ceiling-front",
        )),
    }
    goals.push(Goal::Adds(0.020));
    let table = table(&cells, &goals);
    Ok(Outcome {
        scenario: super::Name::Upstream,
        short: context.short,
        cells,
        extra: Vec::new(),
        table,
    })
}

fn table(cells: &[Cell], goals: &[Goal]) -> String {
    let mut t = Table::new([
        "cell",
        "directly p50 ms",
        "through p50 ms",
        "added p50 ms",
        "speed-up",
        "throughput ratio",
        "target",
        "reached",
    ]);
    for (cell, goal) in cells.iter().zip(goals) {
        if let Some(why) = &cell.not_available {
            t.row([cell.label.clone(), why.clone()]);
            continue;
        }
        let (Some(direct), Some(through)) = (cell.measurements.first(), cell.measurements.get(1))
        else {
            t.row([cell.label.clone(), "n/a".into()]);
            continue;
        };
        if let Some(failed) = failure(direct).or_else(|| failure(through)) {
            t.row([cell.label.clone(), failed]);
            continue;
        }
        let (a, b) = (direct.summary.latency.p50, through.summary.latency.p50);
        let throughput =
            through.summary.throughput / direct.summary.throughput.max(f64::MIN_POSITIVE);
        let (target, reached) = match goal {
            Goal::Faster(x) => (format!(">= {x}x faster"), a / b >= *x),
            Goal::Adds(limit) => (format!("adds <= {:.0} µs", limit * 1e3), b - a <= *limit),
            Goal::Throughput(x) => (format!(">= {x}x throughput"), throughput >= *x),
        };
        t.row([
            cell.label.clone(),
            ms(a),
            ms(b),
            ms(b - a),
            format!("{:.2}x", a / b),
            format!("{throughput:.2}"),
            target,
            if reached { "yes".into() } else { "NO".into() },
        ]);
    }
    format!(
        "upstream: the upstream directly and wirespeed in front of it, each cell one run with windows interleaved\n\n{}",
        t.render()
    )
}
