//! The HTTP/JSON face of a user's gRPC services (`wirespeed proxy`, or
//! `serve` with a transcoding config): a REST request that names none of
//! wirespeed's own endpoints is looked up in the services' routes
//! (`wirespeed_transcode::Routes`), its JSON body is encoded as the
//! method's request while it arrives, path variables and query
//! parameters are appended, and the call goes to the upstream through
//! the same client pool as upstream models (`wirespeed_upstream`). The
//! answer's message is printed as JSON straight from its bytes (or just
//! its `response_body` field).
//!
//! Streaming methods (`streaming.rs`): a client stream's body (a JSON
//! array of messages, or newline-delimited ones) is sent message by
//! message as it is read; a server stream's answers are printed as they
//! come, as a JSON array, NDJSON or server-sent events by `Accept`.
//!
//! Errors: a route or body the services do not take is a 4xx with
//! `google.rpc.Status` JSON (`code`, `message`, `details`); the
//! upstream's gRPC status becomes the HTTP status by `google.rpc.Code`'s
//! table, its `grpc-status-details-bin` the `details`. A `grpc-timeout`
//! request header (gRPC's format: `5S`, `200m`) becomes the call's
//! deadline. Metadata: request headers named in the config, and any
//! `Grpc-Metadata-<key>` header, go on as gRPC metadata; the answer's
//! metadata comes back as headers of the same names (configured ones) or
//! `Grpc-Metadata-<key>`, and a unary answer's trailers as
//! `Grpc-Trailer-<key>`.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, ALLOW, CACHE_CONTROL, CONTENT_TYPE,
};
use hyper::{Request, Response, StatusCode};
use prost_reflect::DescriptorPool;
use serde_json::json;
use wirespeed_transcode::{
    bound_fields, field_to_json, proto_to_json, status_json, with_rpc_types, BodyTarget,
    EncodeOptions, JsonToProto, NotFound, PrintOptions, Routes, StreamFormat,
};
use wirespeed_upstream::{
    Address, CallBody, CallError, Chunks, Probe, Upstream, UpstreamError, UpstreamOptions,
};

mod reflection;
mod streaming;

use crate::protocols::http::body::BodyReader;
use crate::protocols::http::response::{self, Body};
use crate::protocols::{Answering, Fallback, MessageLimits};

/// What `wirespeed proxy` (or a server's transcoding section) serves.
#[derive(Debug, Clone)]
pub struct TranscodeConfig {
    /// A `FileDescriptorSet` (`protoc --include_imports
    /// --descriptor_set_out`) with the services and their
    /// `google.api.http` rules; `None` to ask the upstream by gRPC server
    /// reflection when the server starts.
    pub descriptor_set: Option<PathBuf>,
    /// The upstream's URLs: `grpc://host:port`, `grpcs://...`,
    /// `grpc+unix:///path`; several for replicas.
    pub upstream: Vec<String>,
    /// The services to serve; every service of the set when empty.
    pub services: Vec<String>,
    /// Query parameters that name no field are skipped, not refused.
    pub ignore_unknown_query_parameters: bool,
    /// Body fields the message does not have are skipped, not refused.
    pub ignore_unknown_fields: bool,
    /// Request headers passed on as gRPC metadata (lowercase names).
    pub forward_headers: Vec<String>,
    /// How answers are printed: defaults emitted, proto field names,
    /// enums as numbers.
    pub print: PrintOptions,
    /// Without a descriptor set: how often the upstream's reflection is
    /// asked again, the routes rebuilt when its services changed (`None`:
    /// asked once, at start).
    pub reflect_every: Option<Duration>,
}

/// How often an upstream's reflection is asked again, by default.
pub(crate) const DEFAULT_REFLECT_EVERY: Duration = Duration::from_secs(60);

