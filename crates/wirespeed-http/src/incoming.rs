//! A request's body as the codecs read it: hyper's stream, for the
//! requests hyper parsed, or bytes already whole, for the requests the
//! server's HTTP/1 fast path parsed in place from one read. The codecs
//! read both the same way, as frames.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// A request body: streamed by hyper, or whole.
#[derive(Debug)]
pub struct RequestBody(Source);

#[derive(Debug)]
enum Source {
    Streamed(Incoming),
    /// The body's bytes, until they are read; `None` after.
    Whole(Option<Bytes>),
}

impl RequestBody {
    /// A body whose bytes have all arrived.
    pub fn whole(bytes: Bytes) -> RequestBody {
        RequestBody(Source::Whole((!bytes.is_empty()).then_some(bytes)))
    }

    /// A body with no bytes.
    pub fn empty() -> RequestBody {
        RequestBody(Source::Whole(None))
    }
}

impl From<Incoming> for RequestBody {
    fn from(body: Incoming) -> RequestBody {
        RequestBody(Source::Streamed(body))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().0 {
            Source::Streamed(body) => Pin::new(body).poll_frame(cx),
            Source::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Source::Streamed(body) => body.is_end_stream(),
            Source::Whole(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Source::Streamed(body) => body.size_hint(),
            Source::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_whole_body_is_one_frame_then_its_end() {
        let mut body = RequestBody::whole(Bytes::from_static(b"{\"a\":1}"));
        assert_eq!(body.size_hint().exact(), Some(7));
        assert!(!body.is_end_stream());
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"{\"a\":1}"));
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
        assert!(RequestBody::whole(Bytes::new()).is_end_stream());
    }
}
