//! `wirespeed tritonserver ARGS`, and the binary run under the name
//! `tritonserver`: Triton 2.51's command line with Triton's meaning, turned
//! into `wirespeed serve`'s flags, so a Helm chart, a KServe
//! ServingRuntime or a manifest that runs `tritonserver ...` runs wirespeed
//! by changing the image. Triton's defaults come with it: every interface,
//! ports 8000, 8001 and 8002, a 30-second exit timeout, server metadata
//! named `triton` (or `--id`).
//!
//! Parsed by hand, not with clap: Triton's parser is GNU `getopt_long`,
//! which takes `--flag value` and `--flag=value` for every option, an
//! unambiguous prefix of a name for the name, and booleans as
//! `true`/`false`/`on`/`off`/`1`/`0` in any case; what it refuses
//! (an unknown option, a bad value) stops the server with the option named,
//! as here. Each flag Triton has is either carried out, accepted with what
//! it does here said in the log at start (the GPU's, the backends'
//! libraries', thread and pool sizes wirespeed sets itself), or refused
//! with the reason, where running on would change what the deployment
//! meant (restricted APIs, SageMaker and Vertex AI endpoints, TLS for gRPC
//! alone).

use std::ffi::OsString;
use std::path::PathBuf;

/// How an option takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// No value (`--disable-auto-complete-config`, `--help`).
    Nothing,
    /// A value: `--name=value` or `--name value`.
    Value,
}

/// Triton 2.51's options (`command_line_parser.cc`), by name.
const OPTIONS: &[(&str, Takes)] = &[
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
const NO_EFFECT: &[(&str, &str)] = &[
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
    ("model-load-thread-count", "models load one after the other"),
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

/// What Triton's command line asks for, as `wirespeed serve` takes it.
#[derive(Debug)]
pub(crate) struct Translated {
    /// `wirespeed serve`'s arguments (without the program's name).
    pub(crate) serve: Vec<OsString>,
    /// The name server metadata answers.
    pub(crate) server_name: String,
    /// `--exit-on-error=false`: a model that fails to load does not stop
    /// the start.
    pub(crate) exit_on_error: bool,
    /// What was accepted with no effect, for the log at start.
    pub(crate) notes: Vec<String>,
}

/// Why Triton's command line could not be taken.
#[derive(Debug)]
pub(crate) struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tritonserver: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Triton's boolean values.
fn boolean(name: &str, value: &str) -> Result<bool, Refused> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(Refused(format!(
            "invalid value for bool option: {value} (--{name} takes true, false, on, off, 1 or 0)"
        ))),
    }
}

