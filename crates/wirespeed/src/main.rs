//! The `wirespeed` command: flags in, the server library called.

mod predict;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use wirespeed_server::{ModelRepository, Server, ServerConfig};

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
    Serve(ServeArgs),
    /// Predict rows from a CSV file with a tree model, offline, and print one line per row.
    Predict(predict::PredictArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// The model repository: one folder per model, each with a config.toml.
    #[arg(long, env = "WIRESPEED_MODELS", default_value = "models")]
    models: PathBuf,

    /// The TCP address the REST API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_HTTP", default_value = "127.0.0.1:8000")]
    http: Listen,

    /// The TCP address the gRPC API listens on, or `off`. Port 0 picks a free port.
    #[arg(long, env = "WIRESPEED_GRPC", default_value = "127.0.0.1:8001")]
    grpc: Listen,

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

    /// The largest request body (REST) or message (gRPC) accepted, in bytes.
    #[arg(long, env = "WIRESPEED_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    max_body_bytes: usize,

    /// Validate the model repository, print what it serves, and exit.
    #[arg(long, env = "WIRESPEED_CHECK")]
    check: bool,
}

/// A TCP address to listen on, or `off`.
#[derive(Clone, Copy)]
struct Listen(Option<SocketAddr>);

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen(None));
        }
        s.parse()
            .map(|addr| Listen(Some(addr)))
            .map_err(|_| format!("'{s}' is not an address like 127.0.0.1:8000, nor 'off'"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Predict(args) => predict::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("invalid --log-level '{}'", args.log_level))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    if args.check {
        let repository =
            ModelRepository::load(&args.models).context("model repository check failed")?;
        for (name, model) in repository.models() {
            let m = model.metadata();
            println!(
                "ok  {name} (version {}, {})",
                m.versions.join(", "),
                m.platform
            );
        }
        return Ok(());
    }

    let config = ServerConfig {
        models_dir: args.models,
        http_addr: args.http.0,
        grpc_addr: args.grpc.0,
        http_uds: args.http_uds,
        grpc_uds: args.grpc_uds,
        max_body_bytes: args.max_body_bytes,
        ..ServerConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_signal()?;
        let server = Server::bind(&config).await?;
        server.serve(shutdown).await;
        anyhow::Ok(())
    })
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
    })
}
