//! Server-sent events: a decoupled model's stream of responses as a
//! `text/event-stream` body, each response one `data: ...\n\n` event made
//! when the model sends it (Triton's `generate_stream`, OpenAI's streams).
//!
//! The body pulls the stream only when hyper asks for the next frame, so
//! a slow reader slows the model (the stream's buffer is bounded), and a
//! client that leaves drops the body, the stream with it, and so cancels
//! the model's request. Responses that come together go out together, in
//! one frame and one write: after the first frame (the head and the first
//! events, at once), the body yields while responses keep coming within
//! one turn of the scheduler, for 20 µs at most, and then writes them all.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use wirespeed_http::BoxError;

use super::response::Body;
use crate::serve::stream::{Item, ResponseStream};

/// Writes one response as an event's payload (what goes between `data: `
/// and the blank line), into the event's own buffer.
pub(crate) type Encode = Box<dyn FnMut(Item, &mut Vec<u8>) + Send>;

/// Writes one response as whole events (`data: ...` and the blank line
/// each, or nothing for a response that makes none).
pub(crate) type EncodeEvents = Box<dyn FnMut(Item, &mut Vec<u8>) + Send>;

/// Writes the events that follow the stream's last response (OpenAI's
/// usage and `[DONE]`).
pub(crate) type End = Box<dyn FnOnce(&mut Vec<u8>) + Send>;

/// The most bytes of events made into one frame.
const COALESCED: usize = 64 << 10;

/// The longest a response waits for others to join its frame.
const HELD: Duration = Duration::from_micros(20);

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
        stream: Some(stream),
        out: Vec::new(),
        started: false,
        progressed: false,
        held_since: Instant::now(),
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
    stream: Option<ResponseStream>,
    /// The events of the next frame so far.
    out: Vec<u8>,
    /// The first frame has gone.
    started: bool,
    /// Responses have come since the task last yielded.
    progressed: bool,
    /// When the first response of the next frame came.
    held_since: Instant,
    encode: EncodeEvents,
    /// Written once the stream has ended.
    end: Option<End>,
}

impl Events {
    /// The events so far, as one frame.
    fn flush(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.started = true;
        self.progressed = false;
        let out = std::mem::take(&mut self.out);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
    }
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
            let Some(stream) = this.stream.as_mut() else {
                if let Some(end) = this.end.take() {
                    end(&mut this.out);
                }
                return if this.out.is_empty() {
                    Poll::Ready(None)
                } else {
                    this.flush()
                };
            };
            match stream.poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    if this.out.is_empty() {
                        this.held_since = Instant::now();
                    }
                    (this.encode)(item, &mut this.out);
                    this.progressed = true;
                    if this.out.len() >= COALESCED {
                        return this.flush();
                    }
                }
                Poll::Ready(None) => this.stream = None,
                Poll::Pending if this.out.is_empty() => return Poll::Pending,
                // The head and the first events go at once.
                Poll::Pending if !this.started => return this.flush(),
                // Responses came since the task last yielded: it yields
                // again, so that what has already been read (by an
                // upstream connection's own task, one chunk at a time)
                // joins them in the same frame, and so the same write; for
                // HELD at most, so a steady stream is not held back.
                Poll::Pending if this.progressed && this.held_since.elapsed() < HELD => {
                    this.progressed = false;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => return this.flush(),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_none() && self.end.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use hyper::body::Body as _;
    use wirespeed_core::{response_channel, Tensor, TensorData};

    fn piece(n: u8) -> Result<Vec<Tensor>, wirespeed_core::Error> {
        Ok(vec![Tensor {
            name: "t".into(),
            shape: vec![1],
            data: TensorData::Bytes(vec![vec![b'0' + n]]),
        }])
    }

    fn events(stream: ResponseStream) -> Events {
        Events {
            stream: Some(stream),
            out: Vec::new(),
            started: false,
            progressed: false,
            held_since: Instant::now(),
            encode: Box::new(|item, out| {
                let response = item.response.unwrap();
                let TensorData::Bytes(items) = &response.outputs[0].data else {
                    panic!("not bytes")
                };
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&items[0]);
                out.extend_from_slice(b"\n\n");
            }),
            end: Some(Box::new(|out| out.extend_from_slice(b"data: end\n\n"))),
        }
    }

    #[tokio::test]
    async fn responses_sent_together_go_out_in_one_frame() {
        let (sender, receiver) = response_channel();
        for n in 1..=3 {
            sender.send(piece(n)).await.unwrap();
        }
        let run: crate::serve::stream::Run = Box::pin(std::future::pending());
        let stream = ResponseStream::first(receiver, run, "m".into(), "1".into(), None)
            .await
            .unwrap();
        let mut body = events(stream);
        let frame =
            |f: Option<Result<Frame<Bytes>, BoxError>>| f.unwrap().unwrap().into_data().unwrap();
        // The first frame goes at once, with all that had come.
        let first = frame(body.frame().await);
        assert_eq!(&first[..], b"data: 1\n\ndata: 2\n\ndata: 3\n\n");
        // Two more sent together: one frame.
        sender.send(piece(4)).await.unwrap();
        sender.send(piece(5)).await.unwrap();
        assert_eq!(&frame(body.frame().await)[..], b"data: 4\n\ndata: 5\n\n");
        // A lone one still goes, once nothing else comes.
        sender.send(piece(6)).await.unwrap();
        assert_eq!(&frame(body.frame().await)[..], b"data: 6\n\n");
        drop(sender);
        assert!(!body.is_end_stream());
        let rest = frame(body.frame().await);
        assert_eq!(&rest[..], b"data: end\n\n");
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }
}
