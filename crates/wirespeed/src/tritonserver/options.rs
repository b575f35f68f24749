//! Triton 2.51's options (`command_line_parser.cc`) as its GNU
//! `getopt_long` reads them: `--flag value` or `--flag=value`, an
//! unambiguous prefix of a name for the name, booleans as
//! `true`/`false`/`on`/`off`/`1`/`0` in any case; the options accepted with
//! no effect here, and why; and Triton's usage.

use std::ffi::OsString;

/// How an option takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    /// No value (`--disable-auto-complete-config`, `--help`).
    Nothing,
    /// A value: `--name=value` or `--name value`.
    Value,
}

/// Triton 2.51's options (`command_line_parser.cc`), by name.
pub(super) const OPTIONS: &[(&str, Takes)] = &[
    ("help", Takes::Nothing),
    ("id", Takes::Value),
    ("exit-timeout-secs", Takes::Value),
    ("model-store", Takes::Value),
    ("model-repository", Takes::Value),
    ("exit-on-error", Takes::Value),
    ("disable-auto-complete-config", Takes::Nothing),
    ("strict-readiness", Takes::Value),
    ("model-control-mode", Takes::Value),
    ("repository-poll-secs", Takes::Value),
    ("load-model", Takes::Value),
    ("model-config-name", Takes::Value),
    ("model-load-thread-count", Takes::Value),
    ("model-load-retry-count", Takes::Value),
    ("model-namespacing", Takes::Value),
    ("enable-peer-access", Takes::Value),
    ("allow-http", Takes::Value),
    ("http-address", Takes::Value),
    ("http-port", Takes::Value),
    ("reuse-http-port", Takes::Value),
    ("http-header-forward-pattern", Takes::Value),
    ("http-thread-count", Takes::Value),
    ("http-restricted-api", Takes::Value),
    ("allow-grpc", Takes::Value),
    ("grpc-address", Takes::Value),
    ("grpc-port", Takes::Value),
    ("reuse-grpc-port", Takes::Value),
    ("grpc-header-forward-pattern", Takes::Value),
    ("grpc-infer-thread-count", Takes::Value),
    ("grpc-infer-allocation-pool-size", Takes::Value),
    ("grpc-max-response-pool-size", Takes::Value),
    ("grpc-use-ssl", Takes::Value),
    ("grpc-use-ssl-mutual", Takes::Value),
    ("grpc-server-cert", Takes::Value),
    ("grpc-server-key", Takes::Value),
    ("grpc-root-cert", Takes::Value),
    ("grpc-infer-response-compression-level", Takes::Value),
    ("grpc-keepalive-time", Takes::Value),
    ("grpc-keepalive-timeout", Takes::Value),
    ("grpc-keepalive-permit-without-calls", Takes::Value),
    ("grpc-http2-max-pings-without-data", Takes::Value),
    (
        "grpc-http2-min-recv-ping-interval-without-data",
        Takes::Value,
    ),
    ("grpc-http2-max-ping-strikes", Takes::Value),
    ("grpc-max-connection-age", Takes::Value),
    ("grpc-max-connection-age-grace", Takes::Value),
    ("grpc-restricted-protocol", Takes::Value),
    ("log-verbose", Takes::Value),
    ("log-info", Takes::Value),
    ("log-warning", Takes::Value),
    ("log-error", Takes::Value),
    ("log-format", Takes::Value),
    ("log-file", Takes::Value),
    ("allow-sagemaker", Takes::Value),
    ("sagemaker-port", Takes::Value),
    ("sagemaker-safe-port-range", Takes::Value),
    ("sagemaker-thread-count", Takes::Value),
    ("allow-vertex-ai", Takes::Value),
    ("vertex-ai-port", Takes::Value),
    ("vertex-ai-thread-count", Takes::Value),
    ("vertex-ai-default-model", Takes::Value),
    ("allow-metrics", Takes::Value),
    ("allow-gpu-metrics", Takes::Value),
    ("allow-cpu-metrics", Takes::Value),
    ("metrics-address", Takes::Value),
    ("metrics-port", Takes::Value),
    ("metrics-interval-ms", Takes::Value),
    ("metrics-config", Takes::Value),
    ("trace-config", Takes::Value),
    ("trace-file", Takes::Value),
    ("trace-level", Takes::Value),
    ("trace-rate", Takes::Value),
    ("trace-count", Takes::Value),
    ("trace-log-frequency", Takes::Value),
    ("cache-config", Takes::Value),
    ("cache-directory", Takes::Value),
    ("response-cache-byte-size", Takes::Value),
    ("rate-limit", Takes::Value),
    ("rate-limit-resource", Takes::Value),
    ("pinned-memory-pool-byte-size", Takes::Value),
    ("cuda-memory-pool-byte-size", Takes::Value),
    ("cuda-virtual-address-size", Takes::Value),
    ("min-supported-compute-capability", Takes::Value),
    ("buffer-manager-thread-count", Takes::Value),
    ("host-policy", Takes::Value),
    ("model-load-gpu-limit", Takes::Value),
    ("backend-directory", Takes::Value),
    ("backend-config", Takes::Value),
    ("repoagent-directory", Takes::Value),
    ("strict-model-config", Takes::Value),
];

