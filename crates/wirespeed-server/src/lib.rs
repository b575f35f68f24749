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

mod auth;
mod authority;
mod classification;
mod fronting;
mod grpc;
mod hpack;
mod http;
mod listen;
mod metrics;
mod missing;
mod model_config;
mod models;
mod pipeline;
mod repository;
mod reserved;
mod scheduler;
mod shared_memory;
mod statistics;
mod tf_examples;
mod timing;
mod tls;
mod traces;
mod transcode;
mod uds;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};

pub use fronting::UpstreamServer;
pub use metrics::{Buckets, MetricsConfig, DEFAULT_BUCKETS};
pub use repository::ModelControl;
pub use traces::TracesConfig;
pub use transcode::TranscodeConfig;
pub use wirespeed_core::RequestLimits;
pub use wirespeed_models::{Backend, ModelSource, Registry, RepositoryError};
pub use wirespeed_transcode::PrintOptions;

use auth::Auth;
use models::ServedModels;
use wirespeed_core::CpuPool;

/// The protocol extensions this server implements, as server metadata
/// lists them on REST and gRPC.
pub(crate) const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "classification",
    "model_configuration",
    "model_repository",
    "statistics",
    "system_shared_memory",
];

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
    /// TF Serving's ports, where its clients are pointed: one more TCP
    /// address for the gRPC API (`--tf-grpc`, TF Serving's 8500) and for
    /// the REST API (`--tf-http`, its 8501). Each serves every protocol
    /// its API's listener does.
    pub tf_grpc_addr: Option<SocketAddr>,
    /// See `tf_grpc_addr`.
    pub tf_http_addr: Option<SocketAddr>,
    /// A REST/JSON face for a gRPC service's methods (`wirespeed proxy`):
    /// requests that name none of wirespeed's endpoints are transcoded.
    pub transcode: Vec<TranscodeConfig>,
    /// Sizes, counts and timeouts.
    pub limits: Limits,
    /// How long shutdown waits for open requests to finish.
    pub drain_timeout: Duration,
    /// What one request may make the server hold, on every protocol.
    pub request_limits: RequestLimits,
    /// Refuse `NaN` and `Infinity` in JSON requests.
    pub strict_json: bool,
    /// The threads of the one CPU pool: model compute, large decodes, and
    /// their helpers. The cores unless set.
    pub compute_threads: usize,
    /// The threads that accept and serve connections, each with a runtime
    /// of its own. The cores unless set.
    pub io_threads: usize,
    /// The backends models can be loaded with: the built-in ones unless
    /// a program embedding the server adds its own.
    pub backends: Registry,
    /// The bearer token every request but health checks must carry.
    pub auth_token: Option<String>,
    /// TLS for every listener, from PEM files.
    pub tls: Option<TlsFiles>,
    /// Another server whose every model this one serves too
    /// (`--upstream`).
    pub upstream: Option<UpstreamServer>,
    /// Prometheus metrics, unless off.
    pub metrics: Option<MetricsConfig>,
    /// How models are loaded and unloaded while serving
    /// (`--model-control-mode`).
    pub model_control: ModelControl,
    /// OpenTelemetry traces exported over OTLP (`--otlp-endpoint`); off
    /// when `None`.
    pub traces: Option<TracesConfig>,
}

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Sizes, counts and timeouts that keep one client from taking more than
/// its share. `docs/limits.md` gives the reason for each default.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest REST request body, in bytes.
    pub max_body_bytes: usize,
    /// The largest gRPC message, in bytes.
    pub max_grpc_message_bytes: usize,
    /// The most bytes of request headers (HTTP/1: the whole head).
    pub max_header_bytes: usize,
    /// The most request headers (HTTP/1).
    pub max_headers: usize,
    /// The most open connections over all listeners.
    pub max_connections: usize,
    /// Time to receive a request's headers (HTTP/1; also how long an idle
    /// keep-alive connection may wait before its next request starts).
    pub header_timeout: Duration,
    /// The longest pause between two pieces of a request body.
    pub body_timeout: Duration,
    /// Time to receive a whole request body.
    pub request_timeout: Duration,
    /// How long a connection with nothing in flight may stay silent.
    pub keep_alive_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 64 << 20,
            max_grpc_message_bytes: 64 << 20,
            max_header_bytes: 64 << 10,
            max_headers: 100,
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            keep_alive_timeout: Duration::from_secs(60),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            models_dir: PathBuf::from("models"),
            http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8000))),
            http_uds: None,
            grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8001))),
            grpc_uds: None,
            tf_grpc_addr: None,
            tf_http_addr: None,
            transcode: Vec::new(),
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(10),
            request_limits: RequestLimits::default(),
            strict_json: false,
            compute_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            io_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            backends: Registry::builtin(),
            auth_token: None,
            tls: None,
            upstream: None,
            metrics: Some(MetricsConfig::default()),
            model_control: ModelControl::None,
            traces: None,
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
    /// The CPU pool's threads (or the queue thread) could not be started.
    #[error("cannot start {threads} thread(s) of the server's own: {error}")]
    Threads {
        /// How many were asked for.
        threads: usize,
        /// The OS error.
        error: std::io::Error,
    },
    /// Every listener is turned off.
    #[error("nothing to listen on: give at least one of --http, --grpc, --http-uds, --grpc-uds")]
    NoListener,
    /// The TLS certificate or key could not be used.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// `--upstream` or `--upstream-models` cannot be used.
    #[error("cannot front the upstream (--upstream): {0}")]
    Upstream(String),
    /// The OTLP exporter cannot be set up.
    #[error("cannot export traces: {0}")]
    Traces(String),
    /// The transcoding config cannot be used.
    #[error("cannot transcode to the gRPC services: {0}")]
    Transcode(String),
}

