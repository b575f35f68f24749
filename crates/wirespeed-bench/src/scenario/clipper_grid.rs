//! `clipper-grid`: Clipper's parse-latency grid (Crankshaw et al., NSDI
//! 2017). JSON float inputs of 784 to 262,144 floats at batch 1 to 32,
//! json.dumps-style long floats, one request at a time to the `identity_fp32`
//! model over V2 JSON, asking for the echoed tensor back in binary so the
//! answer costs a copy, not an encode. Reported: request latency and the
//! server's decode time (its `Server-Timing`), as mean, std, min, p50, p95,
//! p99 and max.
//!
//! The largest cells are larger than wirespeed's default 64 MiB body limit
//! (262,144 long floats x 32 is ~170 MB); they are reported as refused
//! unless the server runs with a larger `--max-body-bytes`.

use super::{failure, Cell, Context, Outcome, ONE};
use crate::report::{ms, Table};
use crate::stats::Dist;
use crate::workload::{Floats, Payload, Protocol, Values, Workload};

const SIZES: [usize; 6] = [784, 1024, 4096, 16384, 65536, 262144];
const BATCHES: [usize; 5] = [1, 4, 8, 16, 32];

/// What Clipper published for this cell (RapidJSON on an m4.4xlarge).
fn published(size: usize, batch: usize) -> &'static str {
    match (size, batch) {
        (262144, 1) => "1.41 ms parse",
        _ => "",
    }
}

pub(super) async fn run(context: &Context) -> anyhow::Result<Outcome> {
    let (sizes, batches): (&[usize], &[usize]) = if context.short {
        (&[784, 4096], &[1, 4])
    } else {
        (&SIZES, &BATCHES)
    };
    let requests = if context.short { Some(40) } else { Some(2000) };
    let mut cells = Vec::new();
    for &size in sizes {
        for &batch in batches {
            let mut workload = Workload::new(
                Protocol::V2Json,
                "identity_fp32",
                "INPUT0",
                Payload::Tensor(Values::Fp32 {
                    shape: [batch, size],
                    floats: Floats::Long,
                }),
            );
            workload.binary_output = true;
            let label = format!("{size} x {batch}");
            cells.push(
                context
                    .cell(
                        label,
                        &workload,
                        ONE,
                        context.windows(requests),
                        None,
                        &context.http,
                    )
                    .await?,
            );
        }
    }
    let table = table(context, &cells);
    Ok(Outcome {
        scenario: super::Name::ClipperGrid,
        short: context.short,
        cells,
        extra: Vec::new(),
        table,
    })
}

fn row(d: &Dist) -> [String; 7] {
    [
        ms(d.mean),
        ms(d.stdev),
        ms(d.min),
        ms(d.p50),
        ms(d.p95),
        ms(d.p99),
        ms(d.max),
    ]
}

fn table(context: &Context, cells: &[Cell]) -> String {
    let mut t = Table::new([
        "floats x batch",
        "target",
        "req/s",
        "latency mean",
        "std",
        "min",
        "p50",
        "p95",
        "p99",
        "max",
        "| decode mean",
        "std",
        "min",
        "p50",
        "p95",
        "p99",
        "max",
        "| published (RapidJSON)",
    ]);
    for cell in cells {
        let (size, batch) = cell
            .label
            .split_once(" x ")
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .unwrap_or((0, 0));
        for target in &context.http {
            let Some(m) = cell.of(&target.label) else {
                continue;
            };
            let mut cells = vec![cell.label.clone(), target.label.clone()];
            if let Some(failed) = failure(m) {
                cells.push(failed);
                t.row(cells);
                continue;
            }
            cells.push(format!("{:.0}", m.summary.throughput));
            cells.extend(row(&m.summary.latency));
            match m.summary.server.get("decode") {
                Some(d) => {
                    let mut r = row(d).to_vec();
                    r[0] = format!("| {}", r[0]);
                    cells.extend(r);
                }
                None => {
                    cells.push("| n/a".into());
                    cells.extend(std::iter::repeat_n(String::new(), 6));
                }
            }
            cells.push(format!("| {}", published(size, batch)));
            t.row(cells);
        }
    }
    format!(
        "clipper-grid: V2 JSON, json.dumps-style float32 values, one request at a time, times in ms;\n\
         decode is the server's own figure (Server-Timing), n/a for servers that do not send it\n\
         (published: Clipper, NSDI 2017, RapidJSON on an m4.4xlarge: 1.41 ms to parse 262,144 floats \
         at batch 1, about 12 ms p50 at batch 32)\n\n{}",
        t.render()
    )
}
