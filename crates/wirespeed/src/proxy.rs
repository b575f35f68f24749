//! `wirespeed proxy`: an HTTP/JSON face on a gRPC service, its
//! `google.api.http` routes transcoded to gRPC calls (`docs/transcoding.md`).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tracing_subscriber::EnvFilter;
use wirespeed_server::{Limits, PrintOptions, Server, ServerConfig, TranscodeConfig};

use crate::flags::seconds;

#[derive(Args)]
pub(crate) struct ProxyArgs {
    /// The services' FileDescriptorSet, from `protoc --include_imports
    /// --descriptor_set_out=api.pb`; without it, the upstream is asked by
    /// gRPC server reflection at start.
    #[arg(long, env = "WIRESPEED_DESCRIPTOR_SET")]
    descriptor_set: Option<PathBuf>,

    /// The gRPC server: grpc://HOST:PORT, grpcs://HOST:PORT or
    /// grpc+unix:///PATH; again for replicas.
    #[arg(
        long,
        env = "WIRESPEED_UPSTREAM",
        value_delimiter = ',',
        required_unless_present = "config"
    )]
    upstream: Vec<String>,

    /// Several upstreams and their services from a TOML file, one
    /// [[service]] table each (docs/transcoding.md), instead of
    /// --descriptor-set, --upstream and the flags below.
    #[arg(long, env = "WIRESPEED_TRANSCODE_CONFIG", conflicts_with_all = ["upstream", "descriptor_set"])]
    config: Option<PathBuf>,

    /// The TCP address the REST/JSON face listens on.
    #[arg(long, env = "WIRESPEED_HTTP", default_value = "127.0.0.1:8080")]
    http: SocketAddr,

    /// The services to serve (package.Service); all of the set's when not given.
    #[arg(long, env = "WIRESPEED_SERVICE", value_delimiter = ',')]
    service: Vec<String>,

    /// Skip query parameters that name no field, instead of refusing the request.
    #[arg(long)]
    ignore_unknown_query_parameters: bool,

    /// Skip body fields the message does not have, instead of refusing the request.
    #[arg(long)]
    ignore_unknown_fields: bool,

    /// Request headers passed on as gRPC metadata: a,b,c.
    #[arg(long, value_delimiter = ',')]
    forward_header: Vec<String>,

    /// Print fields that hold their default value (empty lists and maps
    /// included) in answers.
    #[arg(long)]
    emit_defaults: bool,

    /// Print the proto field names (`page_size`) in answers, not the JSON
    /// names (`pageSize`).
    #[arg(long)]
    proto_field_names: bool,

    /// Print enums as numbers in answers.
    #[arg(long)]
    enums_as_ints: bool,

    /// Without --descriptor-set: ask the upstream's reflection again every
    /// SECS seconds, and rebuild the routes when its services changed (0:
    /// ask once, at start).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    reflect_every: f64,

    /// Seconds a call may take (a client's `grpc-timeout` brings it
    /// forward), and a stream may go quiet between messages; also the
    /// time to receive a whole request body.
    #[arg(long, env = "WIRESPEED_REQUEST_TIMEOUT", default_value = "60", value_parser = seconds)]
    request_timeout: Duration,

    /// The largest request body, in bytes (a client stream's whole body).
    #[arg(long, env = "WIRESPEED_MAX_BODY_BYTES", default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,

    /// The log filter.
    #[arg(long, env = "WIRESPEED_LOG_LEVEL", default_value = "info")]
    log_level: String,
}

/// `wirespeed proxy`: a server with no models, no gRPC listener and no
/// metrics listener, whose REST port transcodes to the upstream.
pub(crate) fn proxy(args: ProxyArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("invalid --log-level '{}'", args.log_level))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = ServerConfig {
        // No model repository: the proxy serves no models.
        repositories: vec![PathBuf::new()],
        http_addr: Some(args.http),
        grpc_addr: None,
        metrics: None,
        limits: Limits {
            request_timeout: args.request_timeout,
            max_body_bytes: args.max_body_bytes,
            ..Limits::default()
        },
        transcode: match &args.config {
            Some(path) => TranscodeConfig::from_file(path).map_err(anyhow::Error::msg)?,
            None => vec![TranscodeConfig {
                descriptor_set: args.descriptor_set,
                upstream: args.upstream,
                services: args.service,
                ignore_unknown_query_parameters: args.ignore_unknown_query_parameters,
                ignore_unknown_fields: args.ignore_unknown_fields,
                forward_headers: args
                    .forward_header
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                print: PrintOptions {
                    emit_defaults: args.emit_defaults,
                    proto_field_names: args.proto_field_names,
                    enums_as_ints: args.enums_as_ints,
                    ..PrintOptions::default()
                },
                reflect_every: (args.reflect_every > 0.0 && args.reflect_every.is_finite())
                    .then(|| Duration::from_secs_f64(args.reflect_every)),
            }],
        },
        ..ServerConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = crate::serve::shutdown_signal()?;
        let server = Server::bind(&config).await?;
        server.serve(shutdown).await;
        anyhow::Ok(())
    })
}
