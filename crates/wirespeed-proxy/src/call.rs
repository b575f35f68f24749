//! One transcoded request, from route to answer: find the method
//! ([`find`]), make the call's request (one message encoded as the body
//! arrives, or a client stream's messages sent as they are read,
//! [`request_body`]), open the call within the deadline ([`open`]), and
//! print the answer (a unary answer once its status is in, [`unary`]; a
//! server stream as it comes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use wirespeed_http::RequestBody;
use wirespeed_http::{json_response, Body, BodyReader};
use wirespeed_transcode::{
    bound_fields, field_to_json, proto_to_json, BodyTarget, EncodeOptions, Found, JsonToProto,
    NotFound, Route, StreamFormat,
};
use wirespeed_upstream::{CallBody, CallError, OpenCall, UpstreamError};

use crate::backend::{Backend, Services};
use crate::status::{bad_answer, method_not_allowed, status, Code};
use crate::streaming::{self, Feed};
use crate::Transcoder;
use crate::{field_mask, http_body};

/// Answers one request.
pub(crate) async fn answer(
    transcoder: &Transcoder,
    request: Request<RequestBody>,
) -> Response<Body> {
    let limits = transcoder.limits.body;
    let (parts, body) = request.into_parts();
    let known: Vec<Arc<Services>> = transcoder.backends.iter().map(Backend::services).collect();
    let (backend, services, found) = match find(transcoder, &known, &parts) {
        Ok(hit) => hit,
        Err(miss) => {
            BodyReader::new(body, &limits).discard().await;
            return not_found(&parts, miss);
        }
    };
    let route = found.route;
    let timeout = match grpc_timeout(&parts.headers) {
        Ok(timeout) => timeout,
        Err(e) => return status(Code::InvalidArgument, &e),
    };
    let options = EncodeOptions {
        ignore_unknown_fields: backend.config.ignore_unknown_fields,
        max_depth: transcoder.limits.max_depth.max(1),
        max_message_bytes: limits.max_bytes,
    };
    let reader = BodyReader::new(body, &limits);
    let (request, feed) = match request_body(backend, &found, &parts, reader, options).await {
        Ok(request) => request,
        Err(answer) => return answer,
    };
    let clock = Clock::new(route, timeout, limits.total);
    let metadata = backend.metadata(&parts.headers);
    let mut call = match open(backend, route, request, &metadata, &clock).await {
        Ok(call) => call,
        Err(e) => {
            if let Some(answer) = feed.as_ref().and_then(Feed::failed) {
                return answer;
            }
            return backend.call_error(services, &e, None);
        }
    };
    let failed = Failed {
        backend,
        services,
        feed: feed.as_ref(),
    };
    // The first message (a unary answer's only one), before the status
    // line is chosen: an error that comes first gets its own status.
    let first = match tokio::time::timeout_at(clock.wait().into(), call.message()).await {
        Ok(Ok(first)) => first,
        Ok(Err(error)) => return failed.answer(&call, clock.blame(error)),
        Err(_) => return failed.answer(&call, CallError::Deadline),
    };
    if route.method.is_server_streaming() {
        return stream(
            backend,
            services,
            route,
            &parts.headers,
            call,
            first,
            &clock,
        );
    }
    unary(failed, route, call, first, &clock).await
}

/// The first upstream whose routes have the request's path and method,
/// or what none has: the path, or the method for it.
fn find<'a>(
    transcoder: &'a Transcoder,
    known: &'a [Arc<Services>],
    parts: &Parts,
) -> Result<(&'a Backend, &'a Services, Found<'a>), NotFound> {
    let path = parts.uri.path();
    let mut miss = NotFound::Path;
    for (backend, services) in transcoder.backends.iter().zip(known) {
        match services.routes.find(parts.method.as_str(), path) {
            Ok(found) => return Ok((backend, services.as_ref(), found)),
            Err(NotFound::Method(methods)) => match &mut miss {
                NotFound::Method(all) => all.extend(methods),
                NotFound::Path => miss = NotFound::Method(methods),
            },
            Err(NotFound::Path) => {}
        }
    }
    Err(miss)
}

