//! The REST listener's service, over HTTP/1.1 and HTTP/2 (h2c), on hyper:
//! the Open Inference Protocol, TF Serving's (and KServe v1's) and
//! Clipper's.
//!
//! `net/` accepts connections; [`RestService`] answers each request:
//! `dispatch` routes it (`router.rs`), checks the bearer token (`auth.rs`),
//! and hands it to one protocol's endpoint; the infer endpoints are codecs
//! of the one pipeline (`wirespeed-engine/src/pipeline.rs`). The endpoints
//! that wait for nothing (health, metadata, statistics) are answered at
//! once, by the same checks and code, without a future to allocate, copy
//! and poll (with the answer's head in a reused buffer, `GET /v2` costs
//! 6-12% less CPU: `docs/performance/wire-speed.md`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::header::HeaderValue;
use hyper::{Request, Response};
use wirespeed_core::{Error, ErrorKind};
use wirespeed_http::RequestBody;

use crate::protocols::auth::HealthCheck;
use crate::protocols::http::response::{self, Body};
use crate::protocols::router::{self, Route};
use crate::protocols::tfserving::rest as tfserving;
use crate::protocols::v2::{health, metadata, repository, rest as infer, shared_memory};
use crate::protocols::Front;
use crate::protocols::{clipper, metrics, openai};
use wirespeed_engine::pipeline::RequestContext;

/// The REST listeners' service.
#[derive(Clone)]
pub(crate) struct RestService {
    front: Arc<Front>,
}

impl RestService {
    pub(crate) fn new(front: Arc<Front>) -> RestService {
        RestService { front }
    }
}

impl hyper::service::Service<Request<RequestBody>> for RestService {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Answer;

    fn call(&self, request: Request<RequestBody>) -> Answer {
        if let Some(response) = answer_now(&self.front, &request) {
            return Answer::Now(Some(response));
        }
        Answer::Later(Box::pin(answer(Arc::clone(&self.front), request)))
    }
}

/// A request's answer: made at once (the endpoints that wait for nothing:
/// health, metadata, statistics...), or a future of its own.
pub(crate) enum Answer {
    Now(Option<Response<Body>>),
    Later(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
}

impl Future for Answer {
    type Output = Result<Response<Body>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Now(response) => Poll::Ready(Ok(response
                .take()
                .expect("an answer is polled until it is ready, not after"))),
            Answer::Later(answer) => answer.as_mut().poll(cx).map(Ok),
        }
    }
}

/// The answer of a request whose endpoint waits for nothing, made here
/// without a future: no allocation, nothing to poll. `None` for every other
/// request, and for one that asks for a compressed answer or is logged
/// (`--access-log`), which go the usual way.
fn answer_now(front: &Front, request: &Request<RequestBody>) -> Option<Response<Body>> {
    // Those endpoints are all GET's (and so HEAD's): an infer's `POST` is
    // not routed here as well as in `dispatch`.
    if !matches!(*request.method(), hyper::Method::GET | hyper::Method::HEAD)
        || wirespeed_http::response_coding(request.headers()).is_some()
        || tracing::enabled!(target: "wirespeed_server::access", tracing::Level::INFO)
    {
        return None;
    }
    let path = request.uri().path();
    let route = router::route(request.method(), path);
    let immediate = route.as_ref().is_ok_and(Route::waits_for_nothing);
    if !immediate
        || front
            .fallback
            .as_ref()
            .is_some_and(|f| f.serves(request.method(), path))
    {
        return None;
    }
    let id = front.engine.next_request_id();
    if let Some(refused) = refusal(front, request, &route, id) {
        return Some(refused);
    }
    let answered = answer_sync(front, &route)?;
    Some(settle(answered, path, id))
}

/// Answers one request, with its id in the log and in server errors,
/// compressed when the client asks. The one future of every request that
/// is not answered at once: made and copied (into its box) as the request
/// starts, so it holds little past `dispatch`'s.
async fn answer(front: Arc<Front>, request: Request<RequestBody>) -> Response<Body> {
    let coding = wirespeed_http::response_coding(request.headers());
    let trace = crate::protocols::trace_context(request.headers());
    let context = RequestContext::new(&front.engine, "rest", trace);
    let response = if tracing::enabled!(target: "wirespeed_server::access", tracing::Level::INFO) {
        logged(&front, request, context).await
    } else {
        dispatch(&front, request, context).await
    };
    match coding {
        Some(coding) => {
            let compressed = Box::pin(wirespeed_http::compress(
                response,
                coding,
                &front.engine.pool,
            ));
            compressed.await
        }
        None => response,
    }
}

/// Answers one request and logs it (`--access-log`): never the body, so
/// never tensor data.
async fn logged(
    front: &Front,
    request: Request<RequestBody>,
    context: RequestContext,
) -> Response<Body> {
    let id = context.id;
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let answering = Box::pin(dispatch(front, request, context));
    let response = answering.await;
    tracing::info!(
        target: "wirespeed_server::access",
        request_id = id,
        protocol = "http",
        %method,
        path,
        status = response.status().as_u16(),
        micros = started.elapsed().as_micros() as u64,
    );
    response
}

