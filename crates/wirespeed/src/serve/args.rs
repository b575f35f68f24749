//! `wirespeed serve`'s flags: each with its environment variable, its
//! default and what it means, in the order `--help` lists them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::flags::{seconds, BucketsFlag, Listen, MetricsFlag};

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The model repository: one folder per model, each with a config.toml
    /// (or Triton's config.pbtxt, MLServer's model-settings.json, or a
    /// model file of KServe's runtimes). A folder, or a folder in object
    /// storage: s3://bucket/path, s3://host:port/bucket/path, gs://,
    /// az://container/path, as://account/container/path, http(s)://.
    /// Give it more than once for several repositories.
    #[arg(long, env = "WIRESPEED_MODELS", default_value = "models")]
    pub(crate) models: Vec<PathBuf>,

    /// Where repositories in object storage are copied to before they are
    /// loaded (one folder per repository URL, kept across restarts).
    /// Default: wirespeed-models in the system's temporary folder.
    #[arg(long, env = "WIRESPEED_MODEL_CACHE_DIR")]
    pub(crate) model_cache_dir: Option<PathBuf>,

    /// The largest model folder fetched from object storage, in bytes (all
    /// its files together); a larger one is refused with why.
    #[arg(long, env = "WIRESPEED_MAX_MODEL_BYTES", default_value_t = 64 << 30)]
    pub(crate) max_model_bytes: u64,

    /// --models is one model's folder (its config.toml and files, or the
    /// model file alone, as KServe's storage initializer lays a model out
    /// in /mnt/models): serve it alone, under this name.
    #[arg(long, env = "WIRESPEED_MODEL_NAME")]
    pub(crate) model_name: Option<String>,

    /// Serve every model of another inference server too (Triton, KServe,
    /// MLServer, another wirespeed), forwarding over its V2 gRPC API:
    /// grpc://HOST:PORT, grpcs://HOST:PORT or grpc+unix:///PATH. Give it
    /// again for replicas. The models are those its repository index lists,
    /// or `--upstream-models`.
    #[arg(long, env = "WIRESPEED_UPSTREAM", value_delimiter = ',')]
    pub(crate) upstream: Vec<String>,

    /// The upstream's models to serve, for servers that do not list theirs
    /// (KServe's model server): a,b,c.
    #[arg(
        long,
        env = "WIRESPEED_UPSTREAM_MODELS",
        value_delimiter = ',',
        requires = "upstream"
    )]
    pub(crate) upstream_models: Vec<String>,

    /// Listen where MLServer would: the REST and gRPC addresses from the
    /// `host`, `http_port` and `grpc_port` of `--models`' settings.json
    /// (MLServer's defaults, 0.0.0.0:8080 and :8081, for those it leaves
    /// out), in place of --http and --grpc.
    #[arg(long, env = "WIRESPEED_PORTS_FROM_SETTINGS", conflicts_with_all = ["http", "grpc"])]
    pub(crate) ports_from_settings: bool,

    /// The TCP address the REST API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_HTTP", default_value = "127.0.0.1:8000")]
    pub(crate) http: Listen,

    /// The TCP address the gRPC API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_GRPC", default_value = "127.0.0.1:8001")]
    pub(crate) grpc: Listen,

    /// One more TCP address for the gRPC API, where TF Serving's clients
    /// are pointed (its port 8500): 0.0.0.0:8500, say. It serves what
    /// `--grpc` serves, TF Serving's services among them.
    #[arg(long, env = "WIRESPEED_TF_GRPC")]
    pub(crate) tf_grpc: Option<SocketAddr>,

    /// One more TCP address for the REST API, TF Serving's port 8501.
    #[arg(long, env = "WIRESPEED_TF_HTTP")]
    pub(crate) tf_http: Option<SocketAddr>,

    /// TF Serving's gRPC `Predict` answers number tensors in
    /// `tensor_content` (their raw bytes) rather than in the typed fields
    /// (`float_val`, `int64_val`...) TF Serving fills by default. Faster
    /// for large outputs; for clients that read `tensor_content`
    /// (`tf.make_ndarray` reads both).
    #[arg(long, env = "WIRESPEED_TF_TENSOR_CONTENT")]
    pub(crate) tf_tensor_content: bool,

    /// A Unix socket for the REST API, next to or instead of TCP. The socket
    /// is made mode 0660; a stale socket file is replaced.
    #[arg(long, env = "WIRESPEED_HTTP_UDS")]
    pub(crate) http_uds: Option<PathBuf>,

    /// A Unix socket for the gRPC API, next to or instead of TCP (clients
    /// dial `unix:///path`).
    #[arg(long, env = "WIRESPEED_GRPC_UDS")]
    pub(crate) grpc_uds: Option<PathBuf>,

    /// The log filter: error, warn, info, debug, trace, or a tracing directive
    /// such as `wirespeed_server=debug`.
    #[arg(long, env = "WIRESPEED_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,

    /// How log lines are written to stderr: `text` for people, `json` (one
    /// object per line) for log collectors.
    #[arg(long, env = "WIRESPEED_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub(crate) log_format: String,

    /// One log line per request (target `wirespeed_server::access`): REST
    /// method, path, status and time; gRPC method, status and time. Never
    /// the body.
    #[arg(long, env = "WIRESPEED_ACCESS_LOG")]
    pub(crate) access_log: bool,

    /// Export OpenTelemetry traces over OTLP/gRPC to this collector, as
    /// `http://otel-collector:4317`: one `infer` span per sampled request,
    /// with read, decode, queue, compute and encode spans inside. A
    /// client's W3C `traceparent` is its parent, and is passed on to
    /// upstream servers in any case.
    #[arg(long, env = "WIRESPEED_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,

    /// With --otlp-endpoint, the share of requests without a sampled
    /// parent that are traced, from 0 to 1; a client's sampled
    /// `traceparent` is always traced.
    #[arg(long, env = "WIRESPEED_TRACE_SAMPLE_RATIO", default_value_t = 0.01)]
    pub(crate) trace_sample_ratio: f64,

    /// The largest REST request body, in bytes (Triton's default).
    #[arg(long, env = "WIRESPEED_MAX_BODY_BYTES", default_value_t = 64 << 20)]
    pub(crate) max_body_bytes: usize,

    /// The largest gRPC message, in bytes.
    #[arg(long, env = "WIRESPEED_MAX_GRPC_MESSAGE_BYTES", default_value_t = 64 << 20)]
    pub(crate) max_grpc_message_bytes: usize,

    /// The most bytes of a request's headers.
    #[arg(long, env = "WIRESPEED_MAX_HEADER_BYTES", default_value_t = 64 << 10)]
    pub(crate) max_header_bytes: usize,

    /// The most headers in a request (HTTP/1).
    #[arg(long, env = "WIRESPEED_MAX_HEADERS", default_value_t = 100)]
    pub(crate) max_headers: usize,

    /// The most open connections over all listeners; more wait to be accepted.
    #[arg(long, env = "WIRESPEED_MAX_CONNECTIONS", default_value_t = 4096)]
    pub(crate) max_connections: usize,

    /// The most tensor elements in one request, over all inputs.
    #[arg(long, env = "WIRESPEED_MAX_ELEMENTS", default_value_t = 32 << 20)]
    pub(crate) max_elements: usize,

    /// The most bytes of tensor data one request may decode to.
    #[arg(long, env = "WIRESPEED_MAX_TENSOR_BYTES", default_value_t = 256 << 20)]
    pub(crate) max_tensor_bytes: usize,

    /// The most inputs in one request.
    #[arg(long, env = "WIRESPEED_MAX_INPUTS", default_value_t = 1024)]
    pub(crate) max_inputs: usize,

    /// The most bytes in one string: a BYTES element, a name, a key.
    #[arg(long, env = "WIRESPEED_MAX_STRING_BYTES", default_value_t = 16 << 20)]
    pub(crate) max_string_bytes: usize,

    /// The deepest JSON nesting.
    #[arg(long, env = "WIRESPEED_MAX_DEPTH", default_value_t = 64)]
    pub(crate) max_depth: usize,

    /// Seconds to receive a request's headers; on HTTP/1 also how long an
    /// idle keep-alive connection waits for its next request.
    #[arg(long, env = "WIRESPEED_HEADER_TIMEOUT", default_value = "10", value_parser = seconds)]
    pub(crate) header_timeout: Duration,

    /// The longest pause, in seconds, between two pieces of a request body.
    #[arg(long, env = "WIRESPEED_BODY_TIMEOUT", default_value = "10", value_parser = seconds)]
    pub(crate) body_timeout: Duration,

    /// Seconds to receive a whole request body; also a request's deadline
    /// for a model behind another server (a gRPC client's own
    /// `grpc-timeout` brings it forward).
    #[arg(long, env = "WIRESPEED_REQUEST_TIMEOUT", default_value = "60", value_parser = seconds)]
    pub(crate) request_timeout: Duration,

    /// Seconds a connection with nothing in flight may stay silent.
    #[arg(long, env = "WIRESPEED_KEEP_ALIVE_TIMEOUT", default_value = "60", value_parser = seconds)]
    pub(crate) keep_alive_timeout: Duration,

    /// Seconds shutdown waits for open requests; a second signal exits at once.
    #[arg(long, env = "WIRESPEED_DRAIN_TIMEOUT", default_value = "10", value_parser = seconds)]
    pub(crate) drain_timeout: Duration,

    /// A file holding the bearer token every request but health checks must
    /// carry (`Authorization: Bearer <token>`).
    #[arg(long, env = "WIRESPEED_AUTH_TOKEN_FILE")]
    pub(crate) auth_token_file: Option<PathBuf>,

    /// A PEM certificate chain: serve every listener over TLS (with --tls-key).
    #[arg(long, env = "WIRESPEED_TLS_CERT", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert.
    #[arg(long, env = "WIRESPEED_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Triton's response cache: `local,size=BYTES`, one cache shared by
    /// every model whose config turns it on (`response_cache = true`,
    /// `response_cache { enable: true }`), the least recently used
    /// answers out past BYTES.
    #[arg(long, env = "WIRESPEED_CACHE_CONFIG")]
    pub(crate) cache_config: Vec<String>,

    /// The threads of the one CPU pool, shared by model compute and large
    /// decodes; the cores unless set. Each model computes at most this
    /// many requests at once unless its config says otherwise.
    #[arg(long, env = "WIRESPEED_COMPUTE_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) compute_threads: Option<u16>,

    /// The threads that accept and serve connections, each with a runtime
    /// of its own; the cores unless set.
    #[arg(long, env = "WIRESPEED_IO_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) io_threads: Option<u16>,

    /// Prometheus metrics (Triton's names, plus latency histograms) on their
    /// own TCP address, as Triton's port 8002, and always on `/metrics` of
    /// the REST port too; `rest` for the REST port alone; `off` for none
    /// (nothing is counted for them then).
    #[arg(long, env = "WIRESPEED_METRICS", default_value = "127.0.0.1:8002")]
    pub(crate) metrics: MetricsFlag,

    /// The bucket bounds of the latency histograms, in seconds, increasing
    /// (up to 30), or `off` for no histograms.
    #[arg(
        long,
        env = "WIRESPEED_METRICS_BUCKETS",
        default_value = "0.0001,0.00025,0.0005,0.001,0.0025,0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10"
    )]
    pub(crate) metrics_buckets: BucketsFlag,

    /// How models load and unload while serving: `none` (all at start, no
    /// change), `explicit` (those of --load-model at start, then through
    /// the repository API: POST /v2/repository/models/M/load and /unload,
    /// and gRPC), or `poll` (all at start, then the repository is scanned
    /// every --repository-poll-secs: new, changed and removed models).
    /// Unset: `none`, or, for a repository of MLServer's models, all at
    /// start and then through the repository API, as MLServer allows.
    #[arg(long, env = "WIRESPEED_MODEL_CONTROL_MODE", value_parser = ["none", "explicit", "poll"])]
    pub(crate) model_control_mode: Option<String>,

    /// Seconds between two scans of the repository in poll mode.
    #[arg(long, env = "WIRESPEED_REPOSITORY_POLL_SECS", default_value = "15", value_parser = seconds)]
    pub(crate) repository_poll_secs: Duration,

    /// In explicit mode, the models to load at start (`*` for all):
    /// a,b,c, or the flag given again.
    #[arg(long, env = "WIRESPEED_LOAD_MODEL", value_delimiter = ',')]
    pub(crate) load_model: Vec<String>,

    /// Validate the model repository, print what it serves, and exit.
    #[arg(long, env = "WIRESPEED_CHECK")]
    pub(crate) check: bool,

    /// Triton's: complete no configuration from a model's files or code
    /// (a Python model's auto_complete_config is not called; a folder with
    /// only 1/model.onnx is refused).
    #[arg(long, env = "WIRESPEED_DISABLE_AUTO_COMPLETE_CONFIG")]
    pub(crate) disable_auto_complete_config: bool,

    /// Triton's: the V2 REST request headers whose names this regular
    /// expression matches (anywhere in the name, either case) are passed
    /// to the model as string parameters of their name (a Python model's
    /// `request.parameters()`).
    #[arg(long, env = "WIRESPEED_HTTP_HEADER_FORWARD_PATTERN")]
    pub(crate) http_header_forward_pattern: Option<String>,

    /// Triton's: the same for V2 gRPC calls' metadata (a stream's, for
    /// each of its requests).
    #[arg(long, env = "WIRESPEED_GRPC_HEADER_FORWARD_PATTERN")]
    pub(crate) grpc_header_forward_pattern: Option<String>,

    /// Write the log to this file (appended to) rather than to stderr.
    #[arg(long, env = "WIRESPEED_LOG_FILE")]
    pub(crate) log_file: Option<PathBuf>,

    /// What Triton's command line set beyond these flags
    /// (`wirespeed tritonserver`).
    #[arg(skip)]
    pub(crate) triton: Option<TritonFace>,
}

/// What `wirespeed tritonserver` sets that `serve`'s flags do not.
pub(crate) struct TritonFace {
    /// The name server metadata answers (`triton`, or `--id`).
    pub(crate) server_name: String,
    /// `--exit-on-error`.
    pub(crate) exit_on_error: bool,
    /// The flags accepted with no effect, said in the log at start.
    pub(crate) notes: Vec<String>,
}