/// Options accepted with no effect here, and why.
pub(super) const NO_EFFECT: &[(&str, &str)] = &[
    ("backend-directory", "backends are built in"),
    (
        "backend-config",
        "backends are built in and take no settings",
    ),
    ("repoagent-directory", "there are no repository agents"),
    ("cache-directory", "the response cache is built in"),
    ("allow-gpu-metrics", "there is no GPU"),
    (
        "allow-cpu-metrics",
        "the process's CPU and memory are always on /metrics",
    ),
    ("metrics-interval-ms", "metrics are read when scraped"),
    (
        "metrics-config",
        "the latency histograms' buckets are --metrics-buckets'",
    ),
    ("pinned-memory-pool-byte-size", "there is no GPU"),
    ("cuda-memory-pool-byte-size", "there is no GPU"),
    ("cuda-virtual-address-size", "there is no GPU"),
    ("min-supported-compute-capability", "there is no GPU"),
    ("model-load-gpu-limit", "there is no GPU"),
    ("enable-peer-access", "there is no GPU"),
    ("host-policy", "threads are not pinned to NUMA nodes"),
    (
        "buffer-manager-thread-count",
        "tensors are copied on the compute threads",
    ),
    (
        "model-load-thread-count",
        "models load four at a time at start, at most one per core",
    ),
    (
        "model-load-retry-count",
        "a model that fails to load is not tried again",
    ),
    (
        "http-thread-count",
        "the I/O threads serve every protocol (--io-threads)",
    ),
    (
        "grpc-infer-thread-count",
        "the I/O threads serve every protocol (--io-threads)",
    ),
    ("grpc-infer-allocation-pool-size", "requests are not pooled"),
    ("grpc-max-response-pool-size", "responses are not pooled"),
    (
        "grpc-infer-response-compression-level",
        "answers are compressed as the client's grpc-accept-encoding asks",
    ),
    ("grpc-keepalive-time", "the server sends no keepalive pings"),
    (
        "grpc-keepalive-timeout",
        "the server sends no keepalive pings",
    ),
    (
        "grpc-keepalive-permit-without-calls",
        "a client's pings are always answered",
    ),
    (
        "grpc-http2-max-pings-without-data",
        "a client's pings are always answered",
    ),
    (
        "grpc-http2-min-recv-ping-interval-without-data",
        "a client's pings are always answered",
    ),
    (
        "grpc-http2-max-ping-strikes",
        "a client's pings are always answered",
    ),
    (
        "grpc-max-connection-age",
        "connections are kept while used (--keep-alive-timeout)",
    ),
    (
        "grpc-max-connection-age-grace",
        "connections are kept while used (--keep-alive-timeout)",
    ),
    ("reuse-http-port", "the port is bound by this process alone"),
    ("reuse-grpc-port", "the port is bound by this process alone"),
    ("rate-limit-resource", "there is no rate limiter"),
    (
        "trace-file",
        "traces go to an OpenTelemetry collector (--trace-config opentelemetry,url=...)",
    ),
    (
        "trace-log-frequency",
        "traces go to an OpenTelemetry collector",
    ),
    ("trace-count", "traces are sampled by rate"),
    ("sagemaker-port", "SageMaker's endpoint is not served"),
    (
        "sagemaker-safe-port-range",
        "SageMaker's endpoint is not served",
    ),
    (
        "sagemaker-thread-count",
        "SageMaker's endpoint is not served",
    ),
    ("vertex-ai-port", "Vertex AI's endpoint is not served"),
    (
        "vertex-ai-thread-count",
        "Vertex AI's endpoint is not served",
    ),
    (
        "vertex-ai-default-model",
        "Vertex AI's endpoint is not served",
    ),
];

