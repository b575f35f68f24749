//! `wirespeed serve`: the flags checked and turned into the server
//! library's [`ServerConfig`], repositories in object storage copied, then
//! [`Server::bind`] and [`Server::serve`] until a signal.

mod args;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::flags::{cache_size, Listen, MetricsFlag};
use crate::{logs, malloc};
pub(crate) use args::{ServeArgs, TritonFace};
use wirespeed_server::{
    HeaderForward, Limits, MetricsConfig, ModelControl, RequestLimits, Server, ServerConfig,
    TlsFiles, TracesConfig, UpstreamServer,
};

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

/// Serves the repositories `args` name until SIGINT or SIGTERM.
pub(crate) fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    logs::init(&args)?;
    if let Some(triton) = &args.triton {
        tracing::info!("serving Triton's command line (wirespeed tritonserver)");
        for note in &triton.notes {
            tracing::info!("{note}");
        }
    }
    // While this is still the only thread: the malloc arenas and their
    // thresholds, then the I/O threads, first of all, so that each takes
    // an arena of its own (`malloc.rs`, `wirespeed_server::IoThreads`).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let io_threads = args.io_threads.map_or(cores, usize::from).max(1);
    malloc::configure(malloc::arenas(io_threads, cores));
    let reserved = wirespeed_server::IoThreads::reserve(io_threads);

    let model_control_mode = args.model_control_mode.clone().unwrap_or_default();
    check_load_model(&args, &model_control_mode)?;
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
        ports_from_settings(&mut args)?;
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
        return check(&args.models, &defaults, compute_threads, &runtime);
    }

    let auth_token = read_auth_token(args.auth_token_file.as_deref())?;
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
        io_threads,
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
        let server = Server::bind(&config).await?.with_io_threads(reserved);
        server.serve(shutdown).await;
        anyhow::Ok(())
    })
}

/// `--load-model` only means something in explicit model control.
fn check_load_model(args: &ServeArgs, model_control_mode: &str) -> anyhow::Result<()> {
    if !args.load_model.is_empty() && model_control_mode != "explicit" {
        anyhow::bail!(
            "--load-model names the models to load at start in explicit model control: add \
             --model-control-mode explicit (in mode {} every model loads at start)",
            if model_control_mode.is_empty() {
                "none"
            } else {
                model_control_mode
            }
        );
    }
    Ok(())
}

/// `--ports-from-settings`: listen where MLServer's settings.json says.
fn ports_from_settings(args: &mut ServeArgs) -> anyhow::Result<()> {
    let (http, grpc) = wirespeed_models::mlserver_listen_addresses(first_repository(args))
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
    Ok(())
}

/// `--check`: loads and checks every model, says so, and serves nothing.
fn check(
    models: &[PathBuf],
    defaults: &ServerConfig,
    compute_threads: usize,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    let pool = wirespeed_core::CpuPool::new(compute_threads)?;
    // Upstream models are loaded inside a runtime (they start a task).
    let models = runtime
        .block_on(async { wirespeed_models::load_repository(models, &defaults.backends, &pool) })
        .context("model repository check failed")?;
    wirespeed_models::check_composites(&models)
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
    Ok(())
}

/// The token of `--auth-token-file`, trimmed.
fn read_auth_token(path: Option<&Path>) -> anyhow::Result<Option<String>> {
    Ok(match path {
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
pub(crate) fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
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
