//! The REST APIs over HTTP/1.1 and HTTP/2 (h2c), on hyper: the Open
//! Inference Protocol, TF Serving's and Clipper's.
//!
//! `listen.rs` accepts connections; [`RestService`] answers each request:
//! it checks the bearer token, `dispatch` routes the request to one
//! endpoint module and turns errors into the protocol's error body.

mod body;
mod clipper;
mod health;
mod infer;
mod metadata;
mod response;
mod router;
mod tfserving;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::{Request, Response};
use wirespeed_core::{Error, ErrorKind};

use crate::listen::Activity;
use crate::AppState;
use response::Body;
use router::Route;

/// The REST service of one connection.
pub(crate) struct RestService {
    state: Arc<AppState>,
    activity: Arc<Activity>,
}

/// Makes the REST service for each new connection.
pub(crate) fn service(state: Arc<AppState>) -> impl Fn(Arc<Activity>) -> RestService {
    move |activity| RestService {
        state: Arc::clone(&state),
        activity,
    }
}

impl hyper::service::Service<Request<Incoming>> for RestService {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let state = Arc::clone(&self.state);
        let in_flight = self.activity.begin();
        Box::pin(async move {
            let response = answer(&state, request).await;
            drop(in_flight);
            Ok(response)
        })
    }
}

/// Answers one request, with its id in the log and in server errors.
async fn answer(state: &AppState, request: Request<Incoming>) -> Response<Body> {
    let id = state.request_ids.fetch_add(1, Ordering::Relaxed);
    if !tracing::enabled!(target: "wirespeed_server::access", tracing::Level::DEBUG) {
        return dispatch(state, request, id).await;
    }
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = dispatch(state, request, id).await;
    // The access log: never the body, so never tensor data.
    tracing::debug!(
        target: "wirespeed_server::access",
        request_id = id,
        %method,
        path,
        status = response.status().as_u16(),
        micros = started.elapsed().as_micros() as u64,
    );
    response
}

/// Whether `request` carries the server's bearer token, when it has one.
/// The comparison takes the same time wherever the first difference is.
fn authorized(state: &AppState, request: &Request<Incoming>) -> bool {
    let Some(token) = &state.auth_token else {
        return true;
    };
    let Some(given) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    crate::constant_time_eq(given, token.as_bytes())
}

/// Routes one request and answers it.
async fn dispatch(state: &AppState, request: Request<Incoming>, id: u64) -> Response<Body> {
    // A cheap reference-counted clone, so the route can borrow the path
    // while the request moves into its handler.
    let uri = request.uri().clone();
    // hyper reads headers into its ~400 KiB connection buffer, which large
    // bodies also stream through (a smaller one costs large JSON bodies
    // ~15 %), so the header limit is checked here, once they are parsed.
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + uri.path_and_query().map_or(0, |p| p.as_str().len());
    if header_bytes > state.limits.max_header_bytes {
        let e = Error::new(
            ErrorKind::HeadersTooLarge,
            format!(
                "the request line and headers are {header_bytes} bytes, over the limit of {}",
                state.limits.max_header_bytes
            ),
        );
        let mut response = response::error(&e, id);
        response
            .headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    if !uri.path().starts_with("/v2/health/") && !authorized(state, &request) {
        let e = Error::new(
            ErrorKind::Unauthenticated,
            "this server needs 'Authorization: Bearer <token>'",
        );
        let mut response = response::error(&e, id);
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let result = match router::route(request.method(), uri.path()) {
        Ok(Route::Live) => Ok(health::live()),
        Ok(Route::Ready) => Ok(health::ready(state)),
        Ok(Route::ServerMetadata) => Ok(metadata::server()),
        Ok(Route::ModelMetadata(model)) => metadata::model(state, model),
        Ok(Route::ModelReady(model)) => health::model_ready(state, model),
        Ok(Route::Infer(model)) => infer::infer(state, model, request).await,
        Ok(Route::TfStatus(model)) => tfserving::status(state, model),
        Ok(Route::TfMetadata(model)) => tfserving::metadata(state, model),
        Ok(Route::TfPredict(model)) => tfserving::predict(state, model, request).await,
        Ok(Route::TfOtherVerb(verb)) => Err(tfserving::other_verb(verb)),
        Ok(Route::ClipperPredict(app)) => return clipper::predict(state, app, request, id).await,
        // Clipper's clients expect Clipper's error shape, even for a wrong method.
        Err(e) if router::is_clipper(uri.path()) => return clipper::error(&e, id),
        Err(e) => Err(e),
    };
    result.unwrap_or_else(|e| response::error(&e, id))
}
