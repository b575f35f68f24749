//! Calls on the wire: an HTTP/2 server (hyper's) stands in for the
//! upstream and shows what reached it.
//!
//! - A client stream whose sender gives up must reach it as a reset, never
//!   as an end: a server would otherwise answer a cut upload as a whole
//!   one. (Python's grpcio cannot tell the two apart reliably: its request
//!   iterator may end cleanly when a reset wins the race with its
//!   cancellation, so this is checked here, where the wire is seen as it
//!   is.)
//! - An upstream that resets a call when the `grpc-timeout` it was sent
//!   runs out (as grpc-go does) gave up on time, not from ill health: the
//!   replica is never ejected for it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::http::{HeaderMap, HeaderValue, Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use wirespeed_upstream::{message_stream, Address, Upstream, UpstreamOptions};

/// How a request body ended: its bytes, or the error that cut it.
type Ending = Result<Vec<u8>, String>;

/// A response body that stays open until the request's body has ended,
/// then closes with `grpc-status: 0` (a server that ended its answer
/// first would tell the client to stop sending).
struct AfterRequest(oneshot::Receiver<()>);

impl Body for AfterRequest {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match Pin::new(&mut self.0).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => {
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Ready(Err(_)) => Poll::Ready(None),
        }
    }
}

/// What the stand-in upstream does with a request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers once the request's body has ended, and reports how it did.
    Record,
    /// Resets the call when its `grpc-timeout` runs out, as grpc-go does.
    ResetAtTimeout,
}

/// Serves HTTP/2 on a loopback port; with [`Behaviour::Record`], every
/// request's ending is sent on the returned channel.
async fn server(behaviour: Behaviour) -> (String, mpsc::UnboundedReceiver<Ending>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (endings, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let endings = endings.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let endings = endings.clone();
                    answer(behaviour, request, endings)
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
                        .await;
            });
        }
    });
    (format!("grpc://127.0.0.1:{port}"), received)
}

type Answer = Result<Response<AfterRequest>, std::io::Error>;

/// The stand-in upstream's answer to `request`; an error resets the call.
fn answer(
    behaviour: Behaviour,
    request: Request<Incoming>,
    endings: mpsc::UnboundedSender<Ending>,
) -> Pin<Box<dyn Future<Output = Answer> + Send>> {
    if let Behaviour::ResetAtTimeout = behaviour {
        let timeout = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(timeout_of);
        return Box::pin(async move {
            let failure = match timeout {
                Some(timeout) => {
                    tokio::time::sleep(timeout).await;
                    "the deadline passed"
                }
                None => "no grpc-timeout",
            };
            Err(std::io::Error::other(failure))
        });
    }
    let (done, answered) = oneshot::channel();
    tokio::spawn(async move {
        let ending = match request.into_body().collect().await {
            Ok(body) => Ok(body.to_bytes().to_vec()),
            Err(e) => Err(e.to_string()),
        };
        let _ = endings.send(ending);
        let _ = done.send(());
    });
    let response = Response::builder()
        .header("content-type", "application/grpc")
        .body(AfterRequest(answered))
        .unwrap();
    Box::pin(async move { Ok(response) })
}

/// A `grpc-timeout` in the units wirespeed sends.
fn timeout_of(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    match unit {
        "u" => Some(Duration::from_micros(n)),
        "m" => Some(Duration::from_millis(n)),
        _ => None,
    }
}

async fn upstream(url: &str) -> std::sync::Arc<Upstream> {
    let address: Address = url.parse().unwrap();
    Upstream::new(vec![address], UpstreamOptions::default()).unwrap()
}

/// A client stream opened on a recording server: its sender, the
/// server's endings, and the open call (kept while the stream is sent).
async fn upload() -> (
    wirespeed_upstream::MessageSender,
    mpsc::UnboundedReceiver<Ending>,
    wirespeed_upstream::OpenCall,
) {
    let (url, endings) = server(Behaviour::Record).await;
    let upstream = upstream(&url).await;
    let (sender, body) = message_stream(4);
    let call = upstream
        .open("/test.Library/Upload", body, &HeaderMap::new(), None)
        .await
        .expect("the call opens");
    (sender, endings, call)
}

#[tokio::test]
async fn a_stream_given_up_reaches_the_server_as_a_reset() {
    let (sender, mut endings, _call) = upload().await;
    assert!(sender.send(Bytes::from_static(b"first")).await);
    sender.abort("message 2 does not encode".to_owned()).await;
    let ending = endings.recv().await.expect("the server saw the request");
    assert!(
        ending.is_err(),
        "the cut stream ended as a whole one: {ending:?}"
    );
}

#[tokio::test]
async fn a_stream_whose_sender_is_dropped_ends_whole() {
    let (sender, mut endings, _call) = upload().await;
    assert!(sender.send(Bytes::from_static(b"first")).await);
    assert!(sender.send(Bytes::from_static(b"second")).await);
    drop(sender);
    let ending = endings.recv().await.expect("the server saw the request");
    let mut expected = Vec::new();
    for message in [&b"first"[..], b"second"] {
        expected.extend_from_slice(&wirespeed_upstream::message_prefix(message.len()));
        expected.extend_from_slice(message);
    }
    assert_eq!(ending, Ok(expected));
}

#[tokio::test]
async fn a_call_reset_as_its_deadline_passes_never_ejects_the_replica() {
    let (url, _) = server(Behaviour::ResetAtTimeout).await;
    let options = UpstreamOptions {
        eject_after: 1,
        retries: 0,
        ..UpstreamOptions::default()
    };
    let upstream = Upstream::new(vec![url.parse::<Address>().unwrap()], options).unwrap();
    for _ in 0..20 {
        let deadline = Instant::now() + Duration::from_micros(2_500);
        let error = upstream
            .unary(
                "/test.Library/Slow",
                Bytes::new(),
                &HeaderMap::new(),
                Some(deadline),
            )
            .await
            .expect_err("the upstream never answers");
        assert_eq!(
            error.error,
            wirespeed_upstream::CallError::Deadline,
            "{error}"
        );
    }
    assert_eq!(upstream.status(), Ok(()));
}
