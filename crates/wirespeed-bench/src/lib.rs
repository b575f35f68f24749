//! `wirespeed bench`: a load generator for model servers that gets latency
//! right, and the scenarios that re-measure the published figures of JSON
//! serving side by side with a peer.
//!
//! ```
//! use std::time::Duration;
//! use wirespeed_bench::timer::{Arrival, Schedule};
//!
//! // 1,000 requests a second over 4 connections: each connection's requests
//! // are due every 4 ms, the connections staggered by 1 ms. A request's
//! // latency counts from when it was due, not from when it was sent.
//! let due: Vec<Duration> = Schedule::new(Arrival::Constant, 1000.0, 4, 1, 0).take(3).collect();
//! assert_eq!(due, [Duration::from_millis(1), Duration::from_millis(5), Duration::from_millis(9)]);
//! ```
//!
//! - **Latency is corrected for coordinated omission.** In the open loop
//!   (`--rate`), each request has an intended send time from a fixed
//!   schedule (constant or Poisson; [`timer`]), and its latency counts from
//!   then, as wrk2's does: a server that stalls for a second is charged for
//!   every request that should have been sent during the stall. The
//!   uncorrected figures (from the actual send) are reported beside them.
//! - **Every figure comes from HDR histograms** ([`stats`]), merged over
//!   connections, windows and rounds: p50 to p99.99 and max, mean, standard
//!   deviation, throughput, errors by kind; the client's send / wait /
//!   receive split on HTTP/1 ([`http1`]); the server's stages from its
//!   `Server-Timing` header.
//! - **Measurements are windows that must settle** ([`engine`]); with
//!   `--compare`, windows of the targets interleave, so ratios are fair on
//!   a noisy machine.
//! - **Scenarios** ([`scenario`]) print their tables next to the published
//!   ones.
//!
//! Targets must be this machine (loopback or a Unix socket) unless
//! `--allow-remote` is given, and every run is bounded in time and requests.

pub mod cli;
pub mod engine;
pub mod http1;
pub mod report;
pub mod scenario;
pub mod sink;
pub mod stats;
pub mod target;
pub mod timer;
pub mod workload;

pub use cli::{run, BenchArgs};
