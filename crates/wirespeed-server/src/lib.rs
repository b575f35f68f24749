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

mod compute;
mod grpc;
mod http;
mod identity_model;
pub mod model_config;
mod repository;
mod tree_model;
mod uds;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};

/// The Open Inference Protocol's gRPC messages and a tonic client for them,
/// generated from `proto/grpc_service.proto`.
pub use grpc::pb as proto;
pub use identity_model::IdentityModel;
pub use repository::{ModelRepository, RepositoryError};
pub use tree_model::TreeModel;

/// The protocol extensions this server implements, as server metadata
/// lists them on REST and gRPC.
pub(crate) const EXTENSIONS: &[&str] = &["binary_tensor_data"];

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model repository folder.
    pub models_dir: PathBuf,
    /// Where the REST API listens on TCP, if it does.
    pub http_addr: Option<SocketAddr>,
    /// Where the REST API listens on a Unix socket, if it does.
    pub http_uds: Option<PathBuf>,
    /// Where the gRPC API listens on TCP, if it does.
    pub grpc_addr: Option<SocketAddr>,
    /// Where the gRPC API listens on a Unix socket, if it does.
    pub grpc_uds: Option<PathBuf>,
    /// The largest request body (REST) or message (gRPC) accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for open requests to finish.
    pub drain_timeout: Duration,
    /// Limits of the request decoders.
    pub decode_options: wirespeed_json::DecodeOptions,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            models_dir: PathBuf::from("models"),
            http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8000))),
            http_uds: None,
            grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8001))),
            grpc_uds: None,
            max_body_bytes: 64 * 1024 * 1024,
            drain_timeout: Duration::from_secs(10),
            decode_options: wirespeed_json::DecodeOptions {
                threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
                ..wirespeed_json::DecodeOptions::default()
            },
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A model could not be loaded.
    #[error("cannot load the model repository: {0}")]
    Repository(RepositoryError),
    /// A listening address or socket could not be bound.
    #[error("cannot listen on {addr} ({flag}): {error}{hint}", hint = bind_hint(error, flag))]
    Bind {
        /// The flag that names it, e.g. `--grpc`.
        flag: &'static str,
        /// The address or socket path.
        addr: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// Every listener is turned off.
    #[error("nothing to listen on: give at least one of --http, --grpc, --http-uds, --grpc-uds")]
    NoListener,
}

impl From<RepositoryError> for StartError {
    fn from(e: RepositoryError) -> StartError {
        StartError::Repository(e)
    }
}

fn bind_hint(e: &std::io::Error, flag: &str) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!("; another process holds it: stop it or pass {flag} with another address")
    } else {
        String::new()
    }
}

/// What every request handler shares.
pub(crate) struct AppState {
    pub(crate) repository: ModelRepository,
    pub(crate) ready: AtomicBool,
    pub(crate) max_body_bytes: usize,
    pub(crate) decode_options: wirespeed_json::DecodeOptions,
    /// Clipper's query ids, counted from server start.
    pub(crate) clipper_queries: std::sync::atomic::AtomicU64,
}

/// A server with its models loaded and its sockets bound, not yet serving.
pub struct Server {
    http_tcp: Option<TcpListener>,
    http_uds: Option<(UnixListener, PathBuf)>,
    grpc_tcp: Option<TcpListener>,
    grpc_uds: Option<(UnixListener, PathBuf)>,
    state: Arc<AppState>,
    drain_timeout: Duration,
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
        {
            return Err(StartError::NoListener);
        }
        let repository = ModelRepository::load(&config.models_dir)?;
        let http_tcp = match config.http_addr {
            Some(addr) => Some(bind_tcp("--http", addr).await?),
            None => None,
        };
        let grpc_tcp = match config.grpc_addr {
            Some(addr) => Some(bind_tcp("--grpc", addr).await?),
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
        Ok(Server {
            http_tcp,
            http_uds,
            grpc_tcp,
            grpc_uds,
            state: Arc::new(AppState {
                repository,
                ready: AtomicBool::new(true),
                max_body_bytes: config.max_body_bytes,
                decode_options: config.decode_options.clone(),
                clipper_queries: std::sync::atomic::AtomicU64::new(0),
            }),
            drain_timeout: config.drain_timeout,
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

    /// Serves every listener until `shutdown` resolves. Then readiness turns
    /// false, the listeners close, and open requests get up to the drain
    /// timeout to finish. Unix socket files are removed at the end.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let signal = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|&s| s).await;
        };
        if let Some(addr) = self.http_addr() {
            tracing::info!("listening on http://{addr}");
        }
        if let Some(addr) = self.grpc_addr() {
            tracing::info!("listening on grpc://{addr}");
        }
        let drain = self.drain_timeout;
        let state = self.state;
        let mut sockets = Vec::new();
        let http_tcp = self
            .http_tcp
            .map(|l| http::serve(l, Arc::clone(&state), drain, signal(stopped.clone())));
        let http_uds = self.http_uds.map(|(l, path)| {
            tracing::info!("listening on http+unix://{}", path.display());
            sockets.push(path);
            http::serve(l, Arc::clone(&state), drain, signal(stopped.clone()))
        });
        let grpc_tcp = self.grpc_tcp.map(|l| {
            let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
            grpc::serve(
                incoming,
                Arc::clone(&state),
                state.max_body_bytes,
                drain,
                signal(stopped.clone()),
            )
        });
        let grpc_uds = self.grpc_uds.map(|(l, path)| {
            tracing::info!("listening on grpc+unix://{}", path.display());
            sockets.push(path);
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(l);
            grpc::serve(
                incoming,
                Arc::clone(&state),
                state.max_body_bytes,
                drain,
                signal(stopped.clone()),
            )
        });
        let on_signal = async {
            shutdown.await;
            state.ready.store(false, Ordering::Release);
            tracing::info!(
                "shutting down: draining open requests for up to {:?}",
                drain
            );
            let _ = stop.send(true);
        };
        tokio::join!(
            on_signal,
            maybe(http_tcp),
            maybe(http_uds),
            maybe(grpc_tcp),
            maybe(grpc_uds),
        );
        for path in sockets {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn maybe(future: Option<impl Future<Output = ()>>) {
    if let Some(future) = future {
        future.await;
    }
}
