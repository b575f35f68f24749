//! A model's answer as a stream of responses: Triton's *decoupled* models,
//! which answer one request with zero or more responses, then a final
//! flag (a generator of tokens, a model that repeats its input).
//!
//! A model that streams ([`Model::decoupled`](crate::Model::decoupled))
//! gets a [`ResponseSender`] in its [`InferCall`](crate::InferCall); the
//! server keeps the [`ResponseReceiver`] and writes each response as its
//! protocol streams them (a gRPC stream message, a server-sent event). The
//! stream ends when every sender is dropped: that is the final flag. A
//! response sent with [`ResponseSender::send_last`] carries the flag
//! itself, as Triton's `send(response, flags=FINAL)` does.
//!
//! The channel is bounded: a reader slower than the model makes the
//! model's sends wait (never unbounded memory), and a reader that leaves
//! (a client gone) makes them fail at once, which is how a model learns it
//! was cancelled. Tokio's channel alone, not its runtime: the sender is
//! used from async tasks and from plain threads alike.

use tokio::sync::mpsc;

use crate::{Error, Tensor};

/// Responses a stream holds before the model's sends wait: enough to
/// keep a model and its reader both busy, small enough that a stalled
/// reader holds little.
pub const STREAM_BUFFER: usize = 32;

/// One response of a stream: its outputs (in the request's order), or
/// its error; and whether the model said it is the last.
#[derive(Debug)]
pub struct Streamed {
    /// The outputs, or the response's error.
    pub result: Result<Vec<Tensor>, Error>,
    /// The model flagged this response final.
    pub last: bool,
}

/// The reader of a stream has gone (the client left): nothing more is
/// wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// The model's end of a stream.
#[derive(Debug, Clone)]
pub struct ResponseSender {
    sender: mpsc::Sender<Streamed>,
}

/// The server's end of a stream.
#[derive(Debug)]
pub struct ResponseReceiver {
    receiver: mpsc::Receiver<Streamed>,
}

/// A stream of at most [`STREAM_BUFFER`] responses in flight.
pub fn response_channel() -> (ResponseSender, ResponseReceiver) {
    let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
    (ResponseSender { sender }, ResponseReceiver { receiver })
}

impl ResponseSender {
    /// Sends one response, waiting while the stream is full.
    pub async fn send(&self, result: Result<Vec<Tensor>, Error>) -> Result<(), Gone> {
        self.sender
            .send(Streamed {
                result,
                last: false,
            })
            .await
            .map_err(|_| Gone)
    }

    /// Sends one response from a thread outside any async runtime,
    /// blocking it while the stream is full; `last` flags it final.
    pub fn send_blocking(
        &self,
        result: Result<Vec<Tensor>, Error>,
        last: bool,
    ) -> Result<(), Gone> {
        self.sender
            .blocking_send(Streamed { result, last })
            .map_err(|_| Gone)
    }

    /// Sends one response if the stream has room now.
    pub fn try_send(&self, result: Result<Vec<Tensor>, Error>, last: bool) -> Result<(), Gone> {
        self.sender
            .try_send(Streamed { result, last })
            .map_err(|_| Gone)
    }

    /// Sends the final response, waiting while the stream is full.
    pub async fn send_last(&self, result: Result<Vec<Tensor>, Error>) -> Result<(), Gone> {
        self.sender
            .send(Streamed { result, last: true })
            .await
            .map_err(|_| Gone)
    }

    /// The reader has gone: the request is cancelled.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// What a caller that takes one answer (an endpoint that answers once, a
/// warmup, a BLS call) makes of a stream: its one response, Triton's rule
/// for `generate`.
#[derive(Debug)]
pub struct OneResponse<T> {
    first: Option<Result<T, Error>>,
    count: usize,
}

impl<T> Default for OneResponse<T> {
    fn default() -> Self {
        OneResponse {
            first: None,
            count: 0,
        }
    }
}

impl<T> OneResponse<T> {
    /// Takes the stream's next response; false once there are two, when
    /// nothing more is wanted (dropping the stream cancels the rest).
    pub fn take(&mut self, response: Result<T, Error>) -> bool {
        self.count += 1;
        if self.count == 1 {
            self.first = Some(response);
        }
        self.count == 1
    }

    /// The one response, if the stream had exactly one.
    pub fn exactly_one(self) -> Option<Result<T, Error>> {
        match (self.first, self.count) {
            (Some(response), 1) => Some(response),
            _ => None,
        }
    }

    /// The one response, or the error for none or several, naming
    /// `model`; `expects` says who takes one and what to do instead.
    pub fn finish(self, model: &str, expects: &str) -> Result<T, Error> {
        let sent = match (self.first, self.count) {
            (Some(response), 1) => return response,
            (_, 0) => "no response",
            _ => "more than one response",
        };
        Err(Error::model_failed(format!(
            "model '{model}' is decoupled and sent {sent} to this request; {expects}"
        )))
    }
}

impl ResponseReceiver {
    /// The next response; `None` once the stream has ended (every sender
    /// dropped).
    pub async fn next(&mut self) -> Option<Streamed> {
        self.receiver.recv().await
    }

    /// The next response if one is waiting now, without waiting.
    pub fn try_next(&mut self) -> Option<Streamed> {
        self.receiver.try_recv().ok()
    }

    /// [`next`](Self::next), for a poll-based stream.
    pub fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Streamed>> {
        self.receiver.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_ends_when_its_senders_go_and_a_gone_reader_fails_sends() {
        let (sender, mut receiver) = response_channel();
        let other = sender.clone();
        std::thread::spawn(move || {
            sender.send_blocking(Ok(vec![]), false).unwrap();
            other.send_blocking(Ok(vec![]), true).unwrap();
        })
        .join()
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            assert!(!receiver.next().await.unwrap().last);
            assert!(receiver.next().await.unwrap().last);
            assert!(receiver.next().await.is_none());
        });
        let (sender, receiver) = response_channel();
        drop(receiver);
        assert!(sender.is_closed());
        assert_eq!(sender.send_blocking(Ok(vec![]), false), Err(Gone));
    }

    #[test]
    fn one_response_is_taken_and_none_or_several_are_refused() {
        let mut one = OneResponse::default();
        assert!(one.take(Ok(7)));
        assert_eq!(one.finish("m", "x").unwrap(), 7);
        let none = OneResponse::<u8>::default()
            .finish("m", "ask a stream")
            .unwrap_err();
        assert!(none.message().contains("no response") && none.message().contains("ask a stream"));
        let mut two = OneResponse::default();
        assert!(two.take(Ok(1)));
        assert!(!two.take(Ok(2)));
        assert!(two
            .finish("m", "x")
            .unwrap_err()
            .message()
            .contains("more than one"));
    }

    #[test]
    fn a_full_stream_holds_its_sender_until_the_reader_takes_one() {
        let (sender, mut receiver) = response_channel();
        for _ in 0..STREAM_BUFFER {
            sender.send_blocking(Ok(vec![]), false).unwrap();
        }
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = sent.clone();
        let thread = std::thread::spawn(move || {
            sender.send_blocking(Ok(vec![]), true).unwrap();
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        // The buffer is full: the send cannot have completed.
        assert!(!sent.load(std::sync::atomic::Ordering::SeqCst));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async { receiver.next().await.unwrap() });
        thread.join().unwrap();
        assert!(sent.load(std::sync::atomic::Ordering::SeqCst));
        let mut count = 0;
        runtime.block_on(async {
            while receiver.next().await.is_some() {
                count += 1;
            }
        });
        assert_eq!(count, STREAM_BUFFER);
    }
}
