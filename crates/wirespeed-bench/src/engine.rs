//! Driving load: connections, the open and closed loops, measurement
//! windows, the stability rule, interleaved targets and sweeps.
//!
//! A measurement is a sequence of *windows*. Each window opens its
//! connections (untimed), runs the loop for the window's length, waits for
//! the requests in flight, and hands back a [`Recorder`]. Before the first
//! window each target gets a warm-up window whose figures are dropped. With
//! several targets (`--compare`), windows alternate between them in ABBA
//! order, so a slow minute on a noisy machine falls on all of them alike.
//! Windows continue until the last `min_windows` agree (the spread of their
//! medians and throughputs is within `stable`), or `max_windows` have run,
//! or the request budget is spent.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};
use wirespeed_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;

use crate::http1::{self, Pace};
use crate::stats::{spread, Recorder, Sample, Summary};
use crate::target::{Scheme, Target, Transport};
use crate::timer::{Arrival, PreciseTimer, Schedule};
use crate::workload::{Protocol, Request};

/// How load is offered.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Load {
    /// Requests at a fixed rate regardless of answers; latency counts from
    /// each request's intended send time.
    Open {
        /// Requests per second, over all connections.
        rate: f64,
        /// Evenly spaced or Poisson.
        arrival: Arrival,
        /// Connections sharing the rate.
        connections: usize,
    },
    /// Each connection sends its next request when the previous is answered.
    Closed {
        /// Connections.
        connections: usize,
    },
}

impl Load {
    /// Connections the load uses.
    pub fn connections(&self) -> usize {
        match *self {
            Load::Open { connections, .. } | Load::Closed { connections } => connections,
        }
    }

    /// A short description: `open 2000/s poisson x16` or `closed x16`.
    pub fn describe(&self) -> String {
        match *self {
            Load::Open {
                rate,
                arrival,
                connections,
            } => format!("open {rate}/s {arrival:?} x{connections}").to_lowercase(),
            Load::Closed { connections } => format!("closed x{connections}"),
        }
    }
}

/// When a measurement stops.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Windows {
    /// Warm-up per target, not counted.
    pub warmup: Duration,
    /// One window's length.
    pub window: Duration,
    /// Windows that must agree before the measurement has settled.
    pub min_windows: usize,
    /// The most windows per target.
    pub max_windows: usize,
    /// The largest relative spread of the last `min_windows` windows'
    /// medians and throughputs that counts as settled.
    pub stable: f64,
    /// The most requests over the whole measurement, per target.
    pub max_requests: Option<u64>,
    /// How long one request may take before it counts as failed.
    pub timeout: Duration,
}

/// Everything one measurement needs.
#[derive(Clone)]
pub struct Plan {
    /// The protocol the request speaks.
    pub protocol: Protocol,
    /// The request every connection sends.
    pub request: Request,
    /// The offered load.
    pub load: Load,
    /// When to stop.
    pub windows: Windows,
    /// Send request bodies at this rate (HTTP only).
    pub pace: Option<Pace>,
}

/// One window's headline figures.
#[derive(Debug, Clone, Serialize)]
pub struct WindowFigures {
    /// Answered requests per second.
    pub throughput: f64,
    /// Median latency, ms.
    pub p50: f64,
    /// 99th percentile latency, ms.
    pub p99: f64,
    /// Failed requests.
    pub failed: u64,
}

/// The result of measuring one target.
#[derive(Clone, Serialize)]
pub struct Measurement {
    /// The target.
    pub target: String,
    /// The protocol.
    pub protocol: Protocol,
    /// `tcp` or `uds`.
    pub transport: &'static str,
    /// The offered load.
    pub load: Load,
    /// All measured windows together.
    pub summary: Summary,
    /// Each window's figures, in order.
    pub windows: Vec<WindowFigures>,
    /// After how many windows the measurement settled, if it did.
    pub settled_after: Option<usize>,
    /// The relative spread of the last windows' medians.
    pub p50_spread: f64,
    /// The relative spread of the last windows' throughputs.
    pub throughput_spread: f64,
    /// The histograms, for plots and merging.
    #[serde(skip)]
    pub recorder: Recorder,
}

