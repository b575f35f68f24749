//! `streaming-body`: a large V2 JSON body (1, 14 and 64 MB of json.dumps
//! floats) sent at a throttled rate (25, 100 and 400 MB/s), one request at
//! a time. The figure is the time from the body's last byte to the first
//! byte of the answer: a server that decodes while the body arrives has
//! little left to do then; one that buffers the body has all of it.
//!
//! The buffered baseline is measured twice over: any `--compare` server,
//! paced the same way, and, in process, the least a buffering server must
//! spend after the last byte: `serde_json::from_slice` of the whole body
//! into typed tensors (`Vec<f32>`), which is what a buffered Rust server
//! does before its model runs. (Published: the Zulip client's streaming
//! decode cut 116 ms to 77 ms on a 14 MB body.)

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{failure, Cell, Context, Outcome, ONE};
use crate::engine::Windows;
use crate::http1::Pace;
use crate::report::{ms, Table};
use crate::workload::{Floats, Payload, Protocol, Request, Values, Workload};

const SIZES_MB: [usize; 3] = [1, 14, 64];
const RATES_MB_S: [f64; 3] = [25.0, 100.0, 400.0];

/// A V2 request as a buffering Rust server would type it.
#[derive(Deserialize)]
#[allow(dead_code)]
struct TypedRequest {
    inputs: Vec<TypedInput>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct TypedInput {
    name: String,
    shape: Vec<usize>,
    datatype: String,
    data: Vec<f32>,
}

/// The body of a request built by [`Workload::build`].
fn body_of(request: &Request) -> Vec<u8> {
    match request {
        Request::Http(r) => r.body.concat(),
        Request::Grpc(_) => Vec::new(),
    }
}

/// The median time of `serde_json::from_slice` of `body` into typed tensors.
fn buffered_parse(body: &[u8], runs: usize) -> anyhow::Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let parsed: TypedRequest = serde_json::from_slice(body)?;
        times.push(start.elapsed());
        std::hint::black_box(parsed);
    }
    times.sort();
    Ok(times[times.len() / 2])
}

pub(super) async fn run(context: &Context) -> anyhow::Result<Outcome> {
    let (sizes, rates): (&[usize], &[f64]) = if context.short {
        (&[1], &[100.0])
    } else {
        (&SIZES_MB, &RATES_MB_S)
    };
    let reps = if context.short { 2 } else { 5 };
    // One request per window: the windows count the repetitions.
    let windows = Windows {
        warmup: Duration::from_millis(1),
        window: Duration::from_millis(1),
        min_windows: reps,
        max_windows: reps,
        stable: 0.0,
        max_requests: None,
        timeout: Duration::from_secs(120),
    };
    let mut cells = Vec::new();
    let mut extra = Vec::new();
    for &mb in sizes {
        // A json.dumps float32 is ~20 bytes with its comma.
        let floats = mb * 1_000_000 / 20;
        let mut workload = Workload::new(
            Protocol::V2Json,
            "identity_fp32",
            "INPUT0",
            Payload::Tensor(Values::Fp32 {
                shape: [1, floats],
                floats: Floats::Long,
            }),
        );
        workload.binary_output = true;
        let body = body_of(&workload.build()?);
        let actual_mb = body.len() as f64 / 1e6;
        let parse = buffered_parse(&body, reps)?;
        extra.push((
            format!("{mb} MB: serde_json buffered parse ms"),
            parse.as_secs_f64() * 1e3,
        ));
        drop(body);
        for &rate in rates {
            let label = format!("{mb} MB ({actual_mb:.1} MB) at {rate} MB/s");
            let pace = Some(Pace {
                bytes_per_second: rate * 1e6,
            });
            cells.push(
                context
                    .cell(label, &workload, ONE, windows, pace, &context.http)
                    .await?,
            );
        }
    }
    let table = table(&cells, &extra);
    Ok(Outcome {
        scenario: super::Name::StreamingBody,
        short: context.short,
        cells,
        extra,
        table,
    })
}

fn table(cells: &[Cell], extra: &[(String, f64)]) -> String {
    let mut t = Table::new([
        "body, pace",
        "target",
        "send ms",
        "last byte -> answer p50",
        "max",
        "server decode p50",
        "buffered baseline (serde_json)",
        "requests",
    ]);
    for cell in cells {
        let size = cell.label.split(" MB").next().unwrap_or("");
        let baseline = extra
            .iter()
            .find(|(l, _)| l.split(" MB").next() == Some(size))
            .map_or(String::new(), |(_, v)| ms(*v));
        for m in &cell.measurements {
            let mut row = vec![cell.label.clone(), m.target.clone()];
            if let Some(failed) = failure(m) {
                row.push(failed);
                t.row(row);
                continue;
            }
            let s = &m.summary;
            let p50 =
                |d: &Option<crate::stats::Dist>| d.as_ref().map_or("n/a".to_owned(), |d| ms(d.p50));
            row.extend([
                p50(&s.send),
                p50(&s.wait),
                s.wait.as_ref().map_or("n/a".to_owned(), |d| ms(d.max)),
                s.server
                    .get("decode")
                    .map_or("n/a".to_owned(), |d| ms(d.p50)),
                baseline.clone(),
                s.answered.to_string(),
            ]);
            t.row(row);
        }
    }
    format!(
        "streaming-body: V2 JSON float32 bodies sent at a throttled rate; times in ms\n\
         (published: Zulip's streaming decode, 116 ms -> 77 ms on 14 MB)\n\n{}",
        t.render()
    )
}