impl From<RepositoryError> for StartError {
    fn from(e: RepositoryError) -> StartError {
        StartError::Repository(e)
    }
}

/// The models to serve from the start: every one in the repository, or in
/// explicit model control those named (`*` for all, and possibly none).
fn load_at_start(
    config: &ServerConfig,
    pool: &CpuPool,
) -> Result<Vec<wirespeed_models::LoadedModel>, StartError> {
    let dir = &config.models_dir;
    let ModelControl::Explicit { startup } = &config.model_control else {
        return Ok(wirespeed_models::load_repository(
            dir,
            &config.backends,
            pool,
        )?);
    };
    let folders = wirespeed_models::model_folders(dir)?;
    let all = startup.iter().any(|n| n == "*");
    for name in startup.iter().filter(|n| *n != "*") {
        if !folders.iter().any(|(folder, _)| folder == name) {
            return Err(StartError::Repository(RepositoryError {
                path: dir.join(name),
                message: format!("--load-model names '{name}', which has no folder here"),
            }));
        }
    }
    let mut loaded = Vec::new();
    for (name, folder) in folders
        .iter()
        .filter(|(name, _)| all || startup.contains(name))
    {
        loaded.extend(wirespeed_models::load_model(
            name,
            folder,
            &config.backends,
            pool,
            None,
        )?);
    }
    Ok(loaded)
}