/// What every request passes before its endpoint: the size of its head,
/// its Host header, its bearer token. `Some` is the refusal to send.
fn refusal(
    front: &Front,
    request: &Request<RequestBody>,
    route: &Result<Route<'_>, Error>,
    id: u64,
) -> Option<Response<Body>> {
    let uri = request.uri();
    // hyper reads headers into its ~400 KiB connection buffer, which large
    // bodies also stream through (a smaller one costs large JSON bodies
    // ~15 %), so the header limit is checked here, once they are parsed.
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + uri.path_and_query().map_or(0, |p| p.as_str().len());
    if header_bytes > front.limits.max_header_bytes {
        if let Some(traffic) = &front.engine.traffic {
            traffic.refused(ErrorKind::HeadersTooLarge);
        }
        let e = Error::new(
            ErrorKind::HeadersTooLarge,
            format!(
                "the request line and headers are {header_bytes} bytes, over the limit of {}",
                front.limits.max_header_bytes
            ),
        );
        let mut response = response::error(&e, id);
        response
            .headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        return Some(response);
    }
    // HTTP/1.1 requires a Host header (RFC 9112, 3.2); HTTP/2's
    // `:authority` stands in for it.
    if request.version() == hyper::Version::HTTP_11
        && !request.headers().contains_key(hyper::header::HOST)
    {
        let e = Error::new(
            ErrorKind::MalformedRequest,
            "an HTTP/1.1 request must carry a Host header (RFC 9112, section 3.2)",
        );
        let mut response = response::error(&e, id);
        response
            .headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        return Some(response);
    }
    let health = match route {
        Ok(Route::Live | Route::Root) => Some(HealthCheck::ServerLive),
        Ok(Route::Ready) => Some(HealthCheck::ServerReady),
        // KServe v1 asks a model's readiness with TF Serving's status.
        Ok(Route::ModelReady(_) | Route::TfStatus(_)) => Some(HealthCheck::ModelReady),
        _ => None,
    };
    if let Err(e) = front.auth.check(request.headers(), health) {
        // Clipper's and OpenAI's clients expect their error shapes, always.
        return Some(if router::is_clipper(uri.path()) {
            clipper::error(&e, id)
        } else if router::is_openai(uri.path()) {
            openai::error(&e, id)
        } else {
            response::error(&e, id)
        });
    }
    None
}

/// The answer of the endpoints that wait for nothing; `None` for the
/// others.
fn answer_sync(
    front: &Front,
    route: &Result<Route<'_>, Error>,
) -> Option<Result<Response<Body>, Error>> {
    Some(match route {
        Ok(Route::Root) => Ok(health::alive()),
        Ok(Route::ModelList) => Ok(tfserving::model_list(front)),
        Ok(Route::Live) => Ok(health::live()),
        Ok(Route::Ready) => Ok(health::ready(front)),
        Ok(Route::ServerMetadata) => Ok(metadata::server(front)),
        Ok(Route::Metrics) => metrics::scrape(front),
        Ok(Route::ModelMetadata(model)) => metadata::model(front, *model),
        Ok(Route::ModelReady(model)) => health::model_ready(front, *model),
        Ok(Route::ModelConfig(model)) => metadata::config(front, *model),
        Ok(Route::ModelStats(model)) => metadata::stats(front, *model),
        Ok(Route::TfStatus(model)) => tfserving::status(front, *model),
        Ok(Route::TfMetadata(model)) => tfserving::metadata(front, *model),
        _ => return None,
    })
}

/// An endpoint's result as the answer sent: its error in V2's shape.
fn settle(result: Result<Response<Body>, Error>, path: &str, id: u64) -> Response<Body> {
    result.unwrap_or_else(|e| {
        let mut answer = response::error(&e, id);
        // A 405 says which methods the endpoint takes (RFC 9110, 15.5.6).
        if let Some(allow) = (e.kind() == ErrorKind::MethodNotAllowed)
            .then(|| router::allowed(path))
            .flatten()
        {
            answer
                .headers_mut()
                .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
        }
        answer
    })
}

