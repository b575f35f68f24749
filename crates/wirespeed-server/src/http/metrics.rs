//! `GET /metrics`, on the REST port and alone on `--metrics ADDR`: the
//! scrape that `crate::metrics` writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use wirespeed_core::{Error, ErrorKind};

use super::response::{self, Body};
use crate::listen::Activity;
use crate::metrics::{self, CONTENT_TYPE as TEXT_FORMAT};
use crate::AppState;

/// The scrape, or a 404 when metrics are off.
pub(crate) fn scrape(state: &AppState) -> Result<Response<Body>, Error> {
    let Some(m) = &state.metrics else {
        return Err(Error::new(
            ErrorKind::RouteNotFound,
            "metrics are off (--metrics off)",
        ));
    };
    let mut answer = Response::new(Body::new(metrics::render(state, m)));
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT));
    Ok(answer)
}

/// The metrics listener's service for one connection: `GET /metrics`,
/// with no bearer token (the listener is meant for a scraper on a private
/// address), and nothing else.
pub(crate) struct MetricsService {
    state: Arc<AppState>,
}

/// Makes the metrics service for each new connection (a scrape is
/// answered at once, so nothing counts it in flight).
pub(crate) fn service(state: Arc<AppState>) -> impl Fn(Arc<Activity>) -> MetricsService {
    move |_| MetricsService {
        state: Arc::clone(&state),
    }
}

impl hyper::service::Service<Request<Incoming>> for MetricsService {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let answer = match (request.method(), request.uri().path()) {
            (&Method::GET | &Method::HEAD, "/metrics") => scrape(&self.state),
            (_, "/metrics") => Err(Error::new(
                ErrorKind::MethodNotAllowed,
                format!("/metrics takes GET, not {}", request.method()),
            )),
            (_, path) => Err(Error::new(
                ErrorKind::RouteNotFound,
                format!("no endpoint at {path}: this port serves /metrics"),
            )),
        };
        let answer = answer.unwrap_or_else(|e| response::error(&e, 0));
        Box::pin(async move { Ok(answer) })
    }
}