/// Why Triton's command line could not be taken.
#[derive(Debug)]
pub(crate) struct Refused(pub(super) String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tritonserver: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Triton's boolean values.
pub(super) fn boolean(name: &str, value: &str) -> Result<bool, Refused> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(Refused(format!(
            "invalid value for bool option: {value} (--{name} takes true, false, on, off, 1 or 0)"
        ))),
    }
}

pub(super) fn integer(name: &str, value: &str) -> Result<i64, Refused> {
    value.trim().parse().map_err(|_| {
        Refused(format!(
            "Invalid option value. Got {value} (--{name} takes a whole number)"
        ))
    })
}

/// The option `given` names: itself, or the one option it is a prefix of,
/// as `getopt_long` finds it.
fn option(given: &str) -> Result<(&'static str, Takes), Refused> {
    if let Some(&(name, takes)) = OPTIONS.iter().find(|(name, _)| *name == given) {
        return Ok((name, takes));
    }
    let matches: Vec<_> = OPTIONS
        .iter()
        .filter(|(name, _)| !given.is_empty() && name.starts_with(given))
        .collect();
    match matches.as_slice() {
        [&(name, takes)] => Ok((name, takes)),
        [] => Err(Refused(format!(
            "unrecognized option '--{given}' (wirespeed tritonserver --help lists Triton's options)"
        ))),
        several => Err(Refused(format!(
            "option '--{given}' is ambiguous; possibilities: {}",
            several
                .iter()
                .map(|(n, _)| format!("'--{n}'"))
                .collect::<Vec<_>>()
                .join(" ")
        ))),
    }
}

/// Triton's command line, its options in order with their values.
pub(super) fn options(args: &[OsString]) -> Result<Vec<(&'static str, String)>, Refused> {
    let mut parsed = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .to_str()
            .ok_or_else(|| Refused(format!("{arg:?} is not text")))?;
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(Refused(format!(
                "unexpected argument '{arg}': Triton's options are --name=value"
            )));
        };
        let (given, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag, None),
        };
        let (name, takes) = option(given)?;
        let value = match (takes, inline) {
            (Takes::Nothing, None) => String::new(),
            (Takes::Nothing, Some(_)) => {
                return Err(Refused(format!(
                    "option '--{name}' doesn't allow an argument"
                )))
            }
            (Takes::Value, Some(value)) => value,
            (Takes::Value, None) => args
                .next()
                .and_then(|v| v.to_str())
                .map(str::to_owned)
                .ok_or_else(|| Refused(format!("option '--{name}' requires an argument")))?,
        };
        parsed.push((name, value));
    }
    Ok(parsed)
}

/// Triton's usage, for `--help`.
pub(crate) fn usage() -> String {
    let mut text = String::from(
        "Usage: tritonserver [options]\n\nTriton Inference Server 2.51's options, served by \
         wirespeed (docs/triton.md says what each does here):\n",
    );
    for (name, takes) in OPTIONS {
        let value = if *takes == Takes::Value {
            "=<value>"
        } else {
            ""
        };
        let note = NO_EFFECT
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| format!("  (no effect: {why})"))
            .unwrap_or_default();
        text.push_str(&format!("  --{name}{value}{note}\n"));
    }
    text
}

/// Whether Triton's `--help` was asked for.
pub(crate) fn wants_help(args: &[OsString]) -> bool {
    args.iter().any(|a| a == "--help" || a == "-h")
}
