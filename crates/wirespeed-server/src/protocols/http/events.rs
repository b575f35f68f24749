//! Server-sent events: a decoupled model's stream of responses as a
//! `text/event-stream` body, each response one `data: ...\n\n` event made
//! when the model sends it (Triton's `generate_stream`, OpenAI's streams).
//!
//! The body pulls the stream only when hyper asks for the next frame, so
//! a slow reader slows the model (the stream's buffer is bounded), and a
//! client that leaves drops the body, the stream with it, and so cancels
//! the model's request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use wirespeed_http::BoxError;

use super::response::Body;
use wirespeed_engine::stream::{Item, ResponseStream};

/// Writes one response as an event's payload (what goes between `data: `
/// and the blank line), into the event's own buffer.
pub(crate) type Encode = Box<dyn FnMut(Item, &mut Vec<u8>) + Send>;

/// Writes one response as whole events (`data: ...` and the blank line
/// each, or nothing for a response that makes none).
pub(crate) type EncodeEvents = Box<dyn FnMut(Item, &mut Vec<u8>) + Send>;

/// Writes the events that follow the stream's last response (OpenAI's
/// usage and `[DONE]`).
pub(crate) type End = Box<dyn FnOnce(&mut Vec<u8>) + Send>;

type Next = Pin<Box<dyn Future<Output = Option<(Item, ResponseStream)>> + Send>>;

fn pull(mut stream: ResponseStream) -> Next {
    Box::pin(async move {
        let item = stream.next().await?;
        Some((item, stream))
    })
}

/// A 200 `text/event-stream` answer: one event per response of
/// `stream`, as `encode` writes it.
pub(crate) fn answer(stream: ResponseStream, mut encode: Encode) -> Response<Body> {
    answer_with_end(
        stream,
        Box::new(move |item, out| {
            out.extend_from_slice(b"data: ");
            encode(item, out);
            out.extend_from_slice(b"\n\n");
        }),
        None,
    )
}

/// A 200 `text/event-stream` answer: the events `encode` writes for each
/// response of `stream`, then the ones `end` writes.
pub(crate) fn answer_with_end(
    stream: ResponseStream,
    encode: EncodeEvents,
    end: Option<End>,
) -> Response<Body> {
    let body = Events {
        next: Some(pull(stream)),
        encode,
        end,
    };
    let mut response = Response::new(Body::stream(body));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One event's bytes: `data: `, the payload `write` writes, a blank line.
pub(crate) fn event(write: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    let mut event = Vec::with_capacity(128);
    event.extend_from_slice(b"data: ");
    write(&mut event);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

struct Events {
    /// `None` once the stream has ended.
    next: Option<Next>,
    encode: EncodeEvents,
    /// Written once the stream has ended.
    end: Option<End>,
}

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(next) = this.next.as_mut() else {
                return Poll::Ready(this.end.take().map(|end| {
                    let mut out = Vec::with_capacity(256);
                    end(&mut out);
                    Ok(Frame::data(Bytes::from(out)))
                }));
            };
            match next.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.next = None,
                Poll::Ready(Some((item, stream))) => {
                    this.next = Some(pull(stream));
                    let mut out = Vec::with_capacity(128);
                    (this.encode)(item, &mut out);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.next.is_none() && self.end.is_none()
    }
}