/// Routes one request and answers it.
async fn dispatch(
    front: &Front,
    request: Request<RequestBody>,
    context: RequestContext,
) -> Response<Body> {
    let id = context.id;
    // A cheap reference-counted clone, so the route can borrow the path
    // while the request moves into its handler.
    let uri = request.uri().clone();
    let route = router::route(request.method(), uri.path());
    if let Some(refused) = refusal(front, &request, &route, id) {
        return refused;
    }
    let clipper = router::is_clipper(uri.path());
    let openai = router::is_openai(uri.path());
    // The transcoded services' routes come first where they have the path.
    // Asked only where one of the server's own endpoints has it too: a path
    // the router does not know goes to them below, found once.
    let shared_path = !matches!(&route, Err(e) if e.kind() == ErrorKind::RouteNotFound);
    if let Some(fallback) = front
        .fallback
        .as_ref()
        .filter(|f| shared_path && f.serves(request.method(), uri.path()))
    {
        let answer = Box::pin(fallback.answer(request));
        if let Some(answer) = answer.await {
            return answer;
        }
        let e = Error::new(
            ErrorKind::RouteNotFound,
            format!("no endpoint at {}", uri.path()),
        );
        return response::error(&e, id);
    }
    if let Some(answered) = answer_sync(front, &route) {
        return settle(answered, uri.path(), id);
    }
    let result = match route {
        Ok(Route::RepositoryIndex) => {
            let answer = Box::pin(repository::index(front, request));
            answer.await
        }
        Ok(Route::RepositoryLoad(model)) => {
            let answer = Box::pin(repository::load(front, model, request));
            answer.await
        }
        Ok(Route::RepositoryUnload(model)) => {
            let answer = Box::pin(repository::unload(front, model, request));
            answer.await
        }
        Ok(Route::Infer(model)) => {
            let answer = Box::pin(infer::infer(front, context, model, request));
            return answer.await;
        }
        Ok(Route::Generate(model, streaming)) => {
            let answer = Box::pin(crate::protocols::v2::generate::generate(
                front, context, model, request, streaming,
            ));
            return answer.await;
        }
        Ok(Route::TfPredict(model)) => {
            let answer = Box::pin(tfserving::predict(front, context, model, request));
            return answer.await;
        }
        Ok(Route::TfExamples(model, verb)) => {
            let answer = Box::pin(tfserving::examples(front, context, model, request, verb));
            return answer.await;
        }
        Ok(Route::TfOtherVerb(verb)) => Err(tfserving::other_verb(verb)),
        Ok(Route::SharedMemory(route)) => {
            let answer = Box::pin(shared_memory::answer(front, route, request));
            answer.await
        }
        Ok(Route::Missing(missing)) => Err(missing.error()),
        Ok(Route::ClipperPredict(app)) => {
            let answer = Box::pin(clipper::predict(front, context, app, request));
            return answer.await;
        }
        Ok(Route::ClipperUpdate(app)) => {
            let answer = Box::pin(clipper::update(front, context, app, request));
            return answer.await;
        }
        Ok(Route::OpenAi(endpoint)) => {
            let answer = Box::pin(openai::answer(front, context, endpoint, request));
            return answer.await;
        }
        // The endpoints that wait for nothing, answered above
        // (`Route::waits_for_nothing`).
        Ok(_) => Err(Error::internal(
            "an endpoint that waits for nothing was not answered at once",
        )),
        Err(e) if clipper => return clipper::error(&e, id),
        Err(e) if openai => return openai::error(&e, id),
        // A path of none of wirespeed's endpoints: a transcoded service's?
        Err(e) if e.kind() == ErrorKind::RouteNotFound => match &front.fallback {
            Some(fallback) => {
                let answer = Box::pin(fallback.answer(request));
                return match answer.await {
                    Some(answer) => answer,
                    None => response::error(&e, id),
                };
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    };
    settle(result, uri.path(), id)
}
#[cfg(test)]
mod tests {
    fn size_of_future<Fut: std::future::Future>(_: impl FnOnce() -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// Every request's answer is one allocation of this future: the
    /// endpoints with large state (infer, generate, predict...) box their
    /// own, so a `GET /v2` does not allocate and copy an infer's 6 KiB
    /// (it did: 9.8 KiB per request, 5% of `GET /v2`'s time in `memmove`).
    /// Each boxed in a statement of its own: awaited in the statement
    /// that boxed it, a future keeps its room here too (it was 4.6 KiB).
    #[test]
    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn the_answer_future_stays_small() {
        let answer = size_of_future(|| {
            let front: std::sync::Arc<super::Front> = unreachable!("only the type is measured");
            super::answer(
                front,
                hyper::Request::new(wirespeed_http::RequestBody::empty()),
            )
        });
        assert!(answer < 2048, "{answer} bytes");
    }

    /// An infer's future is made and copied level by level as the request
    /// starts: its size is a cost per request. It was 6.1 KiB (the
    /// decoder and the scheduler's future inline, two wrapping `async
    /// fn`s), and about 50 KiB of such copies per Titanic request, 7% of
    /// its time; it is 2.6 KiB.
    #[test]
    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn the_infer_future_stays_small() {
        let infer = size_of_future(|| {
            let front: &super::Front = unreachable!("only the type is measured");
            let context: super::RequestContext = unreachable!();
            super::infer::infer(
                front,
                context,
                wirespeed_engine::pipeline::Target::new("model", None),
                hyper::Request::new(wirespeed_http::RequestBody::empty()),
            )
        });
        assert!(infer < 3072, "{infer} bytes");
    }
}