fn integer(name: &str, value: &str) -> Result<i64, Refused> {
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
fn options(args: &[OsString]) -> Result<Vec<(&'static str, String)>, Refused> {
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

/// Turns Triton's command line into `wirespeed serve`'s.
pub(crate) fn translate(args: &[OsString]) -> Result<Translated, Refused> {
    let mut repositories: Vec<String> = Vec::new();
    let mut server_name = "triton".to_owned();
    let mut exit_on_error = true;
    let mut auto_complete = true;
    let (mut allow_http, mut allow_grpc, mut allow_metrics) = (true, true, true);
    let mut http_address = "0.0.0.0".to_owned();
    let mut grpc_address = "0.0.0.0".to_owned();
    let mut metrics_address: Option<String> = None;
    let (mut http_port, mut grpc_port, mut metrics_port) = (8000, 8001, 8002);
    let mut control: Option<&'static str> = None;
    let mut poll_secs: Option<i64> = None;
    let mut load_models: Vec<String> = Vec::new();
    let mut exit_timeout: i64 = 30;
    let (mut verbose, mut info, mut warning, mut error) = (0i64, true, true, true);
    let mut log_file: Option<String> = None;
    let mut cache: Vec<String> = Vec::new();
    let mut forward: (Option<String>, Option<String>) = (None, None);
    let mut trace_url: Option<String> = None;
    let mut trace_rate: Option<i64> = None;
    let mut trace_off = false;
    let mut notes = Vec::new();

    for (name, value) in options(args)? {
        match name {
            "help" => {}
            "id" => server_name = value,
            "exit-timeout-secs" => exit_timeout = integer(name, &value)?.max(0),
            "model-store" | "model-repository" => {
                if !repositories.contains(&value) {
                    repositories.push(value);
                }
            }
            "exit-on-error" => exit_on_error = boolean(name, &value)?,
            "disable-auto-complete-config" => auto_complete = false,
            "strict-model-config" => auto_complete = !boolean(name, &value)?,
            "strict-readiness" => {
                if !boolean(name, &value)? {
                    notes.push(
                        "--strict-readiness=false: ready means every model loaded, as with true"
                            .to_owned(),
                    );
                }
            }
            "model-control-mode" => {
                control = Some(match value.to_ascii_lowercase().as_str() {
                    "none" => "none",
                    "poll" => "poll",
                    "explicit" => "explicit",
                    _ => {
                        return Err(Refused(format!(
                    "invalid argument for --model-control-mode: '{value}' (none, poll or explicit)"
                )))
                    }
                })
            }
            "repository-poll-secs" => poll_secs = Some(integer(name, &value)?),
            "load-model" => load_models.push(value),
            "model-config-name" => {
                return Err(Refused(format!(
                    "--model-config-name={value}: configurations other than config.pbtxt \
                     (configs/{value}.pbtxt) are not read here"
                )))
            }
            "model-namespacing" => {
                if boolean(name, &value)? {
                    return Err(Refused(
                        "--model-namespacing=true: models of one name in several repositories \
                         are not served here; give each model a name of its own"
                            .into(),
                    ));
                }
            }
            "allow-http" => allow_http = boolean(name, &value)?,
            "http-address" => http_address = value,
            "http-port" => http_port = integer(name, &value)?,
            "http-header-forward-pattern" => forward.0 = Some(value),
            "http-restricted-api" | "grpc-restricted-protocol" => {
                return Err(Refused(format!(
                    "--{name}={value}: restricting endpoints to requests with a header is not \
                     supported; every request may use every endpoint (--auth-token-file asks \
                     every request for a bearer token)"
                )))
            }
            "allow-grpc" => allow_grpc = boolean(name, &value)?,
            "grpc-address" => grpc_address = value,
            "grpc-port" => grpc_port = integer(name, &value)?,
            "grpc-header-forward-pattern" => forward.1 = Some(value),
            "grpc-use-ssl" | "grpc-use-ssl-mutual" => {
                if boolean(name, &value)? {
                    return Err(Refused(format!(
                        "--{name}=true: TLS for gRPC alone is not supported; wirespeed serve \
                         --tls-cert and --tls-key serve TLS on every listener"
                    )));
                }
            }
            "grpc-server-cert" | "grpc-server-key" | "grpc-root-cert" => notes.push(format!(
                "--{name}: no effect without --grpc-use-ssl=true, as in Triton"
            )),
            "log-verbose" => {
                verbose = match value.to_ascii_lowercase().as_str() {
                    "true" => 1,
                    "false" => 0,
                    _ => integer(name, &value)?,
                }
            }
            "log-info" => info = boolean(name, &value)?,
            "log-warning" => warning = boolean(name, &value)?,
            "log-error" => error = boolean(name, &value)?,
            "log-format" => {
                if value != "default" && value != "ISO8601" {
                    return Err(Refused("invalid argument for --log-format".into()));
                }
                notes.push(format!(
                    "--log-format={value}: lines are wirespeed's (RFC 3339 times)"
                ));
            }
            "log-file" => log_file = Some(value),
            "allow-sagemaker" | "allow-vertex-ai" => {
                if boolean(name, &value)? {
                    return Err(Refused(format!(
                        "--{name}=true: {} endpoint is not served",
                        if name == "allow-sagemaker" {
                            "SageMaker's"
                        } else {
                            "Vertex AI's"
                        }
                    )));
                }
            }
            "allow-metrics" => allow_metrics = boolean(name, &value)?,
            "metrics-address" => metrics_address = Some(value),
            "metrics-port" => metrics_port = integer(name, &value)?,
            "trace-config" => {
                let (mode, setting) = match value.split_once(',') {
                    Some((mode, setting)) if !mode.contains('=') => (mode, setting),
                    _ => ("", value.as_str()),
                };
                match (mode, setting.split_once('=')) {
                    ("opentelemetry", Some(("url", url))) => trace_url = Some(url.to_owned()),
                    ("" | "opentelemetry", Some(("rate", rate))) => {
                        trace_rate = Some(integer(name, rate)?)
                    }
                    ("", Some(("level", level))) => trace_off = level.eq_ignore_ascii_case("OFF"),
                    ("", Some(("mode", _))) => {}
                    _ => notes.push(format!(
                        "--trace-config={value}: traces go to an OpenTelemetry collector \
                         (opentelemetry,url=...), sampled by rate"
                    )),
                }
            }
            "trace-level" => trace_off = value.eq_ignore_ascii_case("OFF"),
            "trace-rate" => trace_rate = Some(integer(name, &value)?),
            "cache-config" => cache.push(value),
            "response-cache-byte-size" => cache.push(format!("local,size={value}")),
            "rate-limit" => match value.to_ascii_lowercase().as_str() {
                "off" => {}
                "execution_count" => notes.push(
                    "--rate-limit=execution_count: there is no rate limiter; a request runs \
                     as soon as an instance of its model is free"
                        .into(),
                ),
                _ => return Err(Refused("invalid argument for --rate-limit".into())),
            },
            other => {
                if let Some((_, why)) = NO_EFFECT.iter().find(|(n, _)| *n == other) {
                    notes.push(format!("--{other}: no effect ({why})"));
                }
            }
        }
    }

    if repositories.is_empty() {
        return Err(Refused(
            "--model-repository must be specified (Triton's error: \
             at least one model repository is needed)"
                .into(),
        ));
    }
    if load_models.iter().any(|m| m == "*") && load_models.len() > 1 {
        return Err(Refused(
            "Wildcard model name '*' must be the ONLY startup model if specified at all.".into(),
        ));
    }
    let listen = |allowed: bool, address: &str, port: i64| -> Result<String, Refused> {
        if !allowed {
            return Ok("off".into());
        }
        let port =
            u16::try_from(port).map_err(|_| Refused(format!("port {port} is out of range")))?;
        Ok(match address.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{address}]:{port}"),
            Err(_) => format!("{address}:{port}"),
        })
    };
    let http = listen(allow_http, &http_address, http_port)?;
    let grpc = listen(allow_grpc, &grpc_address, grpc_port)?;
    let metrics_address = metrics_address.unwrap_or_else(|| http_address.clone());
    let metrics = listen(allow_metrics, &metrics_address, metrics_port)?;
    for (a, b, what) in [
        (&http, &grpc, "HTTP and GRPC"),
        (&http, &metrics, "HTTP and metrics"),
        (&grpc, &metrics, "GRPC and metrics"),
    ] {
        if a == b && a != "off" {
            return Err(Refused(format!(
                "The server cannot listen to {what} requests at the same address and port {a}"
            )));
        }
    }

    let mut serve: Vec<OsString> = Vec::new();
    let mut flag = |name: &str, value: String| {
        serve.push(format!("--{name}").into());
        serve.push(value.into());
    };
    for repository in repositories {
        flag("models", repository);
    }
    flag("http", http);
    flag("grpc", grpc);
    flag("metrics", metrics);
    flag(
        "log-level",
        if verbose > 0 {
            "debug"
        } else if info {
            "info"
        } else if warning {
            "warn"
        } else if error {
            "error"
        } else {
            "off"
        }
        .into(),
    );
    if let Some(file) = log_file {
        flag("log-file", file);
    }
    // Triton waits up to 30 seconds for in-flight requests at exit.
    flag(
        "drain-timeout",
        if exit_timeout == 0 {
            "0.001".into()
        } else {
            exit_timeout.to_string()
        },
    );
    let control = control.unwrap_or("none");
    flag("model-control-mode", control.into());
    if let Some(secs) = poll_secs {
        if control == "poll" {
            flag("repository-poll-secs", secs.max(1).to_string());
        }
    }
    if control == "explicit" {
        for model in load_models {
            flag("load-model", model);
        }
    } else if !load_models.is_empty() {
        notes.push(format!(
            "--load-model: no effect in model control mode {control} (every model loads), as in Triton"
        ));
    }
    for value in cache {
        flag("cache-config", value);
    }
    if let Some(pattern) = forward.0 {
        flag("http-header-forward-pattern", pattern);
    }
    if let Some(pattern) = forward.1 {
        flag("grpc-header-forward-pattern", pattern);
    }
    if let (Some(url), false) = (trace_url, trace_off) {
        flag("otlp-endpoint", url);
        // Triton samples one request in `rate` (1000 by default).
        let rate = trace_rate.unwrap_or(1000).max(1);
        flag("trace-sample-ratio", (1.0 / rate as f64).to_string());
    }
    if !auto_complete {
        serve.push("--disable-auto-complete-config".into());
    }
    Ok(Translated {
        serve,
        server_name,
        exit_on_error,
        notes,
    })
}