/// The answer when no route has the request's path (404), or has it for
/// other methods (405).
fn not_found(parts: &Parts, miss: NotFound) -> Response<Body> {
    let path = parts.uri.path();
    match miss {
        NotFound::Path => status(
            Code::NotFound,
            &format!("no route for {} {path}", parts.method),
        ),
        NotFound::Method(methods) => method_not_allowed(path, parts.method.as_str(), methods),
    }
}

/// The request's `grpc-timeout` (gRPC's format: one to eight digits and
/// a unit, H, M, S, m, u, n), if it has one.
fn grpc_timeout(headers: &HeaderMap) -> Result<Option<Duration>, String> {
    let Some(value) = headers.get("grpc-timeout") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("");
    wirespeed_http::grpc_timeout(text).map(Some).ok_or_else(|| {
        format!("grpc-timeout '{text}' is not one to eight digits and a unit (H, M, S, m, u, n)")
    })
}

/// The call's request: one message encoded as the body arrives, framed,
/// or a client stream's messages sent as they are read (with the feed
/// that says whether the body failed); the path variables and query
/// parameters written after each message. An error is the answer to give.
async fn request_body(
    backend: &Backend,
    found: &Found<'_>,
    parts: &Parts,
    mut reader: BodyReader,
    options: EncodeOptions,
) -> Result<(CallBody, Option<Feed>), Response<Body>> {
    let route = found.route;
    let input = route.method.input();
    let bound = bound_fields(
        found,
        parts.uri.query(),
        options,
        backend.config.ignore_unknown_query_parameters,
    )
    .map_err(|e| status(Code::InvalidArgument, e.message()))?;
    if route.method.is_client_streaming() {
        if matches!(route.body, BodyTarget::Field(_)) {
            reader.discard().await;
            return Err(status(
                Code::Unimplemented,
                &format!(
                    "{} is client streaming and routed with a body field; the proxy streams whole messages (body: \"*\")",
                    route.method.full_name()
                ),
            ));
        }
        let (body, feed) = streaming::feed(reader, input, options, bound);
        return Ok((body, Some(feed)));
    }
    // grpc-gateway's PATCH feature: the mask of what the body sets, when
    // the request has an `update_mask` the query does not give.
    let mask = match &route.body {
        BodyTarget::Field(fields) => field_mask::mask_field(&route.http_method, &input, fields)
            .filter(|_| !query_sets(parts.uri.query(), "update_mask", "updateMask"))
            .zip(match fields.last().map(|f| f.kind()) {
                Some(prost_reflect::Kind::Message(m)) => Some(m),
                _ => None,
            }),
        _ => None,
    };
    let mut kept = mask.as_ref().map(|_| Vec::new());
    let mut message = match http_body::request_target(&input, &route.body) {
        Some(path) => {
            let data = read_raw(&mut reader).await?;
            http_body::request(&input, &path, &parts.headers, data)
        }
        None => encode_request(&mut reader, route, &input, options, kept.as_mut()).await?,
    };
    if let (Some((field, body_type)), Some(body)) = (mask, kept) {
        let paths =
            field_mask::paths(&body_type, &body).map_err(|e| status(Code::InvalidArgument, &e))?;
        message.extend_from_slice(&field_mask::encode(&field, paths));
    }
    message.extend_from_slice(&bound);
    Ok((wirespeed_upstream::framed(Bytes::from(message)), None))
}

/// Whether the query sets the field named `proto` (or `json`).
fn query_sets(query: Option<&str>, proto: &str, json: &str) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            key == proto
                || key == json
                || key.starts_with(&format!("{proto}."))
                || key.starts_with(&format!("{json}."))
        })
    })
}

/// A raw body, whole (an `HttpBody`'s data), within the body's limits.
async fn read_raw(reader: &mut BodyReader) -> Result<Vec<u8>, Response<Body>> {
    let mut data = Vec::new();
    loop {
        match reader.next().await {
            Ok(Some(frame)) => data.extend_from_slice(&frame),
            Ok(None) => return Ok(data),
            Err(e) => return Err(status(Code::InvalidArgument, e.message())),
        }
    }
}

