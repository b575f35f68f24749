//! The Open Inference Protocol over HTTP/1.1 and HTTP/2 (h2c), on hyper.
//!
//! `serve` accepts connections and hands each to hyper; `dispatch` routes
//! every request to one endpoint module and turns errors into the protocol's
//! error body.

mod body;
mod clipper;
mod health;
mod infer;
mod metadata;
mod response;
mod router;
mod tfserving;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::AppState;
use response::Body;
use router::Route;

/// A listening socket the REST API accepts connections on.
pub(crate) trait Listener {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// The next connection, with a description of the peer for logs.
    fn accept(&self) -> impl Future<Output = std::io::Result<(Self::Io, String)>>;
}

impl Listener for TcpListener {
    type Io = TcpStream;

    async fn accept(&self) -> std::io::Result<(TcpStream, String)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }
}

impl Listener for UnixListener {
    type Io = UnixStream;

    async fn accept(&self) -> std::io::Result<(UnixStream, String)> {
        let (stream, _) = UnixListener::accept(self).await?;
        Ok((stream, "unix".to_owned()))
    }
}

/// Accepts connections on `listener` until `shutdown` resolves, then waits
/// up to `drain` for open connections to finish their requests.
pub(crate) async fn serve(
    listener: impl Listener,
    state: Arc<AppState>,
    drain: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off
                        // instead of spinning, and keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let state = Arc::clone(&state);
                let service = service_fn(move |request| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(dispatch(&state, request).await) }
                });
                let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain deadline passed; closing remaining connections");
    }
}

/// Routes one request and answers it.
async fn dispatch(state: &AppState, request: Request<Incoming>) -> Response<Body> {
    // A cheap reference-counted clone, so the route can borrow the path
    // while the request moves into its handler.
    let uri = request.uri().clone();
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
        Ok(Route::ClipperPredict(app)) => return clipper::predict(state, app, request).await,
        // Clipper's clients expect Clipper's error shape, even for a wrong method.
        Err(e) if router::is_clipper(uri.path()) => return clipper::error(&e),
        Err(e) => Err(e),
    };
    result.unwrap_or_else(|e| response::error(&e))
}
