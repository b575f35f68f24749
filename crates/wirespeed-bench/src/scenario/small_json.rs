//! `small-json`: the shape of TechEmpower's JSON serialization test, a
//! small JSON answer to a GET, here wirespeed's server metadata
//! (`GET /v2`), under a closed loop of 16 to 512 keep-alive connections:
//! throughput and latency percentiles per connection count.

use super::{failure, Cell, Context, Outcome};
use crate::engine::Load;
use crate::report::{ms, Table};
use crate::workload::{Payload, Protocol, Workload};

const CONNECTIONS: [usize; 6] = [16, 32, 64, 128, 256, 512];

pub(super) async fn run(context: &Context) -> anyhow::Result<Outcome> {
    let connections: &[usize] = if context.short {
        &[16, 64]
    } else {
        &CONNECTIONS
    };
    let workload = Workload::new(Protocol::Get, "", "", Payload::Empty);
    let mut cells = Vec::new();
    for &c in connections {
        let windows = context.windows(None);
        cells.push(
            context
                .cell(
                    format!("{c} connections"),
                    &workload,
                    Load::Closed { connections: c },
                    windows,
                    None,
                    &context.http,
                )
                .await?,
        );
    }
    let table = table(&cells);
    Ok(Outcome {
        scenario: super::Name::SmallJson,
        short: context.short,
        cells,
        extra: Vec::new(),
        table,
    })
}

fn table(cells: &[Cell]) -> String {
    let mut t = Table::new([
        "connections",
        "target",
        "req/s",
        "p50 ms",
        "p90",
        "p99",
        "p99.9",
        "max",
        "errors",
        "windows",
    ]);
    for cell in cells {
        for m in &cell.measurements {
            let l = &m.summary.latency;
            let mut row = vec![cell.label.clone(), m.target.clone()];
            if let Some(failed) = failure(m) {
                row.push(failed);
            } else {
                row.extend([
                    format!("{:.0}", m.summary.throughput),
                    ms(l.p50),
                    ms(l.p90),
                    ms(l.p99),
                    ms(l.p99_9),
                    ms(l.max),
                    m.summary.failed.to_string(),
                    crate::report::settled(m),
                ]);
            }
            t.row(row);
        }
    }
    let answer_bytes = cells
        .iter()
        .flat_map(|c| &c.measurements)
        .find(|m| m.summary.throughput > 0.0)
        .map_or(0.0, |m| m.summary.mb_in_per_s * 1e6 / m.summary.throughput);
    format!(
        "small-json: GET /v2 (server metadata; {answer_bytes:.0} bytes per answer, head included), \
         closed loop, keep-alive\n(the shape of TechEmpower's JSON serialization test)\n\n{}",
        t.render()
    )
}
