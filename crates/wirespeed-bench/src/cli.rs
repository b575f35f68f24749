//! The `wirespeed bench` command line: a run against one or more targets,
//! or a named scenario.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::engine::{self, Load, Measurement, Plan, SweepPoint, Windows};
use crate::http1::Pace;
use crate::report;
use crate::scenario::{self, ScenarioArgs};
use crate::target::Target;
use crate::timer::Arrival;
use crate::workload::{Floats, Payload, Protocol, Values, Workload};

/// Measure a server: latency by percentile (corrected for coordinated
/// omission), throughput and errors, or run a published scenario.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,

    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Re-measure a published JSON-serving benchmark and print its table
    /// next to the published one.
    Scenario(ScenarioArgs),
}

/// A duration in (possibly fractional) seconds.
pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("'{text}' is not a number of seconds"))
}

/// The windows of a measurement.
#[derive(Args, Clone)]
pub struct WindowArgs {
    /// Seconds of warm-up per target, not counted.
    #[arg(long, default_value = "1", value_parser = seconds)]
    pub warmup: Duration,

    /// Seconds per measurement window.
    #[arg(long, default_value = "2", value_parser = seconds)]
    pub window: Duration,

    /// Windows whose medians and throughputs must agree before the
    /// measurement has settled.
    #[arg(long, default_value_t = 3)]
    pub min_windows: usize,

    /// The most windows per target; the run is bounded by this.
    #[arg(long, default_value_t = 10)]
    pub max_windows: usize,

    /// How far apart (relative spread) the last windows may be and still
    /// agree.
    #[arg(long, default_value_t = 0.05)]
    pub stable: f64,

    /// The most requests per target over the whole measurement.
    #[arg(long, default_value_t = 10_000_000)]
    pub requests: u64,

    /// Seconds one request may take before it counts as failed.
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub timeout: Duration,
}

impl WindowArgs {
    pub(crate) fn windows(&self) -> anyhow::Result<Windows> {
        if self.window.is_zero() || self.timeout.is_zero() {
            bail!("--window and --timeout must be positive");
        }
        Ok(Windows {
            warmup: self.warmup,
            window: self.window,
            min_windows: self.min_windows.max(1),
            max_windows: self.max_windows.max(self.min_windows).max(1),
            stable: self.stable,
            max_requests: Some(self.requests),
            timeout: self.timeout,
        })
    }
}

/// Where the results go besides the terminal.
#[derive(Args, Clone, Default)]
pub struct OutputArgs {
    /// Write every figure, windows included, as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write one CSV row per measurement.
    #[arg(long)]
    pub csv: Option<PathBuf>,

    /// Draw latency by percentile, one line per target, as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// What a body is made of: `titanic:ROWS`, `fp32:BATCHxWIDTH`,
/// `int64:BATCHxWIDTH`, `bool:BATCHxWIDTH`, `bytes:LENGTH` or `file:PATH`.
#[derive(Clone, Debug)]
pub struct BodySpec(Payload);

fn shape(text: &str) -> Result<[usize; 2], String> {
    let (a, b) = text
        .split_once('x')
        .ok_or_else(|| format!("'{text}' is not BATCHxWIDTH"))?;
    let dim = |s: &str| {
        s.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("'{s}' is not a positive size"))
    };
    let shape = [dim(a)?, dim(b)?];
    elements(shape[0].checked_mul(shape[1]), text)?;
    Ok(shape)
}

/// The most values a generated body may hold: the body is built in memory
/// before the run (67 million long floats are ~1.4 GB of JSON), and a
/// server's default limits refuse far less.
const MAX_ELEMENTS: usize = 1 << 26;

fn elements(count: Option<usize>, text: &str) -> Result<usize, String> {
    count.filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| {
        format!("'{text}' is over the {MAX_ELEMENTS} values a generated body may hold")
    })
}

impl std::str::FromStr for BodySpec {
    type Err = String;

    fn from_str(text: &str) -> Result<BodySpec, String> {
        let (kind, arg) = text.split_once(':').unwrap_or((text, ""));
        let values = match kind {
            "titanic" => {
                let rows = if arg.is_empty() { 1 } else { arg.parse().map_err(|_| format!("'{arg}' is not a row count"))? };
                elements(usize::checked_mul(rows, 12), arg)?;
                Values::Titanic { rows }
            }
            "fp32" => Values::Fp32 { shape: shape(arg)?, floats: Floats::Long },
            "int64" => Values::Int64 { shape: shape(arg)? },
            "bool" => Values::Bool { shape: shape(arg)? },
            "bytes" => {
                let len = arg.parse().map_err(|_| format!("'{arg}' is not a length"))?;
                // Four bytes a value, for the bound.
                elements(Some(len / 4), arg)?;
                Values::Bytes { len }
            }
            "file" if !arg.is_empty() => return Ok(BodySpec(Payload::File(arg.into()))),
            "none" => return Ok(BodySpec(Payload::Empty)),
            _ => return Err(format!("'{text}': write titanic:ROWS, fp32:BATCHxWIDTH, int64:BATCHxWIDTH, bool:BATCHxWIDTH, bytes:LENGTH or file:PATH")),
        };
        Ok(BodySpec(Payload::Tensor(values)))
    }
}

