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
//! alone). The options and their parsing are `options.rs`.

mod options;

use std::ffi::OsString;
use std::path::PathBuf;

use options::{boolean, integer, options, NO_EFFECT};
pub(crate) use options::{usage, wants_help, Refused};

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
