//! The published measurements of JSON serving, re-measured here: each
//! scenario runs against the servers it is given, in one run, and prints
//! its table next to the published one. What a server does not offer is
//! reported as "not available", never guessed.

mod batching;
mod clipper_grid;
mod go_ml_ladder;
mod small_json;
mod streaming_body;
mod transcoding;
mod upstream;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::cli::{self, OutputArgs};
use crate::engine::{self, Load, Measurement, Plan, Windows};
use crate::http1::Pace;
use crate::report;
use crate::target::Target;
use crate::workload::{Protocol, Workload};

/// The scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Name {
    /// Clipper's batching figure: throughput and p99 against offered load
    /// for no batching, a fixed batch, dynamic and adaptive batching on a
    /// model with a cost per call; batching in front of an upstream; the
    /// batcher's own cost on Titanic rows.
    Batching,
    /// Clipper's parse-latency grid: JSON float inputs of 784 to 262144
    /// floats at batch 1 to 32; request latency and server decode time.
    ClipperGrid,
    /// The Go ML latency ladder: one Titanic passenger end to end, in
    /// process and over every transport and encoding, in ns/op.
    GoMlLadder,
    /// TechEmpower-json-style throughput of a small JSON GET (`GET /v2`)
    /// at 16 to 512 connections.
    SmallJson,
    /// A large body sent at a throttled rate: the time from its last byte
    /// to the answer, streaming decode against a buffered baseline.
    StreamingBody,
    /// The JSON-to-gRPC transcoding dimensions: array length, nesting,
    /// body length, message segments and value types, JSON against gRPC.
    Transcoding,
    /// wirespeed in front of another server (`backend = "upstream"`)
    /// against that server alone: a large JSON request, one row's added
    /// latency and throughput, and the proxy's own ceiling.
    Upstream,
}

/// `wirespeed bench scenario NAME`.
#[derive(Args)]
pub struct ScenarioArgs {
    /// Which scenario.
    #[arg(value_enum)]
    name: Name,

    /// The server's HTTP address.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    http: String,

    /// The server's gRPC address, or `off`.
    #[arg(long, default_value = "grpc://127.0.0.1:8001")]
    grpc: String,

    /// The server's HTTP Unix socket (`wirespeed serve --http-uds PATH`).
    #[arg(long)]
    http_uds: Option<PathBuf>,

    /// The server's gRPC Unix socket (`wirespeed serve --grpc-uds PATH`).
    #[arg(long)]
    grpc_uds: Option<PathBuf>,

    /// The model repository for the in-process rungs of go-ml-ladder.
    #[arg(long, default_value = "models")]
    models: PathBuf,

    /// Peer HTTP servers measured in the same run, windows interleaved
    /// (e.g. an MLServer serving the same model names over V2).
    #[arg(long, num_args = 1..)]
    compare: Vec<String>,

    /// `upstream`: the upstream's own gRPC port, measured directly beside
    /// wirespeed's `--grpc` in front of it.
    #[arg(long)]
    upstream_grpc: Option<String>,

    /// `upstream`: a wirespeed in front of the `--grpc-uds` identity
    /// server, for the proxy's ceiling.
    #[arg(long)]
    ceiling_front: Option<String>,

    /// A short run: a corner of the grid and brief windows (for tests and
    /// a first look; the figures are rough).
    #[arg(long)]
    short: bool,

    /// Client threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,

    /// Allow targets that are not this machine.
    #[arg(long)]
    allow_remote: bool,

    #[command(flatten)]
    output: OutputArgs,
}

/// What a scenario has to work with.
pub(crate) struct Context {
    pub(crate) http: Vec<Target>,
    pub(crate) grpc: Option<Target>,
    pub(crate) http_uds: Option<Target>,
    pub(crate) grpc_uds: Option<Target>,
    pub(crate) models: PathBuf,
    pub(crate) short: bool,
    pub(crate) progress: ProgressBar,
}

/// A row of a scenario's results: a cell of its grid, measured on each target.
#[derive(Serialize)]
pub(crate) struct Cell {
    pub(crate) label: String,
    pub(crate) measurements: Vec<Measurement>,
    /// Why the cell was not measured, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) not_available: Option<String>,
}

/// A scenario's results.
#[derive(Serialize)]
pub(crate) struct Outcome {
    pub(crate) scenario: Name,
    pub(crate) short: bool,
    pub(crate) cells: Vec<Cell>,
    /// Figures measured outside the load generator (in-process rungs,
    /// buffered baselines), by label, in the unit their table gives.
    pub(crate) extra: Vec<(String, f64)>,
    /// The table printed.
    pub(crate) table: String,
}

impl Context {
    /// A closed loop of `connections`, with windows sized for the mode.
    pub(crate) fn windows(&self, requests: Option<u64>) -> Windows {
        if self.short {
            Windows {
                warmup: Duration::from_millis(100),
                window: Duration::from_millis(250),
                min_windows: 2,
                max_windows: 2,
                stable: 0.10,
                max_requests: requests,
                timeout: Duration::from_secs(30),
            }
        } else {
            Windows {
                warmup: Duration::from_millis(500),
                window: Duration::from_secs(1),
                min_windows: 3,
                max_windows: 8,
                stable: 0.05,
                max_requests: requests,
                timeout: Duration::from_secs(60),
            }
        }
    }