impl TranscodeConfig {
    /// The services of a TOML file: one `[[service]]` table per upstream,
    /// with this struct's fields (and `forward_headers`,
    /// `emit_defaults`, `proto_field_names`, `enums_as_ints`).
    /// `descriptor_set` paths are relative to the file.
    pub fn from_file(path: &std::path::Path) -> Result<Vec<TranscodeConfig>, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            service: Vec<Service>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Service {
            descriptor_set: Option<PathBuf>,
            upstream: Vec<String>,
            #[serde(default)]
            services: Vec<String>,
            #[serde(default)]
            ignore_unknown_query_parameters: bool,
            #[serde(default)]
            ignore_unknown_fields: bool,
            #[serde(default)]
            forward_headers: Vec<String>,
            #[serde(default)]
            emit_defaults: bool,
            #[serde(default)]
            proto_field_names: bool,
            #[serde(default)]
            enums_as_ints: bool,
            reflect_every_s: Option<f64>,
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.service.is_empty() {
            return Err(format!("{} has no [[service]]", path.display()));
        }
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        Ok(file
            .service
            .into_iter()
            .map(|s| TranscodeConfig {
                descriptor_set: s.descriptor_set.map(|p| dir.join(p)),
                upstream: s.upstream,
                services: s.services,
                ignore_unknown_query_parameters: s.ignore_unknown_query_parameters,
                ignore_unknown_fields: s.ignore_unknown_fields,
                forward_headers: s
                    .forward_headers
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                print: PrintOptions {
                    emit_defaults: s.emit_defaults,
                    proto_field_names: s.proto_field_names,
                    enums_as_ints: s.enums_as_ints,
                    ..PrintOptions::default()
                },
                reflect_every: match s.reflect_every_s {
                    Some(secs) if secs > 0.0 && secs.is_finite() => {
                        Some(Duration::from_secs_f64(secs))
                    }
                    Some(_) => None,
                    None => Some(DEFAULT_REFLECT_EVERY),
                },
            })
            .collect())
    }
}

/// Every transcoded service, each with its upstream, searched in order.
pub(crate) struct Transcoder {
    backends: Vec<Backend>,
    /// What a request's body may be, and how long its call may take.
    limits: MessageLimits,
    /// The deepest nesting of a request's JSON.
    max_depth: usize,
}

impl Transcoder {
    pub(crate) async fn load(
        configs: &[TranscodeConfig],
        limits: MessageLimits,
        max_depth: usize,
    ) -> Result<Transcoder, String> {
        let mut backends = Vec::with_capacity(configs.len());
        for config in configs {
            backends.push(Backend::load(config).await?);
        }
        Ok(Transcoder {
            backends,
            limits,
            max_depth,
        })
    }
}

impl Fallback for Transcoder {
    fn answer(&self, request: Request<Incoming>) -> Answering<'_> {
        Box::pin(async move { Some(call(self, request).await) })
    }
}

/// Asks the reflection of each upstream served by reflection again at its
/// `reflect_every`, while the server lives, so that a redeployed upstream's
/// new or changed methods are routed without a restart.
pub(crate) async fn reflect_again(transcoder: Weak<Transcoder>) {
    let period = {
        let Some(transcoder) = transcoder.upgrade() else {
            return;
        };
        let periods = transcoder
            .backends
            .iter()
            .filter(|b| b.config.descriptor_set.is_none())
            .filter_map(|b| b.config.reflect_every);
        match periods.min() {
            Some(period) => period,
            None => return,
        }
    };
    // Each was asked when it loaded.
    let mut asked_at = Vec::new();
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(transcoder) = transcoder.upgrade() else {
            return;
        };
        asked_at.resize(transcoder.backends.len(), Instant::now() - period);
        for (backend, asked) in transcoder.backends.iter().zip(asked_at.iter_mut()) {
            let Some(every) = backend.config.reflect_every else {
                continue;
            };
            // Due when within half a tick of its period.
            if backend.config.descriptor_set.is_some() || asked.elapsed() + period / 2 < every {
                continue;
            }
            *asked = Instant::now();
            backend.reflect_again().await;
        }
    }
}

/// One upstream and what the proxy knows of its services.
struct Backend {
    upstream: Arc<Upstream>,
    config: TranscodeConfig,
    /// Replaced when reflection says the services changed.
    services: RwLock<Arc<Services>>,
}

/// An upstream's services, as a descriptor set or reflection gave them.
struct Services {
    routes: Routes,
    /// The services' descriptors with google.rpc's error details, for
    /// the details of an error status.
    pool: DescriptorPool,
    /// The descriptors' fingerprint, to see a change.
    fingerprint: u64,
}

