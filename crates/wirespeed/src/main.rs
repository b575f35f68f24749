//! The `wirespeed` command: flags in, the server library called.

mod flags;
mod health;
mod logs;
mod malloc;
mod predict;
#[cfg(feature = "proxy")]
mod proxy;
mod tritonserver;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use flags::{cache_size, seconds, BucketsFlag, Listen, MetricsFlag};
use wirespeed_server::{
    HeaderForward, Limits, MetricsConfig, ModelControl, RequestLimits, Server, ServerConfig,
    TlsFiles, TracesConfig, UpstreamServer,
};

/// A model server whose request path runs at wire speed.
#[derive(Parser)]
#[command(name = "wirespeed", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a model repository over the Open Inference Protocol (KServe V2), REST and gRPC.
    Serve(Box<ServeArgs>),
    /// Predict rows from a CSV file with a tree model, offline, and print one line per row.
    Predict(predict::PredictArgs),
    /// Measure a server: latency corrected for coordinated omission, throughput,
    /// errors; or re-measure a published benchmark (`bench scenario NAME`).
    Bench(Box<wirespeed_bench::BenchArgs>),
    /// Ask a running server whether it is ready (or live): exit 0 if so, 1
    /// if not. The container image's health check.
    Health(health::HealthArgs),
    /// Put a REST/JSON face on a gRPC service: its `google.api.http` routes
    /// (and POST /package.Service/Method), transcoded to gRPC calls.
    #[cfg(feature = "proxy")]
    Proxy(proxy::ProxyArgs),
    /// Serve as Triton's `tritonserver` command does, with its flags and
    /// their meaning (`--model-repository=...`, `--http-port=...`, ...): a
    /// deployment that runs `tritonserver` runs this. The binary run under
    /// the name `tritonserver` does the same.
    #[command(disable_help_flag = true)]
    Tritonserver {
        /// Triton's options; `--help` lists them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// The model repository: one folder per model, each with a config.toml
    /// (or Triton's config.pbtxt, MLServer's model-settings.json, or a
    /// model file of KServe's runtimes). A folder, or a folder in object
    /// storage: s3://bucket/path, s3://host:port/bucket/path, gs://,
    /// az://container/path, as://account/container/path, http(s)://.
    /// Give it more than once for several repositories.
    #[arg(long, env = "WIRESPEED_MODELS", default_value = "models")]
    models: Vec<PathBuf>,

    /// Where repositories in object storage are copied to before they are
    /// loaded (one folder per repository URL, kept across restarts).
    /// Default: wirespeed-models in the system's temporary folder.
    #[arg(long, env = "WIRESPEED_MODEL_CACHE_DIR")]
    model_cache_dir: Option<PathBuf>,

    /// The largest model folder fetched from object storage, in bytes (all
    /// its files together); a larger one is refused with why.
    #[arg(long, env = "WIRESPEED_MAX_MODEL_BYTES", default_value_t = 64 << 30)]
    max_model_bytes: u64,

    /// --models is one model's folder (its config.toml and files, or the
    /// model file alone, as KServe's storage initializer lays a model out
    /// in /mnt/models): serve it alone, under this name.
    #[arg(long, env = "WIRESPEED_MODEL_NAME")]
    model_name: Option<String>,

    /// Serve every model of another inference server too (Triton, KServe,
    /// MLServer, another wirespeed), forwarding over its V2 gRPC API:
    /// grpc://HOST:PORT, grpcs://HOST:PORT or grpc+unix:///PATH. Give it
    /// again for replicas. The models are those its repository index lists,
    /// or `--upstream-models`.
    #[arg(long, env = "WIRESPEED_UPSTREAM", value_delimiter = ',')]
    upstream: Vec<String>,

    /// The upstream's models to serve, for servers that do not list theirs
    /// (KServe's model server): a,b,c.
    #[arg(
        long,
        env = "WIRESPEED_UPSTREAM_MODELS",
        value_delimiter = ',',
        requires = "upstream"
    )]
    upstream_models: Vec<String>,

    /// Listen where MLServer would: the REST and gRPC addresses from the
    /// `host`, `http_port` and `grpc_port` of `--models`' settings.json
    /// (MLServer's defaults, 0.0.0.0:8080 and :8081, for those it leaves
    /// out), in place of --http and --grpc.
    #[arg(long, env = "WIRESPEED_PORTS_FROM_SETTINGS", conflicts_with_all = ["http", "grpc"])]
    ports_from_settings: bool,

    /// The TCP address the REST API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_HTTP", default_value = "127.0.0.1:8000")]
    http: Listen,

    /// The TCP address the gRPC API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_GRPC", default_value = "127.0.0.1:8001")]
    grpc: Listen,

    /// One more TCP address for the gRPC API, where TF Serving's clients
    /// are pointed (its port 8500): 0.0.0.0:8500, say. It serves what
    /// `--grpc` serves, TF Serving's services among them.
    #[arg(long, env = "WIRESPEED_TF_GRPC")]
    tf_grpc: Option<SocketAddr>,

    /// One more TCP address for the REST API, TF Serving's port 8501.
    #[arg(long, env = "WIRESPEED_TF_HTTP")]
    tf_http: Option<SocketAddr>,

    /// TF Serving's gRPC `Predict` answers number tensors in
    /// `tensor_content` (their raw bytes) rather than in the typed fields
    /// (`float_val`, `int64_val`...) TF Serving fills by default. Faster
    /// for large outputs; for clients that read `tensor_content`
    /// (`tf.make_ndarray` reads both).
    #[arg(long, env = "WIRESPEED_TF_TENSOR_CONTENT")]
    tf_tensor_content: bool,

    /// A Unix socket for the REST API, next to or instead of TCP. The socket
    /// is made mode 0660; a stale socket file is replaced.
    #[arg(long, env = "WIRESPEED_HTTP_UDS")]
    http_uds: Option<PathBuf>,

    /// A Unix socket for the gRPC API, next to or instead of TCP (clients
    /// dial `unix:///path`).
    #[arg(long, env = "WIRESPEED_GRPC_UDS")]
    grpc_uds: Option<PathBuf>,

    /// The log filter: error, warn, info, debug, trace, or a tracing directive
    /// such as `wirespeed_server=debug`.
    #[arg(long, env = "WIRESPEED_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// How log lines are written to stderr: `text` for people, `json` (one
    /// object per line) for log collectors.
    #[arg(long, env = "WIRESPEED_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,

    /// One log line per request (target `wirespeed_server::access`): REST
    /// method, path, status and time; gRPC method, status and time. Never
    /// the body.
    #[arg(long, env = "WIRESPEED_ACCESS_LOG")]
    access_log: bool,

    /// Export OpenTelemetry traces over OTLP/gRPC to this collector, as
    /// `http://otel-collector:4317`: one `infer` span per sampled request,
    /// with read, decode, queue, compute and encode spans inside. A
    /// client's W3C `traceparent` is its parent, and is passed on to
    /// upstream servers in any case.
    #[arg(long, env = "WIRESPEED_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,

    /// With --otlp-endpoint, the share of requests without a sampled
    /// parent that are traced, from 0 to 1; a client's sampled
    /// `traceparent` is always traced.
    #[arg(long, env = "WIRESPEED_TRACE_SAMPLE_RATIO", default_value_t = 0.01)]
    trace_sample_ratio: f64,

    /// The largest REST request body, in bytes (Triton's default).
    #[arg(long, env = "WIRESPEED_MAX_BODY_BYTES", default_value_t = 64 << 20)]
    max_body_bytes: usize,

    /// The largest gRPC message, in bytes.
    #[arg(long, env = "WIRESPEED_MAX_GRPC_MESSAGE_BYTES", default_value_t = 64 << 20)]
    max_grpc_message_bytes: usize,

    /// The most bytes of a request's headers.
    #[arg(long, env = "WIRESPEED_MAX_HEADER_BYTES", default_value_t = 64 << 10)]
    max_header_bytes: usize,

    /// The most headers in a request (HTTP/1).
    #[arg(long, env = "WIRESPEED_MAX_HEADERS", default_value_t = 100)]
    max_headers: usize,

    /// The most open connections over all listeners; more wait to be accepted.
    #[arg(long, env = "WIRESPEED_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,

    /// The most tensor elements in one request, over all inputs.
    #[arg(long, env = "WIRESPEED_MAX_ELEMENTS", default_value_t = 32 << 20)]
    max_elements: usize,

    /// The most bytes of tensor data one request may decode to.
    #[arg(long, env = "WIRESPEED_MAX_TENSOR_BYTES", default_value_t = 256 << 20)]
    max_tensor_bytes: usize,

    /// The most inputs in one request.
    #[arg(long, env = "WIRESPEED_MAX_INPUTS", default_value_t = 1024)]
    max_inputs: usize,

    /// The most bytes in one string: a BYTES element, a name, a key.
    #[arg(long, env = "WIRESPEED_MAX_STRING_BYTES", default_value_t = 16 << 20)]
    max_string_bytes: usize,

    /// The deepest JSON nesting.
    #[arg(long, env = "WIRESPEED_MAX_DEPTH", default_value_t = 64)]
    max_depth: usize,

    /// Seconds to receive a request's headers; on HTTP/1 also how long an
    /// idle keep-alive connection waits for its next request.
    #[arg(long, env = "WIRESPEED_HEADER_TIMEOUT", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,

    /// The longest pause, in seconds, between two pieces of a request body.
    #[arg(long, env = "WIRESPEED_BODY_TIMEOUT", default_value = "10", value_parser = seconds)]
    body_timeout: Duration,

    /// Seconds to receive a whole request body; also a request's deadline
    /// for a model behind another server (a gRPC client's own
    /// `grpc-timeout` brings it forward).
    #[arg(long, env = "WIRESPEED_REQUEST_TIMEOUT", default_value = "60", value_parser = seconds)]
    request_timeout: Duration,

    /// Seconds a connection with nothing in flight may stay silent.
    #[arg(long, env = "WIRESPEED_KEEP_ALIVE_TIMEOUT", default_value = "60", value_parser = seconds)]
    keep_alive_timeout: Duration,

    /// Seconds shutdown waits for open requests; a second signal exits at once.
    #[arg(long, env = "WIRESPEED_DRAIN_TIMEOUT", default_value = "10", value_parser = seconds)]
    drain_timeout: Duration,

    /// A file holding the bearer token every request but health checks must
    /// carry (`Authorization: Bearer <token>`).
    #[arg(long, env = "WIRESPEED_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,

    /// A PEM certificate chain: serve every listener over TLS (with --tls-key).
    #[arg(long, env = "WIRESPEED_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert.
    #[arg(long, env = "WIRESPEED_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Triton's response cache: `local,size=BYTES`, one cache shared by
    /// every model whose config turns it on (`response_cache = true`,
    /// `response_cache { enable: true }`), the least recently used
    /// answers out past BYTES.
    #[arg(long, env = "WIRESPEED_CACHE_CONFIG")]
    cache_config: Vec<String>,

    /// The threads of the one CPU pool, shared by model compute and large
    /// decodes; the cores unless set. Each model computes at most this
    /// many requests at once unless its config says otherwise.
    #[arg(long, env = "WIRESPEED_COMPUTE_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    compute_threads: Option<u16>,

    /// The threads that accept and serve connections, each with a runtime
    /// of its own; the cores unless set.
    #[arg(long, env = "WIRESPEED_IO_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    io_threads: Option<u16>,

    /// Prometheus metrics (Triton's names, plus latency histograms) on their
    /// own TCP address, as Triton's port 8002, and always on `/metrics` of
    /// the REST port too; `rest` for the REST port alone; `off` for none
    /// (nothing is counted for them then).
    #[arg(long, env = "WIRESPEED_METRICS", default_value = "127.0.0.1:8002")]
    metrics: MetricsFlag,

    /// The bucket bounds of the latency histograms, in seconds, increasing
    /// (up to 30), or `off` for no histograms.
    #[arg(
        long,
        env = "WIRESPEED_METRICS_BUCKETS",
        default_value = "0.0001,0.00025,0.0005,0.001,0.0025,0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10"
    )]
    metrics_buckets: BucketsFlag,

    /// How models load and unload while serving: `none` (all at start, no
    /// change), `explicit` (those of --load-model at start, then through
    /// the repository API: POST /v2/repository/models/M/load and /unload,
    /// and gRPC), or `poll` (all at start, then the repository is scanned
    /// every --repository-poll-secs: new, changed and removed models).
    /// Unset: `none`, or, for a repository of MLServer's models, all at
    /// start and then through the repository API, as MLServer allows.
    #[arg(long, env = "WIRESPEED_MODEL_CONTROL_MODE", value_parser = ["none", "explicit", "poll"])]
    model_control_mode: Option<String>,

    /// Seconds between two scans of the repository in poll mode.
    #[arg(long, env = "WIRESPEED_REPOSITORY_POLL_SECS", default_value = "15", value_parser = seconds)]
    repository_poll_secs: Duration,

    /// In explicit mode, the models to load at start (`*` for all):
    /// a,b,c, or the flag given again.
    #[arg(long, env = "WIRESPEED_LOAD_MODEL", value_delimiter = ',')]
    load_model: Vec<String>,

    /// Validate the model repository, print what it serves, and exit.
    #[arg(long, env = "WIRESPEED_CHECK")]
    check: bool,

    /// Triton's: complete no configuration from a model's files or code
    /// (a Python model's auto_complete_config is not called; a folder with
    /// only 1/model.onnx is refused).
    #[arg(long, env = "WIRESPEED_DISABLE_AUTO_COMPLETE_CONFIG")]
    disable_auto_complete_config: bool,

    /// Triton's: the V2 REST request headers whose names this regular
    /// expression matches (anywhere in the name, either case) are passed
    /// to the model as string parameters of their name (a Python model's
    /// `request.parameters()`).
    #[arg(long, env = "WIRESPEED_HTTP_HEADER_FORWARD_PATTERN")]
    http_header_forward_pattern: Option<String>,

    /// Triton's: the same for V2 gRPC calls' metadata (a stream's, for
    /// each of its requests).
    #[arg(long, env = "WIRESPEED_GRPC_HEADER_FORWARD_PATTERN")]
    grpc_header_forward_pattern: Option<String>,

    /// Write the log to this file (appended to) rather than to stderr.
    #[arg(long, env = "WIRESPEED_LOG_FILE")]
    log_file: Option<PathBuf>,

    /// What Triton's command line set beyond these flags
    /// (`wirespeed tritonserver`).
    #[arg(skip)]
    triton: Option<TritonFace>,
}

