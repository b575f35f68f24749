//! What the server is started with: [`ServerConfig`] and its parts, and
//! [`StartError`], why it could not start. Plain data; each layer takes
//! the part it uses from the composition root (`lib.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use wirespeed_core::RequestLimits;
use wirespeed_models::{Registry, RepositoryError};

use wirespeed_engine::metrics::MetricsConfig;
use wirespeed_engine::model_control::ModelControl;
use wirespeed_engine::traces::TracesConfig;
#[cfg(feature = "proxy")]
use wirespeed_proxy::TranscodeConfig;

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model repository's folders: one, or several as Triton's
    /// `--model-repository` given more than once (a model's name must be
    /// unique among them).
    pub repositories: Vec<PathBuf>,
    /// The repositories in object storage whose copies are among
    /// `repositories`: polled and asked for a model before it is loaded.
    pub remotes: wirespeed_storage::Remotes,
    /// Triton's `--cache-config local,size=N`: the response cache's size in
    /// bytes, for the models that turn it on (`response_cache`); none
    /// when unset.
    pub response_cache_bytes: Option<usize>,
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
    /// TF Serving's `Predict` answers each number tensor in
    /// `tensor_content` (its raw bytes, not copied) instead of the typed
    /// field (`float_val`, ...) TF Serving writes by default
    /// (`--tf-tensor-content`): faster for large outputs, for clients
    /// that read `tensor_content` (`tf.make_ndarray` does).
    pub tf_tensor_content: bool,
    /// A REST/JSON face for a gRPC service's methods (`wirespeed proxy`):
    /// requests that name none of wirespeed's endpoints are transcoded.
    #[cfg(feature = "proxy")]
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
    /// The HTTP headers and gRPC metadata copied into an inference
    /// request's parameters (Triton's `--http-header-forward-pattern` and
    /// `--grpc-header-forward-pattern`).
    pub header_forward: crate::protocols::v2::parameters::HeaderForward,
    /// The name server metadata answers: `wirespeed`, or `triton` (or its
    /// `--id`) under Triton's command line, which Triton's own clients
    /// check.
    pub server_name: String,
    /// A model that fails to load at start stops the start (Triton's
    /// `--exit-on-error`, true by default); when false the server starts
    /// without it, and the repository index says why it is unavailable.
    pub exit_on_error: bool,
}

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The server in front of which this one stands, as `--upstream` gives it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamServer {
    /// Its URL, or its replicas' URLs: `grpc://host:port`, `grpcs://...`,
    /// `grpc+unix:///path`.
    pub urls: Vec<String>,
    /// The models to serve from it, when it lists none itself; empty to
    /// ask it.
    pub models: Vec<String>,
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
            repositories: vec![PathBuf::from("models")],
            remotes: Default::default(),
            response_cache_bytes: None,
            http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8000))),
            http_uds: None,
            grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8001))),
            grpc_uds: None,
            tf_grpc_addr: None,
            tf_http_addr: None,
            tf_tensor_content: false,
            #[cfg(feature = "proxy")]
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
            header_forward: Default::default(),
            server_name: "wirespeed".to_owned(),
            exit_on_error: true,
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

fn bind_hint(e: &std::io::Error, flag: &str) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!("; another process holds it: stop it or pass {flag} with another address")
    } else {
        String::new()
    }
}
