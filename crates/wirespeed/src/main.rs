//! The `wirespeed` command: flags in, the server library called.

mod flags;
mod health;
mod logs;
mod malloc;
mod predict;
#[cfg(feature = "proxy")]
mod proxy;
mod serve;
mod tritonserver;

use std::process::ExitCode;

/// The system allocator, with the large tensor buffers that Python workers
/// read in a shared heap (`wirespeed_core::shared_heap`).
#[global_allocator]
static ALLOCATOR: wirespeed_core::shared_heap::Allocator = wirespeed_core::shared_heap::Allocator;

use clap::{Parser, Subcommand};

use serve::{ServeArgs, TritonFace};

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

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let program = argv.next();
    if tritonserver::invoked_as_tritonserver(program.as_ref()) {
        return finish(tritonserver(argv.collect()));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
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
    serve::run(*serve_args)
}
