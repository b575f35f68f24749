//! `GET /metrics`, on the REST port and alone on `--metrics ADDR`: the
//! scrape, in the text format `families.rs` writes.

mod families;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use wirespeed_core::{Error, ErrorKind};
use wirespeed_http::RequestBody;

use crate::net::counts::Connections;
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use families::CONTENT_TYPE as TEXT_FORMAT;

/// What a scrape reads beyond the serving layer's counters.
pub(crate) struct Scrape {
    /// The connections of every listener.
    pub(crate) connections: Arc<Connections>,
    /// CPU, memory and file descriptors of this process.
    pub(crate) process: prometheus::process_collector::ProcessCollector,
}

/// The scrape, or a 404 when metrics are off.
pub(crate) fn scrape(front: &Front) -> Result<Response<Body>, Error> {
    let (Some(scrape), Some(traffic)) = (&front.scrape, &front.engine.traffic) else {
        return Err(Error::new(
            ErrorKind::RouteNotFound,
            "metrics are off (--metrics off)",
        ));
    };
    let mut answer = Response::new(Body::new(families::render(
        &front.engine,
        front.repository.mirrors(),
        traffic,
        scrape,
    )));
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT));
    Ok(answer)
}

/// The metrics listener's service: `GET /metrics`, with no bearer token
/// (the listener is meant for a scraper on a private address), and
/// nothing else.
#[derive(Clone)]
pub(crate) struct MetricsService {
    front: Arc<Front>,
}

impl MetricsService {
    pub(crate) fn new(front: Arc<Front>) -> MetricsService {
        MetricsService { front }
    }
}

impl hyper::service::Service<Request<RequestBody>> for MetricsService {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, request: Request<RequestBody>) -> Self::Future {
        let answer = match (request.method(), request.uri().path()) {
            (&Method::GET | &Method::HEAD, "/metrics") => scrape(&self.front),
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