#[derive(Args)]
struct RunArgs {
    /// The server: http://HOST:PORT, unix:/PATH (HTTP over a Unix socket),
    /// grpc://HOST:PORT or grpc+unix:/PATH; or `sink:`, a responder inside
    /// this process that answers at once, to show what the client alone
    /// can push.
    #[arg(default_value = "http://127.0.0.1:8000")]
    target: String,

    /// More servers to measure in the same run, windows interleaved, with
    /// ratios to the first (e.g. an MLServer on another port).
    #[arg(long, num_args = 1..)]
    compare: Vec<String>,

    /// The wire protocol.
    #[arg(long, value_enum, default_value = "v2-json")]
    protocol: Protocol,

    /// The body: titanic:ROWS, fp32:BATCHxWIDTH, int64:BATCHxWIDTH,
    /// bool:BATCHxWIDTH, bytes:LENGTH or file:PATH.
    #[arg(long, default_value = "titanic:1")]
    body: BodySpec,

    /// How FP32 values are written in JSON: long (json.dumps of float32
    /// values, ~19 characters) or short (~10).
    #[arg(long, value_enum, default_value = "long")]
    floats: Floats,

    /// The model (Clipper: the application); by default `titanic` for
    /// Titanic rows, else the bundled `identity_fp32`, `identity_int64`, `identity_bool` or `identity_bytes`.
    #[arg(long)]
    model: Option<String>,

    /// The input's name; by default `features` for Titanic rows, else `INPUT0`.
    #[arg(long)]
    input: Option<String>,

    /// The path of `--protocol get`.
    #[arg(long, default_value = "/v2")]
    path: String,

    /// Ask for V2 JSON outputs as binary.
    #[arg(long)]
    binary_output: bool,

    /// Send the body in this many chunks (Transfer-Encoding: chunked).
    #[arg(long, default_value_t = 0)]
    segments: usize,

    /// Send each body at this many MB/s.
    #[arg(long)]
    pace_mb_s: Option<f64>,

    /// Open loop: requests per second over all connections. Without it,
    /// each connection sends its next request when the last is answered.
    #[arg(long)]
    rate: Option<f64>,

    /// Open-loop arrivals: evenly spaced or Poisson.
    #[arg(long, value_enum, default_value = "constant")]
    arrival: Arrival,

    /// Connections (closed loop: also the requests in flight).
    #[arg(long, short = 'c', default_value_t = 16)]
    connections: usize,

    /// Sweep these open-loop rates (requests/s), up to saturation.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["sweep_connections", "rate"])]
    sweep_rates: Vec<f64>,

    /// Sweep these closed-loop connection counts, up to saturation.
    #[arg(long, value_delimiter = ',')]
    sweep_connections: Vec<usize>,

    /// In a sweep, a p99 over this many ms is saturation.
    #[arg(long)]
    p99_bound: Option<f64>,

    /// Client threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,

    /// Allow targets that are not this machine.
    #[arg(long)]
    allow_remote: bool,

    #[command(flatten)]
    windows: WindowArgs,

    #[command(flatten)]
    output: OutputArgs,
}

/// A progress bar on standard error (hidden when it is not a terminal).
pub(crate) fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    // A scenario does not know its windows in advance: it counts them.
    let template = if steps == 0 {
        "{spinner} [{elapsed_precise}] {pos} windows  {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} windows  {msg}"
    };
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Builds the client runtime.
pub(crate) fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    Ok(builder.enable_all().build()?)
}

/// Parses and checks targets for `protocol`.
pub(crate) fn targets(
    texts: &[String],
    protocol: Protocol,
    allow_remote: bool,
) -> anyhow::Result<Vec<Target>> {
    texts
        .iter()
        .map(|text| {
            let target: Target = if text == "sink:" {
                let address = crate::sink::start().context("starting the sink")?;
                Target {
                    scheme: crate::target::Scheme::Http,
                    transport: crate::target::Transport::Tcp(address),
                    label: "sink: (the client alone)".into(),
                }
            } else {
                text.parse()?
            };
            target.check_local(allow_remote)?;
            if target.scheme != protocol.scheme() {
                bail!(
                    "'{text}' is a{} target, but --protocol {} needs a{} one",
                    if target.scheme == crate::target::Scheme::Grpc {
                        " gRPC"
                    } else {
                        "n HTTP"
                    },
                    protocol.name(),
                    if protocol.scheme() == crate::target::Scheme::Grpc {
                        " grpc://"
                    } else {
                        "n http:// or unix:"
                    }
                );
            }
            Ok(target)
        })
        .collect()
}

