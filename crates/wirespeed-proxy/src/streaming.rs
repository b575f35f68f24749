//! Streaming methods through the proxy.
//!
//! A client stream's body (a JSON array of messages, or newline-delimited
//! ones) is read by a task of its own ([`feed`]): each message is encoded
//! as soon as its closing brace arrives (`JsonToProtoStream`) and sent
//! upstream on the open call, so a long upload is not held back, and a
//! bidirectional call's answers can flow while it is still being sent. A
//! body that does not encode resets the call (the upstream never takes a
//! cut stream for a whole one) and is the answer's 400.
//!
//! A server stream's answers are printed as they come ([`Answers`], the
//! response body): every message already in goes out in one frame, as a
//! JSON array, NDJSON or server-sent events (`StreamFormat`). A stream
//! that ends with an error status ends with an `{"error": status}` line or
//! an `error` event; an array cannot carry it after its messages, so it is
//! cut instead, and no client takes it for whole. A stream that goes
//! quiet for the request timeout, or passes the client's `grpc-timeout`,
//! ends with DEADLINE_EXCEEDED. A client that goes away drops the body,
//! which cancels the call upstream.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::Response;
use prost_reflect::{DescriptorPool, FieldDescriptor, MessageDescriptor};
use tokio::time::Sleep;
use wirespeed_transcode::{
    field_to_json, proto_to_json, status_json, EncodeOptions, JsonToProtoStream, PrintOptions,
    StreamFormat,
};
use wirespeed_upstream::{message_stream, CallBody, CallError, OpenCall};

use wirespeed_http::{Body, BodyReader, BoxError};

use crate::status::{status, Code};

/// How many encoded messages may wait for the upstream to take them.
const QUEUE: usize = 16;

/// A client stream being sent: whether its body failed.
pub(crate) struct Feed {
    failure: Arc<Mutex<Option<String>>>,
}

impl Feed {
    /// The 400 to answer when the client's body did not encode (or could
    /// not be read), which is why the call failed.
    pub(crate) fn failed(&self) -> Option<Response<Body>> {
        let failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure
            .as_deref()
            .map(|why| status(Code::InvalidArgument, why))
    }
}

/// Starts sending a client stream: the body of `reader`, each message of
/// `input` followed by `bound` (the path's and query's fields). Returns
/// the call's request body and the feed's state.
pub(crate) fn feed(
    mut reader: BodyReader,
    input: MessageDescriptor,
    options: EncodeOptions,
    bound: Vec<u8>,
) -> (CallBody, Feed) {
    let (sender, body) = message_stream(QUEUE);
    let failure = Arc::new(Mutex::new(None));
    let feed = Feed {
        failure: Arc::clone(&failure),
    };
    tokio::spawn(async move {
        let mut encoder = JsonToProtoStream::new(input, options);
        let sent: Result<(), String> = async {
            loop {
                let end = match reader.next().await {
                    Ok(Some(frame)) => {
                        encoder.feed(&frame).map_err(|e| e.message().to_owned())?;
                        false
                    }
                    Ok(None) => {
                        encoder.finish().map_err(|e| e.message().to_owned())?;
                        true
                    }
                    Err(e) => return Err(e.message().to_owned()),
                };
                let ready: Vec<Vec<u8>> = encoder.messages().collect();
                for mut message in ready {
                    message.extend_from_slice(&bound);
                    if !sender.send(Bytes::from(message)).await {
                        // The call ended; the upstream takes no more.
                        return Ok(());
                    }
                }
                if end {
                    return Ok(());
                }
            }
        }
        .await;
        match sent {
            // Dropping the sender ends the request stream.
            Ok(()) => drop(sender),
            Err(why) => {
                *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                sender.abort(why).await;
            }
        }
    });
    (body, feed)
}

/// A server stream's answers, to print as they come.
pub(crate) struct Answers {
    pub(crate) call: OpenCall,
    /// The first message, read before the answer's status line.
    pub(crate) first: Option<Bytes>,
    pub(crate) format: StreamFormat,
    pub(crate) output: MessageDescriptor,
    pub(crate) response_body: Option<Vec<FieldDescriptor>>,
    pub(crate) print: PrintOptions,
    pub(crate) pool: DescriptorPool,
    /// How long the stream may go quiet.
    pub(crate) idle: Duration,
    /// The client's deadline for the whole call.
    pub(crate) deadline: Option<Instant>,
    pub(crate) method: String,
}

impl Answers {
    /// The response body.
    pub(crate) fn into_body(self) -> AnswerBody {
        let wait = self.next_wait();
        AnswerBody {
            answers: self,
            started: false,
            printed: 0,
            done: false,
            cut: None,
            flushed: false,
            timer: Box::pin(tokio::time::sleep_until(wait.into())),
        }
    }

