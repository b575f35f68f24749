//! The wirespeed server as a library: load a model repository, then serve it
//! over the Open Inference Protocol's REST API.
//!
//! The `wirespeed` binary only parses flags and calls into this crate, so
//! tests and other programs can embed the same server.
//!
//! ```no_run
//! # async fn example() -> Result<(), wirespeed_server::StartError> {
//! use wirespeed_server::{Server, ServerConfig};
//!
//! let config = ServerConfig { http_addr: "127.0.0.1:0".parse().unwrap(), ..ServerConfig::default() };
//! let server = Server::bind(&config).await?;
//! println!("listening on {}", server.local_addr());
//! server.serve(async { tokio::signal::ctrl_c().await.ok(); }).await;
//! # Ok(())
//! # }
//! ```

mod http;
mod identity_model;
pub mod model_config;
mod repository;
mod tree_model;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use identity_model::IdentityModel;
pub use repository::{ModelRepository, RepositoryError};
pub use tree_model::TreeModel;

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model repository folder.
    pub models_dir: PathBuf,
    /// Where the REST API listens.
    pub http_addr: SocketAddr,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for open requests to finish.
    pub drain_timeout: Duration,
    /// Limits of the JSON request decoder.
    pub decode_options: wirespeed_json::DecodeOptions,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            models_dir: PathBuf::from("models"),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8000)),
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
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {error}{hint}", hint = bind_hint(error))]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
}

impl From<RepositoryError> for StartError {
    fn from(e: RepositoryError) -> StartError {
        StartError::Repository(e)
    }
}

fn bind_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        "; another process holds the port: stop it or pass --http with another address"
    } else {
        ""
    }
}

/// What every request handler shares.
pub(crate) struct AppState {
    pub(crate) repository: ModelRepository,
    pub(crate) ready: AtomicBool,
    pub(crate) max_body_bytes: usize,
    pub(crate) decode_options: wirespeed_json::DecodeOptions,
}

/// A server with its models loaded and its socket bound, not yet serving.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
    drain_timeout: Duration,
}

impl Server {
    /// Loads every model, then binds the HTTP address.
    pub async fn bind(config: &ServerConfig) -> Result<Server, StartError> {
        let repository = ModelRepository::load(&config.models_dir)?;
        let listener =
            TcpListener::bind(config.http_addr)
                .await
                .map_err(|error| StartError::Bind {
                    addr: config.http_addr,
                    error,
                })?;
        Ok(Server {
            listener,
            state: Arc::new(AppState {
                repository,
                ready: AtomicBool::new(true),
                max_body_bytes: config.max_body_bytes,
                decode_options: config.decode_options.clone(),
            }),
            drain_timeout: config.drain_timeout,
        })
    }

    /// The address the server listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound TCP listener has an address")
    }

    /// Serves until `shutdown` resolves, then drains open connections.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        tracing::info!("listening on http://{}", self.local_addr());
        http::serve(self.listener, self.state, self.drain_timeout, shutdown).await;
    }
}