impl Services {
    fn new(pool: &DescriptorPool, config: &TranscodeConfig) -> Result<Services, String> {
        use std::hash::{Hash, Hasher};
        let routes = Routes::from_pool(pool, &config.services)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        pool.encode_to_vec().hash(&mut hasher);
        Ok(Services {
            routes,
            pool: with_rpc_types(pool),
            fingerprint: hasher.finish(),
        })
    }
}

impl Backend {
    async fn load(config: &TranscodeConfig) -> Result<Backend, String> {
        let addresses = config
            .upstream
            .iter()
            .map(|u| u.parse::<Address>())
            .collect::<Result<Vec<_>, _>>()?;
        // Any gRPC service: an ejected replica is probed by gRPC's own
        // health check, not the inference protocol's.
        let options = UpstreamOptions {
            probe: Probe::GrpcHealth,
            ..UpstreamOptions::default()
        };
        let upstream = Upstream::new(addresses, options)?;
        let pool = match &config.descriptor_set {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    format!("cannot read the descriptor set {}: {e}", path.display())
                })?;
                DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
                    format!(
                        "{} is not a FileDescriptorSet (make one with protoc --include_imports --descriptor_set_out): {e}",
                        path.display()
                    )
                })?
            }
            None => reflection::descriptors(&upstream, &config.services)
                .await
                .map_err(|e| {
                    format!(
                        "cannot learn {}'s services by reflection: {e}",
                        upstream.describe()
                    )
                })?,
        };
        let services = Services::new(&pool, config)?;
        tracing::info!(
            routes = services.routes.routes().len(),
            upstream = upstream.describe(),
            "transcoding HTTP/JSON to gRPC"
        );
        Ok(Backend {
            upstream,
            config: config.clone(),
            services: RwLock::new(Arc::new(services)),
        })
    }

    /// What is known of the services now.
    fn services(&self) -> Arc<Services> {
        Arc::clone(&self.services.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Asks the upstream's reflection again, and rebuilds the routes if
    /// its services changed; on any failure the routes stay as they are.
    async fn reflect_again(&self) {
        let asked = reflection::descriptors(&self.upstream, &self.config.services).await;
        let pool = match asked {
            Ok(pool) => pool,
            Err(e) => {
                tracing::warn!(
                    upstream = self.upstream.describe(),
                    error = %e,
                    "cannot ask the upstream's reflection again; the routes stay as they were"
                );
                return;
            }
        };
        let services = match Services::new(&pool, &self.config) {
            Ok(services) => services,
            Err(e) => {
                tracing::warn!(
                    upstream = self.upstream.describe(),
                    error = %e,
                    "the upstream's services changed into ones that cannot be routed; the routes stay as they were"
                );
                return;
            }
        };
        if services.fingerprint == self.services().fingerprint {
            return;
        }
        tracing::info!(
            upstream = self.upstream.describe(),
            routes = services.routes.routes().len(),
            "the upstream's services changed; routes rebuilt from its reflection"
        );
        *self.services.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(services);
    }

    /// The error answer for a gRPC status, with the upstream's details.
    fn status(
        &self,
        services: &Services,
        code: i32,
        message: &str,
        details: Option<&[u8]>,
    ) -> Response<Body> {
        let mut out = Vec::with_capacity(64 + message.len());
        status_json(
            code,
            message,
            details,
            &services.pool,
            &self.config.print,
            &mut out,
        );
        response::json_with_status(http_status(code), out)
    }

    /// The error answer for a failed call.
    fn call_error(
        &self,
        services: &Services,
        e: &UpstreamError,
        details: Option<&[u8]>,
    ) -> Response<Body> {
        let (code, message) = call_status(e);
        let mut answer = self.status(services, code, &message, details);
        if !matches!(e.error, CallError::Status { .. } | CallError::Deadline) && code == 13 {
            *answer.status_mut() = StatusCode::BAD_GATEWAY;
        }
        answer
    }

    /// The gRPC metadata of a request: the configured headers, and
    /// `Grpc-Metadata-<key>` ones as `<key>`.
    fn metadata(&self, headers: &HeaderMap) -> HeaderMap {
        let mut metadata = HeaderMap::new();
        for name in &self.config.forward_headers {
            if let Ok(header) = name.parse::<HeaderName>() {
                for value in headers.get_all(name.as_str()) {
                    metadata.append(header.clone(), value.clone());
                }
            }
        }
        for (name, value) in headers {
            let Some(key) = name.as_str().strip_prefix(METADATA_PREFIX) else {
                continue;
            };
            if let Ok(key) = key.parse::<HeaderName>() {
                if !is_reserved(key.as_str()) {
                    metadata.append(key, value.clone());
                }
            }
        }
        metadata
    }

    /// Adds the answer's metadata to `response`: `headers` under their
    /// own names when configured, else `Grpc-Metadata-<key>`; `trailers`
    /// as `Grpc-Trailer-<key>`.
    fn answer_metadata(
        &self,
        response: &mut Response<Body>,
        headers: &HeaderMap,
        trailers: &HeaderMap,
    ) {
        let out = response.headers_mut();
        for (name, value) in headers {
            if is_reserved(name.as_str()) {
                continue;
            }
            if self
                .config
                .forward_headers
                .iter()
                .any(|h| h == name.as_str())
            {
                out.append(name.clone(), value.clone());
            } else if let Ok(named) = format!("{METADATA_PREFIX}{name}").parse::<HeaderName>() {
                out.append(named, value.clone());
            }
        }
        for (name, value) in trailers {
            if is_reserved(name.as_str()) {
                continue;
            }
            if let Ok(named) = format!("grpc-trailer-{name}").parse::<HeaderName>() {
                out.append(named, value.clone());
            }
        }
    }
}

/// The header prefix of gRPC metadata passed through HTTP
/// (grpc-gateway's convention).
const METADATA_PREFIX: &str = "grpc-metadata-";

/// Headers that are HTTP/2's or gRPC's own, never metadata.
fn is_reserved(name: &str) -> bool {
    name.starts_with("grpc-")
        || matches!(
            name,
            "content-type"
                | "content-length"
                | "te"
                | "trailer"
                | "user-agent"
                | "date"
                | "server"
                | "connection"
                | "host"
                | "transfer-encoding"
                | "keep-alive"
                | "upgrade"
        )
}

/// The gRPC code and message of a failed call.
fn call_status(e: &UpstreamError) -> (i32, String) {
    match &e.error {
        CallError::Status { code, message } => (*code, message.clone()),
        CallError::Deadline => (
            4,
            "the deadline passed before the upstream answered".to_owned(),
        ),
        CallError::Unreached(_) | CallError::NoReplica(_) => (14, e.to_string()),
        _ => (13, e.to_string()),
    }
}

/// `google.rpc.Code`'s HTTP status for a gRPC code.
fn http_status(code: i32) -> StatusCode {
    match code {
        0 => StatusCode::OK,
        1 => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        3 | 9 | 11 => StatusCode::BAD_REQUEST,
        4 => StatusCode::GATEWAY_TIMEOUT,
        5 => StatusCode::NOT_FOUND,
        6 | 10 => StatusCode::CONFLICT,
        7 => StatusCode::FORBIDDEN,
        8 => StatusCode::TOO_MANY_REQUESTS,
        12 => StatusCode::NOT_IMPLEMENTED,
        14 => StatusCode::SERVICE_UNAVAILABLE,
        16 => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A `google.rpc.Status` answer of the proxy's own (no details).
fn status(code: i32, message: &str) -> Response<Body> {
    let body = json!({ "code": code, "message": message, "details": [] });
    response::json_with_status(http_status(code), body.to_string())
}

/// The request's `grpc-timeout` (gRPC's format: one to eight digits and
/// a unit, H, M, S, m, u, n), if it has one.
fn grpc_timeout(headers: &HeaderMap) -> Result<Option<Duration>, String> {
    let Some(value) = headers.get("grpc-timeout") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("");
    crate::protocols::grpc::grpc_timeout(text)
        .map(Some)
        .ok_or_else(|| {
            format!(
                "grpc-timeout '{text}' is not one to eight digits and a unit (H, M, S, m, u, n)"
            )
        })
}

async fn call(transcoder: &Transcoder, request: Request<Incoming>) -> Response<Body> {
    let limits = &transcoder.limits;
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    // The first upstream whose routes have the path and method.
    let known: Vec<Arc<Services>> = transcoder.backends.iter().map(Backend::services).collect();
    let mut miss = NotFound::Path;
    let mut hit = None;
    for (backend, services) in transcoder.backends.iter().zip(&known) {
        match services.routes.find(parts.method.as_str(), &path) {
            Ok(found) => {
                hit = Some(((backend, services.as_ref()), found));
                break;
            }
            Err(NotFound::Method(methods)) => match &mut miss {
                NotFound::Method(all) => all.extend(methods),
                NotFound::Path => miss = NotFound::Method(methods),
            },
            Err(NotFound::Path) => {}
        }
    }
    let ((t, services), found) = match (hit, miss) {
        (Some(hit), _) => hit,
        (None, NotFound::Path) => {
            BodyReader::new(body, limits).discard().await;
            return status(5, &format!("no route for {} {path}", parts.method));
        }
        (None, NotFound::Method(mut methods)) => {
            methods.sort();
            methods.dedup();
            BodyReader::new(body, limits).discard().await;
            let mut answer = response::json_with_status(
                StatusCode::METHOD_NOT_ALLOWED,
                json!({
                    "code": 12,
                    "message": format!("{path} takes {}, not {}", methods.join(", "), parts.method),
                    "details": []
                })
                .to_string(),
            );
            if let Ok(allow) = methods.join(", ").parse() {
                answer.headers_mut().insert(ALLOW, allow);
            }
            return answer;
        }
    };
    let route = found.route;
    let input = route.method.input();
    let encode_options = EncodeOptions {
        ignore_unknown_fields: t.config.ignore_unknown_fields,
        max_depth: transcoder.max_depth.max(1),
        max_message_bytes: limits.max_body_bytes,
    };
    let timeout = match grpc_timeout(&parts.headers) {
        Ok(timeout) => timeout,
        Err(e) => return status(3, &e),
    };
    // Path variables and query parameters, written after each message.
    let bound = match bound_fields(
        &found,
        parts.uri.query(),
        encode_options,
        t.config.ignore_unknown_query_parameters,
    ) {
        Ok(bytes) => bytes,
        Err(e) => return status(3, e.message()),
    };
    let metadata = t.metadata(&parts.headers);
    let mut reader = BodyReader::new(body, limits);
    let client_streaming = route.method.is_client_streaming();
    // The request: one message encoded as it arrives, or a client
    // stream's messages sent as they are read.
    let (request_body, feed) = if client_streaming {
        if matches!(route.body, BodyTarget::Field(_)) {
            reader.discard().await;
            return status(
                12,
                &format!(
                    "{} is client streaming and routed with a body field; the proxy streams whole messages (body: \"*\")",
                    route.method.full_name()
                ),
            );
        }
        let (body, feed) = streaming::feed(reader, input.clone(), encode_options, bound);
        (body, Some(feed))
    } else {
        let mut message = match encode_request(&mut reader, route, &input, encode_options).await {
            Ok(message) => message,
            Err(answer) => return answer,
        };
        message.extend_from_slice(&bound);
        let mut prefix = [0u8; 5];
        prefix[1..].copy_from_slice(
            &u32::try_from(message.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        let parts = [Bytes::copy_from_slice(&prefix), Bytes::from(message)];
        (CallBody::from(Chunks::new(parts)), None)
    };
    let budget = timeout
        .unwrap_or(limits.request_timeout)
        .min(limits.request_timeout);
    // A stream's deadline is the client's own; its messages may each take
    // the request timeout.
    let deadline = if route.method.is_server_streaming() || client_streaming {
        timeout.map(|t| Instant::now() + t)
    } else {
        Some(Instant::now() + budget)
    };
    let idle = limits.request_timeout;
    let wait = |deadline: Option<Instant>| {
        let idle_end = Instant::now() + idle;
        deadline.map_or(idle_end, |d| d.min(idle_end))
    };
    // A stream's answer may hold its headers back until its first message:
    // they, too, may take the request timeout at most.
    let opened = tokio::time::timeout_at(
        wait(deadline).into(),
        t.upstream
            .open(&route.grpc_path, request_body, &metadata, deadline),
    )
    .await
    .unwrap_or_else(|_| {
        Err(UpstreamError {
            upstream: t.upstream.describe().to_owned(),
            error: CallError::Deadline,
        })
    });
    let mut call = match opened {
        Ok(call) => call,
        Err(e) => {
            if let Some(answer) = feed.as_ref().and_then(|f| f.failed()) {
                return answer;
            }
            return t.call_error(services, &e, None);
        }
    };
    let failed = |call: &wirespeed_upstream::OpenCall, error: CallError| {
        if let Some(answer) = feed.as_ref().and_then(|f| f.failed()) {
            return answer;
        }
        let e = UpstreamError {
            upstream: t.upstream.describe().to_owned(),
            error,
        };
        let details = call.status_details();
        let mut answer = t.call_error(services, &e, details.as_deref());
        t.answer_metadata(&mut answer, call.headers(), call.trailers());
        answer
    };
    // The first message (a unary answer's only one), before the status
    // line is chosen: an error that comes first gets its own status.
    let first = match tokio::time::timeout_at(wait(deadline).into(), call.message()).await {
        Ok(Ok(first)) => first,
        Ok(Err(error)) => return failed(&call, error),
        Err(_) => return failed(&call, CallError::Deadline),
    };
    let output = route.method.output();
    if route.method.is_server_streaming() {
        let format = StreamFormat::from_accept(
            parts
                .headers
                .get(ACCEPT)
                .and_then(|a| a.to_str().ok())
                .unwrap_or(""),
        );
        let headers = call.headers().clone();
        let stream = streaming::Answers {
            call,
            first,
            format,
            output,
            response_body: route.response_body.clone(),
            print: t.config.print,
            pool: services.pool.clone(),
            idle,
            deadline,
            method: route.method.full_name().to_owned(),
        };
        let mut answer = Response::new(Body::stream(stream.into_body()));
        answer.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        answer
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        t.answer_metadata(&mut answer, &headers, &HeaderMap::new());
        return answer;
    }
    let Some(bytes) = first else {
        return failed(
            &call,
            CallError::Protocol("the answer to a unary call has no message".to_owned()),
        );
    };
    // The status, after the one message.
    match tokio::time::timeout_at(wait(deadline).into(), call.message()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(_))) => {
            return failed(
                &call,
                CallError::Protocol(
                    "more than one message in the answer to a unary call".to_owned(),
                ),
            )
        }
        Ok(Err(error)) => return failed(&call, error),
        Err(_) => return failed(&call, CallError::Deadline),
    }
    let mut out = Vec::with_capacity(bytes.len() * 2 + 2);
    let printed = match &route.response_body {
        Some(path) => field_to_json(&output, path, &bytes, &t.config.print, &mut out),
        None => proto_to_json(&output, &bytes, &t.config.print, &mut out),
    };
    if let Err(e) = printed {
        let mut answer = status(
            13,
            &format!(
                "the upstream's answer does not decode as {}: {}",
                output.full_name(),
                e.message()
            ),
        );
        *answer.status_mut() = StatusCode::BAD_GATEWAY;
        return answer;
    }
    let mut answer = response::json(out);
    t.answer_metadata(&mut answer, call.headers(), call.trailers());
    answer
}

/// A unary request's message, encoded from the body as it arrives (or
/// nothing, for a route with no body); an error is the answer to give.
async fn encode_request(
    reader: &mut BodyReader,
    route: &wirespeed_transcode::Route,
    input: &prost_reflect::MessageDescriptor,
    options: EncodeOptions,
) -> Result<Vec<u8>, Response<Body>> {
    if route.body == BodyTarget::None {
        let mut extra = false;
        loop {
            match reader.next().await {
                Ok(Some(frame)) => extra |= frame.iter().any(|b| !b.is_ascii_whitespace()),
                Ok(None) => break,
                Err(e) => return Err(status(3, e.message())),
            }
        }
        if extra {
            return Err(status(
                3,
                &format!("{} {} takes no body", route.http_method, route.pattern),
            ));
        }
        return Ok(Vec::new());
    }
    let mut encoder = match &route.body {
        BodyTarget::Field(fields) => JsonToProto::for_field(input.clone(), fields, options),
        _ => JsonToProto::new(input.clone(), options),
    };
    let mut failed = None;
    loop {
        match reader.next().await {
            Ok(Some(frame)) => {
                if failed.is_none() {
                    if let Err(e) = encoder.feed(&frame) {
                        failed = Some(e.message().to_owned());
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return Err(status(3, e.message())),
        }
    }
    if let Some(e) = failed {
        return Err(status(3, &e));
    }
    encoder.finish().map_err(|e| status(3, e.message()))
}