/// Whether `dir` holds a folder that could be a model's.
fn has_model_folders(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
    })
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
    pub(crate) models: ServedModels,
    pub(crate) ready: AtomicBool,
    pub(crate) limits: Limits,
    /// The request limits, the switches of the JSON decoders and the CPU
    /// pool their helpers run on.
    pub(crate) decode_options: wirespeed_json::DecodeOptions,
    /// The one CPU pool.
    pub(crate) pool: CpuPool,
    /// The bearer token, when requests must carry one.
    pub(crate) auth: Auth,
    /// Numbers requests for error messages and the log.
    pub(crate) request_ids: std::sync::atomic::AtomicU64,
    /// Clipper's query ids, counted from server start.
    pub(crate) clipper_queries: std::sync::atomic::AtomicU64,
    /// The registered system shared-memory regions.
    pub(crate) shared_memory: shared_memory::SharedMemory,
    /// False while an upstream's models are still to be listed
    /// (`--upstream` without `--upstream-models`): not ready until then.
    pub(crate) listed: AtomicBool,
    /// Prometheus metrics, unless off.
    pub(crate) metrics: Option<metrics::Metrics>,
    /// The model repository: index, loads and unloads while serving.
    pub(crate) repository: repository::Repository,
    /// OpenTelemetry traces, when exported.
    pub(crate) traces: Option<traces::Traces>,
    /// The gRPC services transcoded from HTTP/JSON, if any.
    pub(crate) transcoder: Option<Arc<transcode::Transcoder>>,
}

