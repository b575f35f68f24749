//! A request answered with a stream of responses: a decoupled model's
//! (`Model::decoupled`), as the pipeline hands it to a codec that streams
//! (gRPC `ModelStreamInfer`, `generate_stream`) or to one that answers once
//! (`ResponseStream::only`).
//!
//! The model's run (its scheduler's turn, then its compute until it has
//! taken the request) and its responses overlap: a model may send many
//! responses before its `execute` returns, and the stream's buffer is
//! bounded, so the stream drives the run while it yields responses. The
//! run's own failure (a full queue, an exception in `execute`) is the
//! request's error when it comes before any response (the pipeline waits
//! for that, `first`), and the stream's last item after.
//!
//! Dropping the stream (a client gone) drops the run, which cancels the
//! model's call, and the receiver, which fails the model's next send: the
//! model sees its request cancelled.

use std::future::Future;
use std::pin::Pin;

use std::sync::Arc;
use std::time::Instant;

use wirespeed_core::{Error, InferResponse, OneResponse, ResponseReceiver, Streamed};

use crate::served::ServedModel;

/// The model's run, owned: it ends once the model has taken the request.
pub type Run = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// One response of a stream, ready to encode; `last` when the model
/// flagged it final.
pub struct Item {
    /// The model's response, or its error.
    pub response: Result<InferResponse, Error>,
    /// The model flagged it final.
    pub last: bool,
}

/// A request's stream of responses.
pub struct ResponseStream {
    receiver: ResponseReceiver,
    /// Until it ends.
    run: Option<Run>,
    /// A response that came while the pipeline waited for the first event.
    pending: Option<Streamed>,
    /// The run's failure, when it came with responses already sent: the
    /// stream's last word, after them.
    failed: Option<Error>,
    model_name: String,
    model_version: String,
    id: Option<String>,
    /// Whose server's conventions its responses follow.
    dialect: wirespeed_core::Dialect,
    /// Where its responses' times are counted (time to the first, between
    /// the others), and when the last one came: the request's start
    /// before the first.
    timing: Option<(Arc<ServedModel>, Instant, bool)>,
}

impl ResponseStream {
    /// Counts the stream's response times in `model`'s statistics, from
    /// the request's start `started`.
    pub fn timed(mut self, model: Arc<ServedModel>, started: Instant) -> ResponseStream {
        self.timing = Some((model, started, true));
        self
    }

    /// Waits for the first event of a stream: the run's failure is
    /// returned as the request's error; a response, or the run's success,
    /// makes the stream.
    pub async fn first(
        mut receiver: ResponseReceiver,
        mut run: Run,
        model_name: String,
        model_version: String,
        id: Option<String>,
        dialect: wirespeed_core::Dialect,
    ) -> Result<ResponseStream, Error> {
        let (run, pending, failed) = tokio::select! {
            biased;
            ended = &mut run => match ended {
                Ok(()) => (None, None, None),
                // The model may have sent responses before it failed (an
                // `execute` that raised after them): those first.
                Err(error) => match receiver.try_next() {
                    Some(streamed) => (None, Some(streamed), Some(error)),
                    None => return Err(error),
                },
            },
            streamed = receiver.next() => (Some(run), streamed, None),
        };
        Ok(ResponseStream {
            receiver,
            run,
            pending,
            failed,
            model_name,
            model_version,
            id,
            dialect,
            timing: None,
        })
    }

    /// The next response; `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<Item> {
        if let Some(streamed) = self.pending.take() {
            return Some(self.item(streamed));
        }
        loop {
            let Some(run) = self.run.as_mut() else {
                if let Some(streamed) = self.receiver.next().await {
                    return Some(self.item(streamed));
                }
                return self.failed.take().map(|error| Item {
                    response: Err(error),
                    last: true,
                });
            };
            let received = tokio::select! {
                biased;
                streamed = self.receiver.next() => streamed,
                ended = run => {
                    self.run = None;
                    if let Err(error) = ended {
                        return Some(Item { response: Err(error), last: true });
                    }
                    continue;
                }
            };
            if let Some(streamed) = received {
                return Some(self.item(streamed));
            }
            // The model's senders are gone (its worker ended the request,
            // an `execute` that raised among them): the run's outcome is
            // the stream's last word.
            let ended = match self.run.take() {
                Some(run) => run.await,
                None => Ok(()),
            };
            return ended.err().map(|error| Item {
                response: Err(error),
                last: true,
            });
        }
    }

    fn item(&mut self, streamed: Streamed) -> Item {
        if let (Some((model, last, first)), true) = (&mut self.timing, streamed.result.is_ok()) {
            let now = Instant::now();
            model.stats.streamed(*first, now.duration_since(*last));
            *last = now;
            *first = false;
        }
        Item {
            response: streamed.result.map(|outputs| self.response(outputs)),
            last: streamed.last,
        }
    }

    fn response(&self, mut outputs: Vec<wirespeed_core::Tensor>) -> InferResponse {
        let mut parameters = Vec::new();
        wirespeed_core::lift_response_parameters(&mut outputs, &mut parameters);
        InferResponse {
            model_name: self.model_name.clone(),
            model_version: self.model_version.clone(),
            id: self.id.clone(),
            parameters,
            outputs,
            shared_outputs: Vec::new(),
            dialect: self.dialect,
        }
    }

    /// The request's id, as its responses echo it.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The stream's one response, or `wrong` (an error of the model's)
    /// when it sent none or several: the words an endpoint's peer uses
    /// (Triton's for `generate`).
    pub async fn only_or(mut self, wrong: &str) -> Result<InferResponse, Error> {
        let mut one = OneResponse::default();
        while let Some(item) = self.next().await {
            if !one.take(item.response) {
                break;
            }
        }
        one.exactly_one()
            .unwrap_or_else(|| Err(Error::model_failed(wrong.to_owned())))
    }

    /// The stream's one response, for an endpoint that answers once: an
    /// error when the model sent none or several (Triton's rule for
    /// `generate`). Waits for the stream's end.
    pub async fn only(mut self) -> Result<InferResponse, Error> {
        let mut one = OneResponse::default();
        while let Some(item) = self.next().await {
            if !one.take(item.response) {
                break;
            }
        }
        one.finish(
            &self.model_name,
            "an endpoint that answers once expects exactly 1: ask it through gRPC \
             ModelStreamInfer or generate_stream",
        )
    }
}