/// A unary request's message, encoded from the body as it arrives (or
/// nothing, for a route with no body); an error is the answer to give.
async fn encode_request(
    reader: &mut BodyReader,
    route: &Route,
    input: &prost_reflect::MessageDescriptor,
    options: EncodeOptions,
    mut keep: Option<&mut Vec<u8>>,
) -> Result<Vec<u8>, Response<Body>> {
    let invalid = |message: &str| status(Code::InvalidArgument, message);
    if route.body == BodyTarget::None {
        // A body on a rule without one is read and left, as grpc-gateway
        // and Envoy leave it (grpc-gateway's own clients send `{}` there).
        loop {
            match reader.next().await {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(Vec::new()),
                Err(e) => return Err(invalid(e.message())),
            }
        }
    }
    let mut encoder = match &route.body {
        BodyTarget::Field(fields) => JsonToProto::for_field(input.clone(), fields, options),
        _ => JsonToProto::new(input.clone(), options),
    };
    let mut failed = None;
    // An empty body (or only whitespace) is `{}`, as grpc-gateway and
    // Envoy read it.
    let mut empty = true;
    loop {
        match reader.next().await {
            Ok(Some(frame)) => {
                empty &= frame.iter().all(u8::is_ascii_whitespace);
                if let Some(kept) = keep.as_deref_mut() {
                    kept.extend_from_slice(&frame);
                }
                if failed.is_none() {
                    if let Err(e) = encoder.feed(&frame) {
                        failed = Some(e.message().to_owned());
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return Err(invalid(e.message())),
        }
    }
    if empty {
        return Ok(Vec::new());
    }
    if let Some(e) = failed {
        return Err(invalid(&e));
    }
    encoder.finish().map_err(|e| invalid(e.message()))
}

/// A call's deadline and how long any one wait within it may take.
struct Clock {
    /// The client's deadline for a stream (its messages may each take the
    /// request timeout); the client's or the request timeout, whichever is
    /// sooner, for a unary call.
    deadline: Option<Instant>,
    /// The longest any wait may take: the request timeout.
    idle: Duration,
}

impl Clock {
    fn new(route: &Route, timeout: Option<Duration>, request_timeout: Duration) -> Clock {
        let streaming = route.method.is_server_streaming() || route.method.is_client_streaming();
        let deadline = if streaming {
            timeout.map(|t| Instant::now() + t)
        } else {
            let budget = timeout.unwrap_or(request_timeout).min(request_timeout);
            Some(Instant::now() + budget)
        };
        Clock {
            deadline,
            idle: request_timeout,
        }
    }

    /// `error` as the client should hear it: a call broken once the
    /// deadline has passed (the upstream resets a stream it gave up on)
    /// ran out of time.
    fn blame(&self, error: CallError) -> CallError {
        match error {
            CallError::Broken(_) if self.deadline.is_some_and(|d| Instant::now() >= d) => {
                CallError::Deadline
            }
            error => error,
        }
    }

    /// When the wait starting now ends.
    fn wait(&self) -> Instant {
        let idle_end = Instant::now() + self.idle;
        self.deadline.map_or(idle_end, |d| d.min(idle_end))
    }
}

/// Opens the call. A stream's answer may hold its headers back until its
/// first message: they, too, may take the request timeout at most.
async fn open(
    backend: &Backend,
    route: &Route,
    request: CallBody,
    metadata: &HeaderMap,
    clock: &Clock,
) -> Result<OpenCall, UpstreamError> {
    let upstream = &backend.upstream;
    let opening = upstream.open(&route.grpc_path, request, metadata, clock.deadline);
    tokio::time::timeout_at(clock.wait().into(), opening)
        .await
        .unwrap_or_else(|_| {
            Err(UpstreamError {
                upstream: upstream.describe().to_owned(),
                error: CallError::Deadline,
            })
        })
}

/// How an open call that failed is answered.
struct Failed<'a> {
    backend: &'a Backend,
    services: &'a Services,
    /// A client stream's feed: if its body failed, that is the answer.
    feed: Option<&'a Feed>,
}

impl Failed<'_> {
    fn answer(&self, call: &OpenCall, error: CallError) -> Response<Body> {
        if let Some(answer) = self.feed.and_then(Feed::failed) {
            return answer;
        }
        let e = UpstreamError {
            upstream: self.backend.upstream.describe().to_owned(),
            error,
        };
        let details = call.status_details();
        let mut answer = self
            .backend
            .call_error(self.services, &e, details.as_deref());
        self.backend
            .answer_metadata(&mut answer, call.headers(), call.trailers());
        answer
    }
}

/// A server stream's answer: its messages printed as they come, framed
/// by `Accept`.
fn stream(
    backend: &Backend,
    services: &Services,
    route: &Route,
    request_headers: &HeaderMap,
    call: OpenCall,
    first: Option<Bytes>,
    clock: &Clock,
) -> Response<Body> {
    let accept = request_headers.get(ACCEPT).and_then(|a| a.to_str().ok());
    let output = route.method.output();
    // A stream of `HttpBody` is its data, typed by its first message.
    let raw = http_body::answers_raw(&output, route.response_body.is_some());
    let format = if raw {
        StreamFormat::Raw
    } else {
        StreamFormat::from_accept(accept.unwrap_or(""))
    };
    let content_type = match &first {
        Some(first) if raw => http_body::parts(&output, first)
            .ok()
            .and_then(|(t, _)| HeaderValue::from_str(&t).ok().filter(|_| !t.is_empty())),
        _ => None,
    }
    .unwrap_or(HeaderValue::from_static(format.content_type()));
    let headers = call.headers().clone();
    let answers = streaming::Answers {
        call,
        first,
        format,
        output,
        response_body: route.response_body.clone(),
        print: backend.config.print,
        pool: services.pool.clone(),
        idle: clock.idle,
        deadline: clock.deadline,
        method: route.method.full_name().to_owned(),
    };
    let mut answer = Response::new(Body::stream(answers.into_body()));
    let out = answer.headers_mut();
    out.insert(CONTENT_TYPE, content_type);
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    backend.answer_metadata(&mut answer, &headers, &HeaderMap::new());
    answer
}

/// A unary call's answer: its one message, printed once the status after
/// it is in.
async fn unary(
    failed: Failed<'_>,
    route: &Route,
    mut call: OpenCall,
    first: Option<Bytes>,
    clock: &Clock,
) -> Response<Body> {
    let Some(bytes) = first else {
        let why = "the answer to a unary call has no message".to_owned();
        return failed.answer(&call, CallError::Protocol(why));
    };
    match tokio::time::timeout_at(clock.wait().into(), call.message()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(_))) => {
            let why = "more than one message in the answer to a unary call".to_owned();
            return failed.answer(&call, CallError::Protocol(why));
        }
        Ok(Err(error)) => return failed.answer(&call, clock.blame(error)),
        Err(_) => return failed.answer(&call, CallError::Deadline),
    }
    let output = route.method.output();
    if route.response_body.is_none() {
        match http_body::answer(&output, &bytes) {
            Some(Ok(mut answer)) => {
                failed
                    .backend
                    .answer_metadata(&mut answer, call.headers(), call.trailers());
                return answer;
            }
            Some(Err(e)) => return bad_answer(&e),
            None => {}
        }
    }
    let print = &failed.backend.config.print;
    let mut out = Vec::with_capacity(bytes.len() * 2 + 2);
    let printed = match &route.response_body {
        Some(path) => field_to_json(&output, path, &bytes, print, &mut out),
        None => proto_to_json(&output, &bytes, print, &mut out),
    };
    if let Err(e) = printed {
        return bad_answer(&format!(
            "the upstream's answer does not decode as {}: {}",
            output.full_name(),
            e.message()
        ));
    }
    let mut answer = json_response(StatusCode::OK, out);
    failed
        .backend
        .answer_metadata(&mut answer, call.headers(), call.trailers());
    answer
}