impl AppState {
    /// Ready while serving with every model ready, as Triton's and
    /// KServe's server readiness mean.
    pub(crate) fn server_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
            && self.listed.load(Ordering::Acquire)
            && self
                .models
                .all()
                .iter()
                .all(|(_, served)| served.model.ready().is_ok())
    }

    /// Whether `served` can answer now, or why not.
    pub(crate) fn model_ready(&self, served: &models::ServedModel) -> Result<(), String> {
        if !self.ready.load(Ordering::Acquire) {
            return Err("the server is shutting down".to_owned());
        }
        served.model.ready()
    }
}

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
    state: Arc<AppState>,
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
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let traces = config
            .traces
            .as_ref()
            .map(traces::Traces::start)
            .transpose()
            .map_err(StartError::Traces)?;
        let pool = CpuPool::new(config.compute_threads).map_err(|error| StartError::Threads {
            threads: config.compute_threads,
            error,
        })?;
        let upstream = config
            .upstream
            .as_ref()
            .map(fronting::upstream)
            .transpose()?;
        // In front of an upstream, or transcoding to one, local models
        // are optional.
        let local = (upstream.is_none() && config.transcode.is_empty())
            || has_model_folders(&config.models_dir);
        let transcoder = if config.transcode.is_empty() {
            None
        } else {
            Some(Arc::new(
                transcode::Transcoder::load(&config.transcode).await?,
            ))
        };
        let loaded = if local {
            load_at_start(config, &pool)?
        } else {
            Vec::new()
        };
        let repository = repository::Repository::new(
            &config.models_dir,
            config.backends.clone(),
            pool.clone(),
            config.model_control.clone(),
        );
        repository.loaded_at_start(&loaded);
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
        let metrics = config.metrics.as_ref().map(metrics::Metrics::new);
        let buckets = metrics.as_ref().and_then(|m| m.buckets.clone());
        let models = ServedModels::start(loaded, &pool, buckets)
            .map_err(|error| StartError::Threads { threads: 1, error })?;
        let state = Arc::new(AppState {
            models,
            ready: AtomicBool::new(true),
            limits: config.limits.clone(),
            decode_options: wirespeed_json::DecodeOptions {
                limits: config.request_limits.clone(),
                strict: config.strict_json,
                pool: Some(pool.clone()),
            },
            pool,
            auth: Auth::new(config.auth_token.clone()),
            request_ids: std::sync::atomic::AtomicU64::new(1),
            clipper_queries: std::sync::atomic::AtomicU64::new(0),
            shared_memory: shared_memory::SharedMemory::default(),
            listed: AtomicBool::new(true),
            metrics,
            repository,
            traces,
            transcoder,
        });
        if let ModelControl::Poll(period) = config.model_control {
            tokio::spawn(repository::poll(Arc::downgrade(&state), period));
        }
        if state.transcoder.is_some() {
            tokio::spawn(transcode::reflect_again(Arc::downgrade(&state)));
        }
        if let (Some(upstream), Some(fronted)) = (upstream, &config.upstream) {
            fronting::start(&state, upstream, &fronted.models)?;
        }
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

    /// Serves every listener until `shutdown` resolves. Then readiness turns
    /// false (and gRPC health NOT_SERVING), the listeners close, open
    /// connections finish their requests within the drain timeout, and Unix
    /// socket files are removed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let scheme = if self.tls.is_some() { "s" } else { "" };
        let (http_addr, grpc_addr) = (self.http_addr(), self.grpc_addr());
        let (tf_http_addr, tf_grpc_addr) = (self.tf_http_addr(), self.tf_grpc_addr());
        let metrics_addr = self.metrics_addr();
        let state = self.state;
        let limits = state.limits.clone();
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let shared = Arc::new(listen::Shared {
            connections: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
            stopping,
            tls: self.tls,
            keep_alive: limits.keep_alive_timeout,
            header_timeout: limits.header_timeout,
            traffic: state.metrics.as_ref().map(|m| Arc::clone(&m.traffic)),
        });
        let rest = Arc::new(listen::builder(listen::Protocol::Rest, &limits));
        let grpc = Arc::new(listen::builder(listen::Protocol::Grpc, &limits));
        let (grpc_routes, health) = grpc::service(Arc::clone(&state)).await;
        let mut sockets = Vec::new();
        // The metrics listener first: a "listening on" line for the APIs
        // tells that everything listens already.
        let mut listening: Vec<String> = metrics_addr
            .map(|a| format!("metrics http{scheme}://{a}/metrics"))
            .into_iter()
            .collect();
        listening.extend(http_addr.map(|a| format!("http{scheme}://{a}")));
        listening.extend(grpc_addr.map(|a| format!("grpc{scheme}://{a}")));
        // Named, so that a reader of the log (or a test) tells them apart.
        listening
            .extend(tf_http_addr.map(|a| format!("TF Serving's REST port http{scheme}://{a}")));
        listening
            .extend(tf_grpc_addr.map(|a| format!("TF Serving's gRPC port grpc{scheme}://{a}")));
        for (_, path) in self.http_uds.iter() {
            listening.push(format!("http{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
        for (_, path) in self.grpc_uds.iter() {
            listening.push(format!("grpc{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
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
        let mut threads = Vec::new();
        for i in 0..self.io_threads.max(1) {
            let thread = listen::IoThread {
                sockets: match listeners.try_clone() {
                    Ok(sockets) => sockets,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start I/O thread {i}");
                        continue;
                    }
                },
                rest: Arc::clone(&rest),
                grpc: Arc::clone(&grpc),
                rest_service: http::service(Arc::clone(&state)),
                metrics_service: http::metrics_service(Arc::clone(&state)),
                grpc_routes: grpc_routes.clone(),
                shared: Arc::clone(&shared),
                ended: ended.clone(),
                drain_over: drain_over.clone(),
            };
            match std::thread::Builder::new()
                .name(format!("wirespeed-io-{i}"))
                .spawn(move || thread.run())
            {
                Ok(handle) => threads.push(handle),
                Err(e) => tracing::error!(error = %e, "cannot start I/O thread {i}"),
            }
        }
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
        state.ready.store(false, Ordering::Release);
        grpc::not_serving(&health).await;
        tracing::info!(
            "shutting down: draining open requests for up to {:?}",
            drain
        );
        let _ = stop.send(true);
        // Every thread's accept loops have ended (and dropped their sockets).
        for _ in 0..threads.len() {
            if accept_loops.recv().await.is_none() {
                break;
            }
        }
        tracing::info!(
            "stopped accepting; waiting for {} open connections",
            limits.max_connections - shared.connections.available_permits()
        );
        // Every connection holds a permit; all back means all closed.
        let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
        if tokio::time::timeout(drain, shared.connections.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!("drain deadline passed; closing remaining connections");
        }
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
        if state.traces.is_some() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(traces) = &state.traces {
                    traces.flush();
                }
            })
            .await;
        }
    }
}