/// What `wirespeed tritonserver` sets that `serve`'s flags do not.
struct TritonFace {
    /// The name server metadata answers (`triton`, or `--id`).
    server_name: String,
    /// `--exit-on-error`.
    exit_on_error: bool,
    /// The flags accepted with no effect, said in the log at start.
    notes: Vec<String>,
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let program = argv.next();
    if tritonserver::invoked_as_tritonserver(program.as_ref()) {
        return finish(tritonserver(argv.collect()));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Predict(args) => predict::run(&args),
        Command::Bench(args) => wirespeed_bench::run(*args),
        Command::Health(args) => return health::run(&args),
        #[cfg(feature = "proxy")]
        Command::Proxy(args) => proxy::proxy(args),
        Command::Tritonserver { args } => tritonserver(args),
    };
    finish(result)
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Serves as `tritonserver ARGS` would: Triton's flags turned into
/// `serve`'s (`tritonserver.rs`).
fn tritonserver(args: Vec<std::ffi::OsString>) -> anyhow::Result<()> {
    if tritonserver::wants_help(&args) {
        print!("{}", tritonserver::usage());
        return Ok(());
    }
    let translated = tritonserver::translate(&args)?;
    let mut argv: Vec<std::ffi::OsString> = vec!["wirespeed".into(), "serve".into()];
    argv.extend(translated.serve);
    let Command::Serve(mut serve_args) = Cli::try_parse_from(argv)?.command else {
        unreachable!("the arguments name the serve command");
    };
    serve_args.triton = Some(TritonFace {
        server_name: translated.server_name,
        exit_on_error: translated.exit_on_error,
        notes: translated.notes,
    });
    serve(*serve_args)
}

/// A repository holding only `folder`, as model `name`: a folder of its own
/// under the temporary directory with a link to `folder` in it. Loads,
/// reloads and polling read through the link, so the model folder itself
/// is never written.
fn single_model_repository(folder: &Path, name: &str) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        wirespeed_models::is_valid_model_name(name),
        "--model-name '{name}' cannot be a model name: names use only letters, digits, '_', '-' and '.'"
    );
    anyhow::ensure!(
        wirespeed_models::is_model_folder(folder),
        "--model-name serves --models {} as one model's folder, and it has no config.toml \
         (nor Triton's config.pbtxt, MLServer's model-settings.json, a model.onnx, or a model \
         file of KServe's runtimes: *.joblib, *.pkl, *.pickle, *.bst, *.json, *.ubj, or a \
         model.py defining a kserve.Model)",
        folder.display()
    );
    let folder = folder
        .canonicalize()
        .with_context(|| format!("cannot read --models {}", folder.display()))?;
    let root = std::env::temp_dir().join(format!("wirespeed-{}", std::process::id()));
    std::fs::create_dir_all(&root)
        .with_context(|| format!("cannot make the repository {}", root.display()))?;
    let link = root.join(name);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&folder, &link)
        .with_context(|| format!("cannot link {} to {}", link.display(), folder.display()))?;
    Ok(root)
}