    fn next_wait(&self) -> Instant {
        let idle_end = Instant::now() + self.idle;
        self.deadline.map_or(idle_end, |d| d.min(idle_end))
    }
}

/// The response body of a server stream.
pub(crate) struct AnswerBody {
    answers: Answers,
    started: bool,
    printed: u64,
    done: bool,
    /// The error that cuts an array, after the frame that was ready.
    cut: Option<BoxError>,
    /// The answer so far has had a chance to be written out before the cut.
    flushed: bool,
    timer: Pin<Box<Sleep>>,
}

/// The frame gathered for one poll goes out once it is this large.
const FRAME_BYTES: usize = 64 << 10;

impl AnswerBody {
    /// Prints one message, with the format's framing.
    fn print(&mut self, message: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let a = &self.answers;
        a.format.before_message(self.printed == 0, out);
        if a.format == StreamFormat::Raw {
            let (_, data) = crate::http_body::parts(&a.output, message)?;
            out.extend_from_slice(&data);
            a.format.after_message(out);
            self.printed += 1;
            return Ok(());
        }
        let printed = match &a.response_body {
            Some(path) => field_to_json(&a.output, path, message, &a.print, out),
            None => proto_to_json(&a.output, message, &a.print, out),
        };
        printed.map_err(|e| {
            format!(
                "the upstream's answer does not decode as {}: {}",
                a.output.full_name(),
                e.message()
            )
        })?;
        a.format.after_message(out);
        self.printed += 1;
        Ok(())
    }

    /// Ends the stream with an error status.
    fn fail(&mut self, code: i32, message: &str, out: &mut Vec<u8>) {
        self.done = true;
        let a = &self.answers;
        tracing::warn!(
            method = %a.method,
            code,
            error = message,
            messages = self.printed,
            "a transcoded server stream ended with an error"
        );
        let details = a.call.status_details();
        let mut status = Vec::new();
        status_json(
            code,
            message,
            details.as_deref(),
            &a.pool,
            &a.print,
            &mut status,
        );
        if !a.format.error(&status, out) {
            self.cut = Some(
                format!(
                    "the stream failed after {} messages: {message}",
                    self.printed
                )
                .into(),
            );
        }
    }

    /// Cuts the answer, once what was sent so far (its head too, when the
    /// whole stream failed within one poll) has been written out: a body
    /// that is pending lets the connection flush first.
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if !self.flushed {
            self.flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.cut.take().map(Err))
    }

    fn failed_call(&mut self, error: CallError, out: &mut Vec<u8>) {
        let (code, message) = match error {
            CallError::Status { code, message } => (code, message),
            CallError::Deadline => (
                Code::DeadlineExceeded as i32,
                "the stream passed its deadline, or went quiet for the request timeout".to_owned(),
            ),
            other => (
                Code::Internal as i32,
                format!("the upstream stream failed: {other}"),
            ),
        };
        self.fail(code, &message, out);
    }
}

impl hyper::body::Body for AnswerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.cut.is_some() {
            return this.poll_cut(cx);
        }
        if this.done {
            return Poll::Ready(None);
        }
        let mut out = Vec::new();
        if !this.started {
            this.started = true;
            this.answers.format.begin(&mut out);
            if let Some(first) = this.answers.first.take() {
                if let Err(why) = this.print(&first, &mut out) {
                    this.fail(Code::Internal as i32, &why, &mut out);
                }
            } else {
                // The stream ended before its first message.
                this.answers.format.end(&mut out);
                this.done = true;
            }
        }
        while !this.done && out.len() < FRAME_BYTES {
            match this.answers.call.poll_message(cx) {
                Poll::Ready(Ok(Some(message))) => {
                    if let Err(why) = this.print(&message, &mut out) {
                        this.fail(Code::Internal as i32, &why, &mut out);
                    }
                    let wait = this.answers.next_wait();
                    this.timer.as_mut().reset(wait.into());
                }
                Poll::Ready(Ok(None)) => {
                    this.answers.format.end(&mut out);
                    this.done = true;
                }
                Poll::Ready(Err(error)) => this.failed_call(error, &mut out),
                Poll::Pending => {
                    if !out.is_empty() {
                        break;
                    }
                    if this.timer.as_mut().poll(cx).is_ready() {
                        this.failed_call(CallError::Deadline, &mut out);
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
        if out.is_empty() {
            return match this.cut {
                Some(_) => this.poll_cut(cx),
                None => Poll::Ready(None),
            };
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.cut.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
