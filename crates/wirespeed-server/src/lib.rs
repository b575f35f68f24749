//! The wirespeed server as a library: load a model repository, then serve it
//! over the Open Inference Protocol's REST and gRPC APIs, on TCP and Unix
//! sockets.
//!
//! The `wirespeed` binary only parses flags and calls into this crate, so
//! tests and other programs can embed the same server.
//!
//! ```no_run
//! # async fn example() -> Result<(), wirespeed_server::StartError> {
//! use wirespeed_server::{Server, ServerConfig};
//!
//! let config = ServerConfig {
//!     http_addr: Some("127.0.0.1:0".parse().unwrap()),
//!     grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
//!     ..ServerConfig::default()
//! };
//! let server = Server::bind(&config).await?;
//! println!("REST on {:?}, gRPC on {:?}", server.http_addr(), server.grpc_addr());
//! server.serve(async { tokio::signal::ctrl_c().await.ok(); }).await;
//! # Ok(())
//! # }
//! ```

mod config;
mod net;
mod protocols;
mod serve;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};

pub use config::{Limits, ServerConfig, StartError, TlsFiles, UpstreamServer};
pub use serve::metrics::{Buckets, MetricsConfig, DEFAULT_BUCKETS};
pub use serve::model_control::ModelControl;
pub use serve::traces::TracesConfig;
pub use wirespeed_core::RequestLimits;
pub use wirespeed_models::{Backend, ModelSource, Registry, RepositoryError};
#[cfg(feature = "proxy")]
pub use wirespeed_proxy::PrintOptions;
#[cfg(feature = "proxy")]
pub use wirespeed_proxy::TranscodeConfig;

use net::{listen, tls, uds};
use protocols::grpc;
use protocols::metrics::MetricsService;
use protocols::rest::RestService;
use state::State;

/// A server with its models loaded and its sockets bound, not yet serving.
pub struct Server {
    http_tcp: Option<TcpListener>,
    http_uds: Option<(UnixListener, PathBuf)>,
    grpc_tcp: Option<TcpListener>,
    tf_http_tcp: Option<TcpListener>,
    tf_grpc_tcp: Option<TcpListener>,
    grpc_uds: Option<(UnixListener, PathBuf)>,
    metrics_tcp: Option<TcpListener>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: State,
    limits: Limits,
    drain_timeout: Duration,
    io_threads: usize,
}

async fn bind_tcp(flag: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind {
            flag,
            addr: addr.to_string(),
            error,
        })
}

fn bind_unix(flag: &'static str, path: &Path) -> Result<(UnixListener, PathBuf), StartError> {
    uds::bind(path)
        .map(|listener| (listener, path.to_owned()))
        .map_err(|error| StartError::Bind {
            flag,
            addr: path.display().to_string(),
            error,
        })
}

impl Server {
    /// Loads every model, then binds every configured listener.
    pub async fn bind(config: &ServerConfig) -> Result<Server, StartError> {
        if config.http_addr.is_none()
            && config.http_uds.is_none()
            && config.grpc_addr.is_none()
            && config.grpc_uds.is_none()
            && config.tf_http_addr.is_none()
            && config.tf_grpc_addr.is_none()
        {
            return Err(StartError::NoListener);
        }
        let tls = config
            .tls
            .as_ref()
            .map(|files| tls::acceptor(&files.cert, &files.key))
            .transpose()
            .map_err(StartError::Tls)?;
        let mut state = State::start(config).await?;
        let http_tcp = match config.http_addr {
            Some(addr) => Some(bind_tcp("--http", addr).await?),
            None => None,
        };
        let grpc_tcp = match config.grpc_addr {
            Some(addr) => Some(bind_tcp("--grpc", addr).await?),
            None => None,
        };
        let tf_http_tcp = match config.tf_http_addr {
            Some(addr) => Some(bind_tcp("--tf-http", addr).await?),
            None => None,
        };
        let tf_grpc_tcp = match config.tf_grpc_addr {
            Some(addr) => Some(bind_tcp("--tf-grpc", addr).await?),
            None => None,
        };
        let http_uds = config
            .http_uds
            .as_deref()
            .map(|p| bind_unix("--http-uds", p))
            .transpose()?;
        let grpc_uds = config
            .grpc_uds
            .as_deref()
            .map(|p| bind_unix("--grpc-uds", p))
            .transpose()?;
        let metrics_tcp = match config.metrics.as_ref().and_then(|m| m.addr) {
            Some(addr) => Some(bind_tcp("--metrics", addr).await?),
            None => None,
        };
        state.begin()?;
        Ok(Server {
            http_tcp,
            http_uds,
            grpc_tcp,
            tf_http_tcp,
            tf_grpc_tcp,
            grpc_uds,
            metrics_tcp,
            tls,
            state,
            limits: config.limits.clone(),
            drain_timeout: config.drain_timeout,
            io_threads: config.io_threads,
        })
    }