fn serve(mut args: ServeArgs) -> anyhow::Result<()> {
    logs::init(&args)?;
    if let Some(triton) = &args.triton {
        tracing::info!("serving Triton's command line (wirespeed tritonserver)");
        for note in &triton.notes {
            tracing::info!("{note}");
        }
    }
    // While this is still the only thread: an arena per core, and large
    // buffers kept for the next request.
    malloc::configure(std::thread::available_parallelism().map_or(1, |n| n.get()));

    let model_control_mode = args.model_control_mode.clone().unwrap_or_default();
    if !args.load_model.is_empty() && model_control_mode != "explicit" {
        anyhow::bail!(
            "--load-model names the models to load at start in explicit model control: add \
             --model-control-mode explicit (in mode {} every model loads at start)",
            if model_control_mode.is_empty() {
                "none"
            } else {
                &model_control_mode
            }
        );
    }
    let response_cache_bytes = cache_size(&args.cache_config)?;
    let header_forward = HeaderForward::new(
        args.http_header_forward_pattern.as_deref(),
        args.grpc_header_forward_pattern.as_deref(),
    )
    .context("--http-header-forward-pattern or --grpc-header-forward-pattern is not a regular expression")?;
    // This thread runs start-up (copying repositories in object storage
    // among it), the models' schedulers and signals; the I/O threads and
    // the CPU pool do the serving. The copies' clients live on it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let exit_on_error = args.triton.as_ref().is_none_or(|t| t.exit_on_error);
    let remotes = runtime
        .block_on(wirespeed_storage::open_repositories(
            &mut args.models,
            &wirespeed_storage::MirrorOptions {
                cache_dir: args
                    .model_cache_dir
                    .clone()
                    .unwrap_or_else(|| wirespeed_storage::MirrorOptions::default().cache_dir),
                max_model_bytes: args.max_model_bytes,
            },
        ))
        .map_err(anyhow::Error::msg)?;
    if let Some((name, why)) = remotes.failed.first() {
        anyhow::ensure!(!exit_on_error, "model '{name}': {why}");
    }
    if args.ports_from_settings {
        let (http, grpc) = wirespeed_models::mlserver_listen_addresses(first_repository(&args))
            .map_err(|e| anyhow::anyhow!("--ports-from-settings: {e}"))?;
        // A host name (MLServer's `localhost`) listens on its first address.
        let listen = |address: &str| -> anyhow::Result<Listen> {
            use std::net::ToSocketAddrs;
            match address.to_socket_addrs().ok().and_then(|mut a| a.next()) {
                Some(resolved) => Ok(Listen(Some(resolved))),
                None => anyhow::bail!(
                    "--ports-from-settings: settings.json gives '{address}', which is no address here"
                ),
            }
        };
        args.http = listen(&http)?;
        args.grpc = listen(&grpc)?;
    }
    if let Some(name) = args.model_name.take() {
        anyhow::ensure!(
            args.models.len() == 1,
            "--model-name serves one model's folder: give --models once"
        );
        args.models = vec![single_model_repository(&args.models[0], &name)?];
    }
    let mut defaults = ServerConfig::default();
    defaults
        .backends
        .set_auto_complete(!args.disable_auto_complete_config);
    let compute_threads = args
        .compute_threads
        .map_or(defaults.compute_threads, usize::from);
    if args.check {
        let pool = wirespeed_core::CpuPool::new(compute_threads)?;
        // Upstream models are loaded inside a runtime (they start a task).
        let models = runtime
            .block_on(async {
                wirespeed_models::load_repository(&args.models, &defaults.backends, &pool)
            })
            .context("model repository check failed")?;
        wirespeed_models::check_ensembles(&models)
            .map_err(anyhow::Error::msg)
            .context("model repository check failed")?;
        for loaded in models {
            let (name, m) = (&loaded.name, loaded.model.metadata());
            println!(
                "ok  {name} (version {}, {})",
                m.versions.join(", "),
                m.platform
            );
        }
        return Ok(());
    }

    let auth_token = match &args.auth_token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --auth-token-file {}", path.display()))?;
            let token = text.trim().to_owned();
            anyhow::ensure!(
                !token.is_empty(),
                "--auth-token-file {} is empty",
                path.display()
            );
            Some(token)
        }
        None => None,
    };
    let mlserver_models = model_control_mode.is_empty()
        && wirespeed_models::is_mlserver_repository(first_repository(&args));
    let config = ServerConfig {
        response_cache_bytes,
        header_forward,
        server_name: args
            .triton
            .as_ref()
            .map_or_else(|| "wirespeed".to_owned(), |t| t.server_name.clone()),
        exit_on_error,
        repositories: args.models,
        remotes,
        http_addr: args.http.0,
        grpc_addr: args.grpc.0,
        http_uds: args.http_uds,
        grpc_uds: args.grpc_uds,
        tf_grpc_addr: args.tf_grpc,
        tf_http_addr: args.tf_http,
        tf_tensor_content: args.tf_tensor_content,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_grpc_message_bytes: args.max_grpc_message_bytes,
            max_header_bytes: args.max_header_bytes,
            max_headers: args.max_headers,
            max_connections: args.max_connections,
            header_timeout: args.header_timeout,
            body_timeout: args.body_timeout,
            request_timeout: args.request_timeout,
            keep_alive_timeout: args.keep_alive_timeout,
        },
        drain_timeout: args.drain_timeout,
        request_limits: RequestLimits {
            max_elements: args.max_elements,
            max_tensor_bytes: args.max_tensor_bytes,
            max_inputs: args.max_inputs,
            max_string_bytes: args.max_string_bytes,
            max_depth: args.max_depth,
        },
        compute_threads,
        io_threads: args.io_threads.map_or(defaults.io_threads, usize::from),
        auth_token,
        model_control: match model_control_mode.as_str() {
            "explicit" => ModelControl::Explicit {
                startup: args.load_model,
            },
            "poll" => ModelControl::Poll(args.repository_poll_secs),
            "" if mlserver_models => {
                tracing::info!(
                    "MLServer's models: every model loads at start, and the repository API loads \
                     and unloads them (explicit model control with all at start), as MLServer \
                     allows; --model-control-mode none forbids it"
                );
                ModelControl::Explicit {
                    startup: vec!["*".to_owned()],
                }
            }
            _ => ModelControl::None,
        },
        metrics: match args.metrics {
            MetricsFlag::Off => None,
            MetricsFlag::Rest => Some(MetricsConfig {
                addr: None,
                buckets: args.metrics_buckets.0,
            }),
            MetricsFlag::At(addr) => Some(MetricsConfig {
                addr: Some(addr),
                buckets: args.metrics_buckets.0,
            }),
        },
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key }),
        traces: args.otlp_endpoint.clone().map(|endpoint| TracesConfig {
            endpoint,
            sample_ratio: args.trace_sample_ratio,
        }),
        upstream: (!args.upstream.is_empty()).then(|| UpstreamServer {
            urls: args.upstream.clone(),
            models: args.upstream_models.clone(),
        }),
        ..defaults
    };
    runtime.block_on(async {
        let shutdown = shutdown_signal()?;
        let server = Server::bind(&config).await?;
        server.serve(shutdown).await;
        anyhow::Ok(())
    })
}

/// The first of `--models`, for what reads one repository's settings.
fn first_repository(args: &ServeArgs) -> &Path {
    args.models
        .first()
        .map_or(Path::new("models"), PathBuf::as_path)
}

/// Installs the SIGINT and SIGTERM handlers now, so a signal that arrives
/// as soon as the server says it is listening is already handled, and
/// returns a future that resolves on the first of them.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt =
        signal(SignalKind::interrupt()).context("cannot install the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
        // A second signal means: stop now, without draining.
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            tracing::warn!("second signal: exiting without draining");
            std::process::exit(130);
        });
    })
}