#[derive(Serialize)]
struct RunReport<'a> {
    measurements: Vec<&'a Measurement>,
    sweep: &'a [SweepPoint],
}

/// Runs `wirespeed bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(BenchCommand::Scenario(s)) => scenario::run(s),
        None => run_load(args.run),
    }
}

fn run_load(args: RunArgs) -> anyhow::Result<()> {
    let mut texts = vec![args.target.clone()];
    texts.extend(args.compare.iter().cloned());
    let targets = targets(&texts, args.protocol, args.allow_remote)?;
    let mut payload = args.body.0.clone();
    if let Payload::Tensor(Values::Fp32 { floats, .. }) = &mut payload {
        *floats = args.floats;
    }
    if args.protocol == Protocol::Get {
        payload = Payload::Empty;
    }
    let (model, input) = defaults(&payload);
    let mut workload = Workload::new(
        args.protocol,
        args.model.as_deref().unwrap_or(model),
        args.input.as_deref().unwrap_or(input),
        payload,
    );
    workload.path = args.path.clone();
    workload.binary_output = args.binary_output;
    workload.segments = args.segments;
    let request = workload.build().context("building the request")?;
    let windows = args.windows.windows()?;
    if let Some(bad) = args
        .sweep_rates
        .iter()
        .find(|r| !r.is_finite() || **r <= 0.0)
    {
        bail!("--sweep-rates must be positive rates, not {bad}");
    }
    // A rate sweep is an open loop; its first level stands for --rate.
    let rate = args.rate.or(args.sweep_rates.first().copied());
    let load = match rate {
        Some(rate) if rate > 0.0 && rate.is_finite() => Load::Open {
            rate,
            arrival: args.arrival,
            connections: args.connections.max(1),
        },
        Some(rate) => {
            bail!("--rate must be a positive, finite number of requests per second, not {rate}")
        }
        None => Load::Closed {
            connections: args.connections.max(1),
        },
    };
    let pace = match args.pace_mb_s {
        Some(mb) if mb > 0.0 => Some(Pace {
            bytes_per_second: mb * 1e6,
        }),
        Some(mb) => bail!("--pace-mb-s must be positive, not {mb}"),
        None => None,
    };
    let plan = Plan {
        protocol: args.protocol,
        request,
        load,
        windows,
        pace,
    };
    let levels: Vec<f64> = if !args.sweep_rates.is_empty() {
        args.sweep_rates.clone()
    } else {
        args.sweep_connections.iter().map(|&c| c as f64).collect()
    };
    let steps = (windows.max_windows * targets.len() * levels.len().max(1)) as u64;
    let bar = progress(steps);
    let runtime = runtime(args.threads)?;
    let (measurements, sweep) = runtime.block_on(async {
        if levels.is_empty() {
            anyhow::Ok((engine::measure(&plan, &targets, &bar).await?, Vec::new()))
        } else {
            let points = engine::sweep(&plan, &levels, args.p99_bound, &targets, &bar).await?;
            anyhow::Ok((Vec::new(), points))
        }
    })?;
    bar.finish_and_clear();
    let mut rows: Vec<(String, &Measurement)> =
        measurements.iter().map(|m| (m.target.clone(), m)).collect();
    for point in &sweep {
        for m in &point.measurements {
            rows.push((format!("{} @ {}", m.target, point.offered), m));
        }
    }
    let all: Vec<&Measurement> = rows.iter().map(|(_, m)| *m).collect();
    println!("{}", report::latency_table(&all));
    for point in &sweep {
        if let Some(why) = &point.saturated {
            println!("saturated at {}: {why}", point.offered);
        }
    }
    write_outputs(
        &args.output,
        "wirespeed bench",
        &RunReport {
            measurements: measurements.iter().collect(),
            sweep: &sweep,
        },
        &rows,
    )
}

/// The default model and input of a payload.
fn defaults(payload: &Payload) -> (&'static str, &'static str) {
    match payload {
        Payload::Tensor(Values::Titanic { .. }) => ("titanic", "features"),
        Payload::Tensor(Values::Int64 { .. }) => ("identity_int64", "INPUT0"),
        Payload::Tensor(Values::Bool { .. }) => ("identity_bool", "INPUT0"),
        Payload::Tensor(Values::Bytes { .. }) => ("identity_bytes", "INPUT0"),
        _ => ("identity_fp32", "INPUT0"),
    }
}

/// Writes the `--json`, `--csv` and `--plot` files that were asked for.
pub(crate) fn write_outputs(
    output: &OutputArgs,
    title: &str,
    json: &impl Serialize,
    rows: &[(String, &Measurement)],
) -> anyhow::Result<()> {
    if let Some(path) = &output.json {
        report::write_json(path, json)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &output.csv {
        std::fs::write(path, report::csv_rows(rows))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &output.plot {
        report::plot(path, title, rows)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