/// A connection of either protocol family; it reconnects after a failure.
enum Client {
    Http {
        transport: Transport,
        connection: Option<http1::Connection>,
    },
    Grpc(GrpcInferenceServiceClient<Channel>),
}

/// What a failed request counts as.
struct Failure(String);

/// A finished request.
struct Done {
    sample: Sample,
    sent: Instant,
}

impl Client {
    async fn open(target: &Target) -> anyhow::Result<Client> {
        let describe = || format!("cannot connect to {target}");
        Ok(match target.scheme {
            Scheme::Http => Client::Http {
                transport: target.transport.clone(),
                connection: Some(
                    http1::Connection::open(&target.transport)
                        .await
                        .with_context(describe)?,
                ),
            },
            Scheme::Grpc => Client::Grpc(
                GrpcInferenceServiceClient::new(
                    grpc_channel(&target.transport)
                        .await
                        .with_context(describe)?,
                )
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            ),
        })
    }

    async fn call(
        &mut self,
        request: &Request,
        pace: Option<(Pace, &PreciseTimer)>,
    ) -> Result<Done, Failure> {
        match (self, request) {
            (
                Client::Http {
                    transport,
                    connection,
                },
                Request::Http(request),
            ) => {
                let start = Instant::now();
                let conn = match connection {
                    Some(c) => c,
                    None => connection.insert(
                        http1::Connection::open(transport)
                            .await
                            .map_err(|e| Failure(format!("connect: {}", e.kind())))?,
                    ),
                };
                let answer = match conn.exchange(request, pace).await {
                    Ok(a) => a,
                    Err(e) => {
                        *connection = None;
                        return Err(Failure(format!("io: {}", e.kind())));
                    }
                };
                if answer.close {
                    *connection = None;
                }
                if !(200..300).contains(&answer.status) {
                    return Err(Failure(format!(
                        "status {}: {}",
                        answer.status,
                        first_line(&answer.body_start)
                    )));
                }
                Ok(Done {
                    sample: Sample {
                        latency: Duration::ZERO,
                        service: Duration::ZERO,
                        phases: Some(answer.phases),
                        server: answer.server,
                        bytes_out: request.len() as u64,
                        bytes_in: answer.bytes_in,
                    },
                    sent: start,
                })
            }
            (Client::Grpc(client), Request::Grpc(message)) => {
                let start = Instant::now();
                let response = client
                    .model_infer(tonic::Request::new(message.as_ref().clone()))
                    .await
                    .map_err(|status| {
                        Failure(format!(
                            "grpc {:?}: {}",
                            status.code(),
                            first_line(status.message())
                        ))
                    })?;
                let server = response
                    .metadata()
                    .get("server-timing")
                    .and_then(|v| v.to_str().ok())
                    .and_then(http1::parse_server_timing);
                let bytes_in = response
                    .get_ref()
                    .raw_output_contents
                    .iter()
                    .map(|b| b.len() as u64)
                    .sum();
                Ok(Done {
                    sample: Sample {
                        latency: Duration::ZERO,
                        service: Duration::ZERO,
                        phases: None,
                        server,
                        bytes_out: message
                            .raw_input_contents
                            .iter()
                            .map(|b| b.len() as u64)
                            .sum(),
                        bytes_in,
                    },
                    sent: start,
                })
            }
            _ => Err(Failure(
                "the request does not match the target's protocol".into(),
            )),
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(160).collect()
}

/// A gRPC channel over TCP or a Unix socket, with windows large enough for
/// big tensors.
pub(crate) async fn grpc_channel(transport: &Transport) -> anyhow::Result<Channel> {
    let endpoint = |uri: String| -> anyhow::Result<Endpoint> {
        Ok(Endpoint::from_shared(uri)?
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(16 << 20)
            .tcp_nodelay(true))
    };
    Ok(match transport {
        Transport::Tcp(address) => endpoint(format!("http://{address}"))?.connect().await?,
        Transport::Unix(path) => {
            let path = path.clone();
            endpoint("http://localhost".into())?
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
                .await?
        }
    })
}

/// Requests the measurement may still send: shared by all connections.
struct Budget(AtomicI64);

impl Budget {
    fn take(&self) -> bool {
        self.0.fetch_sub(1, Ordering::AcqRel) > 0
    }
}

/// Shards of the recorder that connections share: few enough that the
/// histograms stay small, enough that the locks are rarely contended.
const SHARDS: usize = 8;

/// Runs `plan` against `target` for `length`: one window.
async fn window(
    plan: &Plan,
    target: &Target,
    length: Duration,
    budget: &Arc<Budget>,
    timer: &Arc<PreciseTimer>,
) -> anyhow::Result<(Recorder, Duration)> {
    let connections = plan.load.connections().max(1);
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(Client::open(target).await?);
    }
    let shards: Arc<Vec<Mutex<Recorder>>> = Arc::new(
        (0..SHARDS)
            .map(|_| Mutex::new(Recorder::default()))
            .collect(),
    );
    let start = Instant::now() + Duration::from_millis(2);
    let end = start + length;
    let mut tasks = Vec::with_capacity(connections);
    for (index, mut client) in clients.into_iter().enumerate() {
        let shards = Arc::clone(&shards);
        let budget = Arc::clone(budget);
        let timer = Arc::clone(timer);
        let request = plan.request.clone();
        let load = plan.load;
        let pace = plan.pace;
        let timeout = plan.windows.timeout;
        tasks.push(tokio::spawn(async move {
            let mut schedule = match load {
                Load::Open {
                    rate,
                    arrival,
                    connections,
                } => Some(Schedule::new(arrival, rate, connections, index, 0x5eed)),
                Load::Closed { .. } => None,
            };
            let shard = &shards[index % SHARDS];
            loop {
                let intended = match &mut schedule {
                    Some(schedule) => start + schedule.next().expect("schedules are endless"),
                    None => Instant::now().max(start),
                };
                if intended >= end {
                    break;
                }
                timer.sleep_until(intended).await;
                if !budget.take() {
                    break;
                }
                let call = client.call(&request, pace.map(|p| (p, timer.as_ref())));
                let result = match tokio::time::timeout(timeout, call).await {
                    Ok(result) => result,
                    Err(_) => {
                        if let Client::Http { connection, .. } = &mut client {
                            *connection = None;
                        }
                        Err(Failure("timeout".into()))
                    }
                };
                let done = Instant::now();
                let mut recorder = shard.lock().expect("a recorder lock");
                match result {
                    Ok(Done { mut sample, sent }) => {
                        sample.service = done - sent;
                        // A closed loop sends when it intends to.
                        sample.latency = if schedule.is_some() {
                            done - intended
                        } else {
                            sample.service
                        };
                        recorder.record(&sample);
                    }
                    Err(Failure(kind)) => recorder.error(kind),
                }
            }
        }));
    }
    for task in tasks {
        task.await.context("a connection task failed")?;
    }
    // The window's real length: past `length` by the last answers, or
    // short of it when the request budget ran out.
    let elapsed = Instant::now().saturating_duration_since(start);
    let mut total = Recorder::default();
    for shard in shards.iter() {
        total.merge(&shard.lock().expect("a recorder lock"));
    }
    Ok((total, elapsed))
}

/// Measures `plan` on every target, windows interleaved (see the module
/// documentation). `progress` advances one step per window.
pub async fn measure(
    plan: &Plan,
    targets: &[Target],
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Measurement>> {
    let timer = PreciseTimer::start();
    let n = targets.len();
    let budgets: Vec<Arc<Budget>> = (0..n)
        .map(|_| {
            let limit = plan
                .windows
                .max_requests
                .map_or(i64::MAX, |r| i64::try_from(r).unwrap_or(i64::MAX));
            Arc::new(Budget(AtomicI64::new(limit)))
        })
        .collect();
    if !plan.windows.warmup.is_zero() {
        let unlimited = Arc::new(Budget(AtomicI64::new(i64::MAX)));
        for target in targets {
            progress.set_message(format!("{target}: warming up"));
            window(plan, target, plan.windows.warmup, &unlimited, &timer).await?;
        }
    }
    let mut totals: Vec<Recorder> = vec![Recorder::default(); n];
    let mut elapsed = vec![Duration::ZERO; n];
    let mut windows: Vec<Vec<WindowFigures>> = vec![Vec::new(); n];
    let mut settled = None;
    let keep = plan.windows.min_windows.max(1);
    for round in 0..plan.windows.max_windows.max(1) {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for t in order {
            progress.set_message(format!("{}: window {}", targets[t], round + 1));
            let (recorder, took) =
                window(plan, &targets[t], plan.windows.window, &budgets[t], &timer).await?;
            let s = recorder.summary(took);
            windows[t].push(WindowFigures {
                throughput: s.throughput,
                p50: s.latency.p50,
                p99: s.latency.p99,
                failed: s.failed,
            });
            totals[t].merge(&recorder);
            elapsed[t] += took;
            progress.inc(1);
        }
        if budgets.iter().all(|b| b.0.load(Ordering::Acquire) <= 0) {
            break;
        }
        if round + 1 >= keep
            && windows
                .iter()
                .all(|w| is_stable(&w[w.len() - keep..], plan.windows.stable))
        {
            settled = Some(round + 1);
            break;
        }
    }
    Ok((0..n)
        .map(|t| {
            let last = &windows[t][windows[t].len().saturating_sub(keep)..];
            let p50s: Vec<f64> = last.iter().map(|w| w.p50).collect();
            let rates: Vec<f64> = last.iter().map(|w| w.throughput).collect();
            Measurement {
                target: targets[t].label.clone(),
                protocol: plan.protocol,
                transport: targets[t].transport_name(),
                load: plan.load,
                summary: totals[t].summary(elapsed[t]),
                windows: windows[t].clone(),
                settled_after: settled,
                p50_spread: spread(&p50s),
                throughput_spread: spread(&rates),
                recorder: totals[t].clone(),
            }
        })
        .collect())
}

fn is_stable(windows: &[WindowFigures], stable: f64) -> bool {
    let p50s: Vec<f64> = windows.iter().map(|w| w.p50).collect();
    let rates: Vec<f64> = windows.iter().map(|w| w.throughput).collect();
    spread(&p50s) <= stable && spread(&rates) <= stable
}

/// One point of a sweep.
#[derive(Clone, Serialize)]
pub struct SweepPoint {
    /// The offered rate (open loop) or connections (closed loop).
    pub offered: f64,
    /// The measurements of this point, one per target.
    pub measurements: Vec<Measurement>,
    /// Why this point saturated the first target, if it did.
    pub saturated: Option<String>,
}

/// Runs `plan` at each offered level in turn (a rate, or a number of
/// connections) until the first target saturates: it achieves less than
/// 90 % of the offered rate (open loop), gains less than 5 % throughput over
/// the previous level (closed loop), or its p99 passes `p99_bound` ms.
pub async fn sweep(
    plan: &Plan,
    levels: &[f64],
    p99_bound: Option<f64>,
    targets: &[Target],
    progress: &ProgressBar,
) -> anyhow::Result<Vec<SweepPoint>> {
    let mut points: Vec<SweepPoint> = Vec::new();
    for &level in levels {
        let mut at = plan.clone();
        at.load = match plan.load {
            Load::Open {
                arrival,
                connections,
                ..
            } => Load::Open {
                rate: level,
                arrival,
                connections,
            },
            Load::Closed { .. } => Load::Closed {
                connections: level.max(1.0) as usize,
            },
        };
        let measurements = measure(&at, targets, progress).await?;
        let first = &measurements[0].summary;
        let mut saturated = None;
        if let Load::Open { rate, .. } = at.load {
            if first.throughput < 0.9 * rate {
                saturated = Some(format!("achieved {:.0}/s of {rate}/s", first.throughput));
            }
        } else if let Some(previous) = points.last() {
            let before = previous.measurements[0].summary.throughput;
            if first.throughput < 1.05 * before {
                saturated = Some(format!(
                    "{:.0}/s is within 5 % of {before:.0}/s at the previous level",
                    first.throughput
                ));
            }
        }
        if let Some(bound) = p99_bound {
            if first.latency.p99 > bound {
                saturated = Some(format!(
                    "p99 {:.3} ms is over the {bound} ms bound",
                    first.latency.p99
                ));
            }
        }
        let stop = saturated.is_some();
        points.push(SweepPoint {
            offered: level,
            measurements,
            saturated,
        });
        if stop {
            break;
        }
    }
    Ok(points)
}