/// Whether the program was run under the name `tritonserver` (a link to
/// the binary, as the container image has).
pub(crate) fn invoked_as_tritonserver(program: Option<&OsString>) -> bool {
    program
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n == "tritonserver"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn serve(line: &str) -> Vec<String> {
        translate(&args(line))
            .unwrap()
            .serve
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    fn has(serve: &[String], flag: &str, value: &str) -> bool {
        serve
            .windows(2)
            .any(|w| w[0] == format!("--{flag}") && w[1] == value)
    }

    #[test]
    fn kserves_serving_runtime_runs_as_triton_would() {
        let s = serve(
            "--model-store=/mnt/models --grpc-port=9000 --http-port=8080 --allow-grpc=true --allow-http=true",
        );
        assert!(has(&s, "models", "/mnt/models"));
        assert!(has(&s, "http", "0.0.0.0:8080"));
        assert!(has(&s, "grpc", "0.0.0.0:9000"));
        assert!(has(&s, "metrics", "0.0.0.0:8002"));
        assert!(has(&s, "model-control-mode", "none"));
        assert!(has(&s, "drain-timeout", "30"));
    }

    #[test]
    fn values_booleans_and_prefixes_as_getopt_takes_them() {
        let t = translate(&args(
            "--model-repository /a --model-repository=/b --model-control-mode=POLL \
             --repository-poll-secs 5 --allow-metrics=OFF --log-verbose=1 --exit-on-error=false \
             --strict-model-config=true --id=edge --model-repo=/c",
        ))
        .unwrap();
        let s: Vec<String> = t
            .serve
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(has(&s, "models", "/a") && has(&s, "models", "/b") && has(&s, "models", "/c"));
        assert!(has(&s, "model-control-mode", "poll"));
        assert!(has(&s, "repository-poll-secs", "5"));
        assert!(has(&s, "metrics", "off"));
        assert!(has(&s, "log-level", "debug"));
        assert!(s.contains(&"--disable-auto-complete-config".to_owned()));
        assert_eq!(t.server_name, "edge");
        assert!(!t.exit_on_error);
    }

    #[test]
    fn what_triton_refuses_is_refused_and_what_has_no_effect_is_said() {
        for (line, says) in [
            (
                "--model-repository=/m --bogus=1",
                "unrecognized option '--bogus'",
            ),
            ("--model-repository=/m --grpc", "ambiguous"),
            (
                "--model-repository=/m --allow-http=maybe",
                "invalid value for bool option: maybe",
            ),
            ("--model-repository=/m --http-port", "requires an argument"),
            (
                "--model-repository=/m --model-control-mode=sometimes",
                "--model-control-mode",
            ),
            ("--allow-http=true", "--model-repository must be specified"),
            (
                "--model-repository=/m --load-model=* --load-model=a",
                "Wildcard",
            ),
            (
                "--model-repository=/m --grpc-use-ssl=true",
                "TLS for gRPC alone",
            ),
            (
                "--model-repository=/m --http-restricted-api=model-repository,k=v",
                "restricting",
            ),
            (
                "--model-repository=/m --http-port=8001",
                "at the same address and port",
            ),
            (
                "--model-repository=/m --disable-auto-complete-config=1",
                "doesn't allow an argument",
            ),
        ] {
            let e = translate(&args(line)).unwrap_err().to_string();
            assert!(e.contains(says), "{line}: {e}");
        }
        let t = translate(&args(
            "--model-repository=/m --backend-directory=/opt/b --allow-gpu-metrics=false \
             --backend-config=python,shm-default-byte-size=1048576",
        ))
        .unwrap();
        assert_eq!(t.notes.len(), 3, "{:?}", t.notes);
        assert!(t.notes[0].contains("backends are built in"));
    }

    #[test]
    fn opentelemetry_traces_map_to_the_otlp_exporter() {
        let s = serve(
            "--model-repository=/m --trace-config=opentelemetry,url=http://collector:4318/v1/traces \
             --trace-config=rate=10",
        );
        assert!(has(&s, "otlp-endpoint", "http://collector:4318/v1/traces"));
        assert!(has(&s, "trace-sample-ratio", "0.1"));
    }

    #[test]
    fn the_program_name_picks_the_command_line() {
        assert!(invoked_as_tritonserver(Some(
            &"/opt/tritonserver/bin/tritonserver".into()
        )));
        assert!(!invoked_as_tritonserver(Some(&"wirespeed".into())));
    }
}