    /// Measures `workload` with `load` on `targets`, one cell.
    pub(crate) async fn cell(
        &self,
        label: impl Into<String>,
        workload: &Workload,
        load: Load,
        windows: Windows,
        pace: Option<Pace>,
        targets: &[Target],
    ) -> anyhow::Result<Cell> {
        let label = label.into();
        let request = workload
            .build()
            .with_context(|| format!("building the request of {label}"))?;
        let plan = Plan {
            protocol: workload.protocol,
            request,
            load,
            windows,
            pace,
        };
        self.progress.set_message(label.clone());
        let measurements = engine::measure(&plan, targets, &self.progress).await?;
        Ok(Cell {
            label,
            measurements,
            not_available: None,
        })
    }
}

impl Cell {
    /// A cell that could not be measured, and why.
    pub(crate) fn not_available(label: impl Into<String>, why: impl Into<String>) -> Cell {
        Cell {
            label: label.into(),
            measurements: Vec::new(),
            not_available: Some(why.into()),
        }
    }

    /// The measurement of the target labelled `target`, if it answered at all.
    pub(crate) fn of(&self, target: &str) -> Option<&Measurement> {
        self.measurements.iter().find(|m| m.target == target)
    }
}

/// A closed loop of one connection: one request at a time, as the published
/// latency figures were taken.
pub(crate) const ONE: Load = Load::Closed { connections: 1 };

/// How a measurement that failed every request reads in a table.
pub(crate) fn failure(m: &Measurement) -> Option<String> {
    if m.summary.answered > 0 {
        return None;
    }
    let (kind, n) = m.summary.errors.iter().max_by_key(|(_, n)| **n)?;
    // The whole message is in the JSON output; the table keeps its start.
    let mut short: String = kind.chars().take(72).collect();
    if short.len() < kind.len() {
        short.push('…');
    }
    let kind = short;
    Some(format!("failed ({n} x {kind})"))
}

/// Runs a scenario.
pub fn run(args: ScenarioArgs) -> anyhow::Result<()> {
    let mut http_texts = vec![args.http.clone()];
    http_texts.extend(args.compare.iter().cloned());
    let http = cli::targets(&http_texts, Protocol::V2Json, args.allow_remote)?;
    let grpc = if args.grpc == "off" {
        None
    } else {
        Some(
            cli::targets(
                std::slice::from_ref(&args.grpc),
                Protocol::Grpc,
                args.allow_remote,
            )?
            .remove(0),
        )
    };
    let uds = |path: &Option<PathBuf>, scheme: &str| -> anyhow::Result<Option<Target>> {
        path.as_ref()
            .map(|p| format!("{scheme}:{}", p.display()).parse())
            .transpose()
    };
    let context = Context {
        http,
        grpc,
        http_uds: uds(&args.http_uds, "unix")?,
        grpc_uds: uds(&args.grpc_uds, "grpc+unix")?,
        models: args.models.clone(),
        short: args.short,
        progress: cli::progress(0),
    };
    let grpc_target = |text: &Option<String>| -> anyhow::Result<Option<Target>> {
        text.as_ref()
            .map(|t| {
                cli::targets(std::slice::from_ref(t), Protocol::Grpc, args.allow_remote)
                    .map(|mut v| v.remove(0))
            })
            .transpose()
    };
    let pairs = upstream::Pairs {
        upstream_grpc: grpc_target(&args.upstream_grpc)?,
        ceiling_front: grpc_target(&args.ceiling_front)?,
    };
    let runtime = cli::runtime(args.threads)?;
    let outcome = runtime.block_on(async {
        match args.name {
            Name::Batching => batching::run(&context).await,
            Name::ClipperGrid => clipper_grid::run(&context).await,
            Name::GoMlLadder => go_ml_ladder::run(&context).await,
            Name::SmallJson => small_json::run(&context).await,
            Name::StreamingBody => streaming_body::run(&context).await,
            Name::Transcoding => transcoding::run(&context).await,
            Name::Upstream => upstream::run(&context, &pairs).await,
        }
    })?;
    context.progress.finish_and_clear();
    println!("{}", outcome.table);
    let rows: Vec<(String, &Measurement)> = outcome
        .cells
        .iter()
        .flat_map(|c| {
            c.measurements
                .iter()
                .map(move |m| (format!("{} {}", c.label, m.target), m))
        })
        .collect();
    let plotted: Vec<(String, &Measurement)> = match args.name {
        // Thirty lines say nothing: the grid's plot is batch 1.
        Name::ClipperGrid => rows
            .iter()
            .filter(|(l, _)| l.contains(" x 1 "))
            .cloned()
            .collect(),
        _ => rows.clone(),
    };
    let title = format!(
        "wirespeed bench scenario {}",
        args.name
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    );
    let mut output = args.output.clone();
    let plot = output.plot.take();
    cli::write_outputs(&output, &title, &outcome, &rows)?;
    if let Some(path) = plot {
        report::plot(&path, &title, &plotted)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
