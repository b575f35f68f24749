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
mod listeners;
mod net;
mod protocols;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use config::{Limits, ServerConfig, StartError, TlsFiles, UpstreamServer};
pub use net::threads::IoThreads;
pub use protocols::v2::parameters::HeaderForward;
pub use wirespeed_core::RequestLimits;
pub use wirespeed_engine::metrics::{Buckets, MetricsConfig, DEFAULT_BUCKETS};
pub use wirespeed_engine::model_control::ModelControl;
pub use wirespeed_engine::traces::TracesConfig;
pub use wirespeed_models::{Backend, ModelSource, Registry, RepositoryError};
#[cfg(feature = "proxy")]
pub use wirespeed_proxy::PrintOptions;
#[cfg(feature = "proxy")]
pub use wirespeed_proxy::TranscodeConfig;

use listeners::Listeners;
use net::{listen, threads, tls};
use protocols::grpc;
use protocols::metrics::MetricsService;
use protocols::rest::RestService;
use state::State;

/// A server with its models loaded and its sockets bound, not yet serving.
pub struct Server {
    listeners: Listeners,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: State,
    limits: Limits,
    drain_timeout: Duration,
    io_threads: usize,
    reserved: IoThreads,
}

impl Server {
    /// Loads every model, then binds every configured listener.
    pub async fn bind(config: &ServerConfig) -> Result<Server, StartError> {
        if !Listeners::any(config) {
            return Err(StartError::NoListener);
        }
        let tls = config
            .tls
            .as_ref()
            .map(|files| tls::acceptor(&files.cert, &files.key))
            .transpose()
            .map_err(StartError::Tls)?;
        let mut state = State::start(config).await?;
        let listeners = Listeners::bind(config).await?;
        state.begin()?;
        Ok(Server {
            listeners,
            tls,
            state,
            limits: config.limits.clone(),
            drain_timeout: config.drain_timeout,
            io_threads: config.io_threads,
            reserved: IoThreads::none(),
        })
    }

    /// Serves on `threads`, reserved as the process's first threads
    /// ([`IoThreads::reserve`]), rather than on threads started when it
    /// serves.
    pub fn with_io_threads(mut self, threads: IoThreads) -> Server {
        self.reserved = threads;
        self
    }

    /// The REST API's TCP address (the real port when bound to port 0).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        Listeners::addr(&self.listeners.http_tcp)
    }

    /// The gRPC API's TCP address (the real port when bound to port 0).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        Listeners::addr(&self.listeners.grpc_tcp)
    }

    /// The gRPC API's address on TF Serving's port (`--tf-grpc`), if any.
    pub fn tf_grpc_addr(&self) -> Option<SocketAddr> {
        Listeners::addr(&self.listeners.tf_grpc_tcp)
    }

    /// The REST API's address on TF Serving's port (`--tf-http`), if any.
    pub fn tf_http_addr(&self) -> Option<SocketAddr> {
        Listeners::addr(&self.listeners.tf_http_tcp)
    }

    /// The metrics listener's TCP address (`--metrics`), if it has one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        Listeners::addr(&self.listeners.metrics_tcp)
    }

    /// Serves every listener until `shutdown` resolves. Then readiness turns
    /// false (and gRPC health NOT_SERVING), the listeners close, open
    /// connections finish their requests within the drain timeout, and Unix
    /// socket files are removed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let scheme = if self.tls.is_some() { "s" } else { "" };
        let (listening, sockets) = self.listeners.listening(scheme);
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
        let listeners = match self.listeners.into_sockets() {
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
        let threads = threads::start_io_threads(
            self.io_threads.max(1),
            self.reserved,
            &listeners,
            |sockets| listen::IoThread {
                sockets,
                rest: Arc::clone(&rest),
                grpc: Arc::clone(&grpc),
                http1: net::http1::Limits {
                    max_headers: limits.max_headers,
                    max_header_bytes: limits.max_header_bytes,
                },
                rest_service: rest_service.clone(),
                grpc_service: grpc_service.clone(),
                metrics_service: metrics_service.clone(),
                shared: Arc::clone(&shared),
                place: listen::Place::default(),
                ended: ended.clone(),
                drain_over: drain_over.clone(),
            },
        );
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
        state.engine.readiness.stop_serving();
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
        if state.engine.traces.is_some() {
            let engine = Arc::clone(&state.engine);
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(traces) = &engine.traces {
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