    /// The REST API's TCP address (the real port when bound to port 0).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The gRPC API's TCP address (the real port when bound to port 0).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The gRPC API's address on TF Serving's port (`--tf-grpc`), if any.
    pub fn tf_grpc_addr(&self) -> Option<SocketAddr> {
        self.tf_grpc_tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The REST API's address on TF Serving's port (`--tf-http`), if any.
    pub fn tf_http_addr(&self) -> Option<SocketAddr> {
        self.tf_http_tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The metrics listener's TCP address (`--metrics`), if it has one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The "listening on" lines, the metrics listener first (a line for
    /// the APIs then tells that everything listens already), and the Unix
    /// socket files to remove at the end.
    fn listening(&self, scheme: &str) -> (Vec<String>, Vec<PathBuf>) {
        let mut listening: Vec<String> = self
            .metrics_addr()
            .map(|a| format!("metrics http{scheme}://{a}/metrics"))
            .into_iter()
            .collect();
        listening.extend(self.http_addr().map(|a| format!("http{scheme}://{a}")));
        listening.extend(self.grpc_addr().map(|a| format!("grpc{scheme}://{a}")));
        // Named, so that a reader of the log (or a test) tells them apart.
        let tf_http = self.tf_http_addr();
        listening.extend(tf_http.map(|a| format!("TF Serving's REST port http{scheme}://{a}")));
        let tf_grpc = self.tf_grpc_addr();
        listening.extend(tf_grpc.map(|a| format!("TF Serving's gRPC port grpc{scheme}://{a}")));
        let mut sockets = Vec::new();
        for (_, path) in self.http_uds.iter() {
            listening.push(format!("http{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
        for (_, path) in self.grpc_uds.iter() {
            listening.push(format!("grpc{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
        (listening, sockets)
    }

    /// Serves every listener until `shutdown` resolves. Then readiness turns
    /// false (and gRPC health NOT_SERVING), the listeners close, open
    /// connections finish their requests within the drain timeout, and Unix
    /// socket files are removed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let scheme = if self.tls.is_some() { "s" } else { "" };
        let (listening, sockets) = self.listening(scheme);
        let state = self.state;
        let limits = self.limits;
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let shared = Arc::new(listen::Shared {
            connections: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
            stopping,
            tls: self.tls,
            keep_alive: limits.keep_alive_timeout,
            header_timeout: limits.header_timeout,
            counts: state.connections.clone(),
        });
        let heads = listen::HeadLimits {
            header_timeout: limits.header_timeout,
            max_headers: limits.max_headers,
            max_header_bytes: limits.max_header_bytes,
        };
        let rest = Arc::new(listen::builder(listen::Protocol::Rest, &heads));
        let grpc = Arc::new(listen::builder(listen::Protocol::Grpc, &heads));
        let (grpc_service, health) = grpc::service(Arc::clone(&state.front)).await;
        let rest_service = RestService::new(Arc::clone(&state.front));
        let metrics_service = MetricsService::new(Arc::clone(&state.front));
        let listeners = match listen::Sockets::new(
            self.http_tcp.into_iter().chain(self.tf_http_tcp).collect(),
            self.http_uds.map(|(l, _)| l),
            self.grpc_tcp.into_iter().chain(self.tf_grpc_tcp).collect(),
            self.grpc_uds.map(|(l, _)| l),
            self.metrics_tcp,
        ) {
            Ok(listeners) => listeners,
            Err(e) => {
                tracing::error!(error = %e, "cannot hand the listeners to the I/O threads");
                return;
            }
        };
        // Each I/O thread accepts on every listener and serves its own
        // connections on a runtime of its own (`listen.rs` says why).
        let (ended, mut accept_loops) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (drained, drain_over) = tokio::sync::watch::channel(false);
        let threads = listen::start_io_threads(self.io_threads.max(1), &listeners, |sockets| {
            listen::IoThread {
                sockets,
                rest: Arc::clone(&rest),
                grpc: Arc::clone(&grpc),
                rest_service: rest_service.clone(),
                grpc_service: grpc_service.clone(),
                metrics_service: metrics_service.clone(),
                shared: Arc::clone(&shared),
                place: listen::Place::default(),
                ended: ended.clone(),
                drain_over: drain_over.clone(),
            }
        });
        drop((listeners, ended));
        if threads.is_empty() {
            tracing::error!("no I/O thread started; nothing is served");
            return;
        }
        // Said once every thread serving them exists.
        for address in listening {
            tracing::info!("listening on {address}");
        }
        let drain = self.drain_timeout;
        shutdown.await;
        state.serving.readiness.stop_serving();
        grpc::not_serving(&health).await;
        tracing::info!(
            "shutting down: draining open requests for up to {:?}",
            drain
        );
        let _ = stop.send(true);
        drain_connections(&shared, &limits, drain, &mut accept_loops, threads.len()).await;
        let _ = drained.send(true);
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
        for path in sockets {
            let _ = std::fs::remove_file(path);
        }
        // The last requests' spans: the exporter sends on this runtime, so
        // the wait for it is on a blocking thread.
        if state.serving.traces.is_some() {
            let serving = Arc::clone(&state.serving);
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(traces) = &serving.traces {
                    traces.flush();
                }
            })
            .await;
        }
    }
}

/// Waits for every I/O thread's accept loops to end, then for the open
/// connections to close (each holds a permit; all back means all closed),
/// for up to `drain`.
async fn drain_connections(
    shared: &listen::Shared,
    limits: &Limits,
    drain: Duration,
    accept_loops: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
    threads: usize,
) {
    for _ in 0..threads {
        if accept_loops.recv().await.is_none() {
            break;
        }
    }
    tracing::info!(
        "stopped accepting; waiting for {} open connections",
        limits.max_connections - shared.connections.available_permits()
    );
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(drain, shared.connections.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("drain deadline passed; closing remaining connections");
    }
}
