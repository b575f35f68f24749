//! gRPC calls over one HTTP/2 connection, written on hyper's client rather
//! than through tonic's: the unary calls of upstream models ([`unary`]),
//! and calls of any method, streaming either way, for the transcoding
//! proxy ([`open`], [`OpenCall`]).
//!
//! tonic's client encodes each message into one buffer, so every raw
//! tensor would be copied into it, and it sends each call through a
//! buffer task. Here the request body is the message's length prefix and
//! fields followed by each tensor's own buffer as a data frame of its own
//! ([`Chunks`]), and the call runs on the caller's task. The answer is read
//! frame by frame: its length prefix is checked against the limit before
//! anything is kept, a message that arrived in one frame is kept as that
//! frame (no copy), and the status comes from the trailers (or the headers
//! of a trailers-only answer).

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE, TE, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use prost::Message;
use wirespeed_core::TraceContext;

use crate::body::{CallBody, Chunks};
use crate::channel::{Channel, Held};
use crate::error::CallError;

/// The `user-agent` of every call.
const AGENT: &str = concat!("wirespeed/", env!("CARGO_PKG_VERSION"));

/// The 5-byte prefix of an uncompressed gRPC message of `len` bytes: a
/// zero flag byte, then the length, big-endian. Every message wirespeed
/// sends is framed by it.
pub fn message_prefix(len: usize) -> [u8; 5] {
    let mut prefix = [0u8; 5];
    prefix[1..].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    prefix
}

/// A gRPC message with its 5-byte length prefix (uncompressed).
pub fn frame(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_slice(&message_prefix(len));
    message
        .encode(&mut buf)
        .expect("the buffer has the message's length");
    buf.freeze()
}

/// A call's body of one encoded message (unframed): its prefix, then the
/// message itself, not copied.
pub fn framed(message: Bytes) -> CallBody {
    let prefix = Bytes::copy_from_slice(&message_prefix(message.len()));
    CallBody::from(Chunks::new([prefix, message]))
}

/// One call's request: the method's path, the framed message, the
/// deadline, and headers to add (a token, say).
pub(crate) struct Call<'a> {
    pub(crate) path: &'a str,
    pub(crate) body: Chunks,
    pub(crate) deadline: Option<Instant>,
    pub(crate) headers: &'a HeaderMap,
    /// The W3C trace context to send on.
    pub(crate) trace: Option<&'a TraceContext>,
    pub(crate) max_message: usize,
}

/// The `grpc-timeout` header for what is left until `deadline`, rounded
/// up: microseconds while they fit gRPC's eight digits (100 s), else
/// milliseconds; at least one. Never shorter than what is left, so the
/// upstream gives up after the caller does and its reset of an expired
/// call is not taken for a broken replica.
fn grpc_timeout(deadline: Instant) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .as_nanos();
    let micros = left.div_ceil(1_000).max(1);
    let value = if micros <= MAX {
        format!("{micros}u")
    } else {
        format!("{}m", left.div_ceil(1_000_000).min(MAX))
    };
    HeaderValue::from_str(&value).expect("digits and a unit")
}

/// A gRPC request of `path` on `channel`, with the time left until
/// `deadline` as its `grpc-timeout` and `headers` added.
fn request(
    channel: &Channel,
    path: &str,
    body: CallBody,
    deadline: Option<Instant>,
    headers: &HeaderMap,
) -> Result<Request<CallBody>, CallError> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(channel.uri(path))
        .header(CONTENT_TYPE, "application/grpc")
        .header(TE, "trailers")
        .header(USER_AGENT, AGENT)
        .body(body)
        .map_err(|e| CallError::Protocol(format!("cannot make the request: {e}")))?;
    let all = request.headers_mut();
    if let Some(deadline) = deadline {
        all.insert("grpc-timeout", grpc_timeout(deadline));
    }
    // A name's first value replaces ours (a configured user-agent, say);
    // its others are added.
    let mut previous = None;
    for (name, value) in headers {
        if previous == Some(name) {
            all.append(name, value.clone());
        } else {
            all.insert(name, value.clone());
        }
        previous = Some(name);
    }
    Ok(request)
}

/// Makes `call` on one of `channel`'s connections and returns the answer's
/// message.
pub(crate) async fn unary(channel: &Channel, call: Call<'_>) -> Result<Bytes, CallError> {
    let deadline = call.deadline;
    let answer = async {
        let held = channel.connection().await?;
        let mut request = request(
            channel,
            call.path,
            CallBody::from(call.body),
            deadline,
            call.headers,
        )?;
        let headers = request.headers_mut();
        if let Some(trace) = call.trace {
            crate::rest::trace_headers(headers, trace);
        }
        let mut sender = held.connection.sender.clone();
        let response = sender
            .try_send_request(request)
            .await
            .map_err(CallError::from_send)?;
        let answer = read_answer(response, call.max_message).await;
        drop(held);
        answer
    };
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline.into(), answer)
            .await
            .unwrap_or(Err(CallError::Deadline)),
        None => answer.await,
    }
}

/// Opens a call of `path` on one of `channel`'s connections, sending
/// `body`, and returns the answer once its headers are in. A `body` that
/// never went out is handed back in `unsent` (so another replica may take
/// it).
pub(crate) async fn open(
    channel: &Channel,
    call: OpenRequest<'_>,
    unsent: &mut Option<CallBody>,
) -> Result<OpenCall, CallError> {
    let held = channel.connection().await?;
    let Some(body) = unsent.take() else {
        return Err(CallError::Broken(
            "the request stream went to a replica that failed".to_owned(),
        ));
    };
    let abandoned = match &body {
        CallBody::Stream(stream) => Some(stream.abandoned()),
        CallBody::Chunks(_) => None,
    };
    let request = request(channel, call.path, body, call.deadline, call.headers)?;
    let mut sender = held.connection.sender.clone();
    let response = match sender.try_send_request(request).await {
        Ok(response) => response,
        Err(mut e) => {
            if let Some(request) = e.take_message() {
                *unsent = Some(request.into_body());
            }
            // The request stream was given up by its sender: the reset
            // is the caller's, not the replica's failure.
            if abandoned.is_some_and(|a| a.load(Ordering::Acquire)) {
                return Err(CallError::Abandoned(e.error().to_string()));
            }
            return Err(CallError::from_send(e));
        }
    };
    OpenCall::new(response, held, call.max_message)
}

/// What [`open`] sends.
pub(crate) struct OpenRequest<'a> {
    pub(crate) path: &'a str,
    pub(crate) deadline: Option<Instant>,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) max_message: usize,
}

/// A call whose answer is coming: its headers, then its messages as they
/// arrive ([`OpenCall::message`]), then its status, in the trailers (or
/// in the headers of a trailers-only answer). The connection counts the
/// call as its own until this is dropped; dropping it before the end
/// cancels the call.
pub struct OpenCall {
    headers: HeaderMap,
    trailers: HeaderMap,
    body: Incoming,
    reader: MessageReader,
    /// The status, once known.
    status: Option<(i32, String)>,
    /// The answer has no more frames.
    ended: bool,
    failed: Option<CallError>,
    _held: Held,
}

impl std::fmt::Debug for OpenCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenCall")
            .field("status", &self.status)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl OpenCall {
    fn new(response: Response<Incoming>, held: Held, max: usize) -> Result<OpenCall, CallError> {
        let (parts, body) = response.into_parts();
        if parts.status != StatusCode::OK {
            return Err(CallError::Protocol(format!(
                "HTTP status {} where a gRPC server answers 200",
                parts.status
            )));
        }
        let status = grpc_status(&parts.headers)?;
        if status.is_none() {
            grpc_content(&parts.headers)?;
        }
        Ok(OpenCall {
            ended: status.is_some(),
            status,
            headers: parts.headers,
            trailers: HeaderMap::new(),
            body,
            reader: MessageReader::stream(max),
            failed: None,
            _held: held,
        })
    }

    /// The answer's headers: the upstream's initial metadata.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The answer's trailers (its trailing metadata), once it has ended.
    pub fn trailers(&self) -> &HeaderMap {
        &self.trailers
    }

    /// The `google.rpc.Status` the upstream sent with an error status
    /// (`grpc-status-details-bin`), encoded.
    pub fn status_details(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        let value = self
            .trailers
            .get("grpc-status-details-bin")
            .or_else(|| self.headers.get("grpc-status-details-bin"))?;
        let text = value.as_bytes();
        let text = text
            .strip_suffix(b"==")
            .or_else(|| text.strip_suffix(b"="))
            .unwrap_or(text);
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text)
            .ok()
    }

    /// The next message of the answer; `None` once it ended with an OK
    /// status. An error status is a [`CallError::Status`].
    pub async fn message(&mut self) -> Result<Option<Bytes>, CallError> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    /// [`OpenCall::message`], polled.
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, CallError>> {
        loop {
            if let Some(message) = self.reader.next() {
                return Poll::Ready(Ok(Some(message)));
            }
            if let Some(e) = &self.failed {
                return Poll::Ready(Err(e.clone()));
            }
            if self.ended {
                return Poll::Ready(match &self.status {
                    None => Err(CallError::Protocol(
                        "the answer ended without a grpc-status".to_owned(),
                    )),
                    Some((0, _)) if self.reader.is_partial() => Err(CallError::Protocol(
                        "the answer's last message is cut short".to_owned(),
                    )),
                    Some((0, _)) => Ok(None),
                    Some((code, message)) => Err(CallError::Status {
                        code: *code,
                        message: message.clone(),
                    }),
                });
            }
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended = true;
                    continue;
                }
                Poll::Ready(Some(Err(e))) => {
                    self.failed = Some(CallError::Broken(e.to_string()));
                    continue;
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    if let Err(e) = self.reader.push(data) {
                        self.failed = Some(e);
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        match grpc_status(&trailers) {
                            Ok(status) => self.status = status,
                            Err(e) => self.failed = Some(e),
                        }
                        self.trailers = trailers;
                    }
                }
            }
        }
    }
}

/// gRPC's standard health check of the whole server: live unless it
/// says NOT_SERVING, or does not answer at all (a server without the
/// health service answers UNIMPLEMENTED, which shows it is up).
pub(crate) async fn health(
    channel: &Channel,
    headers: &HeaderMap,
    deadline: Instant,
) -> Result<(), CallError> {
    // HealthCheckResponse { ServingStatus status = 1; }, SERVING = 1.
    #[derive(Clone, PartialEq, Message)]
    struct HealthCheckResponse {
        #[prost(int32, tag = "1")]
        status: i32,
    }
    let call = Call {
        path: "/grpc.health.v1.Health/Check",
        // An empty HealthCheckRequest: the whole server.
        body: Chunks::new([Bytes::from_static(&[0, 0, 0, 0, 0])]),
        deadline: Some(deadline),
        headers,
        trace: None,
        max_message: 1 << 16,
    };
    match unary(channel, call).await {
        Ok(message) => match HealthCheckResponse::decode(message) {
            Ok(answer) if answer.status == 2 => Err(CallError::Status {
                code: 14,
                message: "the server's health check says NOT_SERVING".to_owned(),
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(CallError::Protocol(format!(
                "the health check's answer does not decode: {e}"
            ))),
        },
        Err(CallError::Status { code, .. }) if code != 14 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads a unary answer: one message and an OK status, or the status.
async fn read_answer(response: Response<Incoming>, max: usize) -> Result<Bytes, CallError> {
    let (parts, mut body) = response.into_parts();
    if parts.status != StatusCode::OK {
        return Err(CallError::Protocol(format!(
            "HTTP status {} where a gRPC server answers 200",
            parts.status
        )));
    }
    // A trailers-only answer: the status is in the headers.
    if let Some((code, message)) = grpc_status(&parts.headers)? {
        if code != 0 {
            return Err(CallError::Status { code, message });
        }
    }
    grpc_content(&parts.headers)?;
    let mut reader = MessageReader::new(max);
    let mut status = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| CallError::Broken(e.to_string()))?;
        match frame.into_data() {
            Ok(data) => reader.push(data)?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    status = grpc_status(&trailers)?;
                }
            }
        }
    }
    match status {
        None => Err(CallError::Protocol(
            "the answer ended without a grpc-status".to_owned(),
        )),
        Some((0, _)) => reader.finish(),
        Some((code, message)) => Err(CallError::Status { code, message }),
    }
}

/// Checks that an answer with messages says it is gRPC's.
fn grpc_content(headers: &HeaderMap) -> Result<(), CallError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/grpc") {
        Ok(())
    } else {
        Err(CallError::Protocol(format!(
            "content type '{content_type}', not application/grpc"
        )))
    }
}

/// The `grpc-status` and `grpc-message` of `headers`, if it has a status.
pub(crate) fn grpc_status(headers: &HeaderMap) -> Result<Option<(i32, String)>, CallError> {
    let Some(code) = headers.get("grpc-status") else {
        return Ok(None);
    };
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.parse::<i32>().ok())
        .ok_or_else(|| CallError::Protocol(format!("grpc-status {code:?} is not a number")))?;
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Ok(Some((code, message)))
}

/// `grpc-message` is percent-encoded UTF-8.
fn percent_decode(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if text[i] == b'%' && i + 2 < text.len() {
            if let (Some(h), Some(l)) = (hex(text[i + 1]), hex(text[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Gathers length-prefixed messages from data frames: one (a unary
/// call's answer) or any number (a stream's).
pub(crate) struct MessageReader {
    max: usize,
    many: bool,
    prefix: [u8; 5],
    prefix_len: usize,
    len: usize,
    gathering: BytesMut,
    ready: std::collections::VecDeque<Bytes>,
}

impl MessageReader {
    fn new(max: usize) -> MessageReader {
        MessageReader {
            max,
            many: false,
            prefix: [0; 5],
            prefix_len: 0,
            len: 0,
            gathering: BytesMut::new(),
            ready: std::collections::VecDeque::new(),
        }
    }

    /// A reader of a stream's messages.
    pub(crate) fn stream(max: usize) -> MessageReader {
        MessageReader {
            many: true,
            ..MessageReader::new(max)
        }
    }

    pub(crate) fn push(&mut self, mut chunk: Bytes) -> Result<(), CallError> {
        while !chunk.is_empty() {
            if !self.many && !self.ready.is_empty() {
                return Err(CallError::Protocol(
                    "more than one message in the answer to a unary call".to_owned(),
                ));
            }
            if self.prefix_len < 5 {
                let take = (5 - self.prefix_len).min(chunk.len());
                self.prefix[self.prefix_len..self.prefix_len + take]
                    .copy_from_slice(&chunk[..take]);
                chunk.advance(take);
                self.prefix_len += take;
                if self.prefix_len == 5 {
                    self.start()?;
                }
                continue;
            }
            let need = self.len - self.gathering.len();
            if self.gathering.is_empty() && chunk.len() >= need {
                let message = chunk.split_to(need);
                self.done(message);
                continue;
            }
            let take = need.min(chunk.len());
            self.gathering.extend_from_slice(&chunk[..take]);
            chunk.advance(take);
            if self.gathering.len() == self.len {
                let message = std::mem::take(&mut self.gathering).freeze();
                self.done(message);
            }
        }
        Ok(())
    }

    fn done(&mut self, message: Bytes) {
        self.ready.push_back(message);
        self.prefix_len = 0;
    }

    /// The prefix is in: checks it and makes room for the message.
    fn start(&mut self) -> Result<(), CallError> {
        match self.prefix[0] {
            0 => {}
            1 => {
                return Err(CallError::Protocol(
                    "a compressed message, though wirespeed asked for none".to_owned(),
                ))
            }
            flag => {
                return Err(CallError::Protocol(format!(
                    "a message with flag byte {flag}, which gRPC does not define"
                )))
            }
        }
        let len = u32::from_be_bytes([
            self.prefix[1],
            self.prefix[2],
            self.prefix[3],
            self.prefix[4],
        ]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max {
            return Err(CallError::Protocol(format!(
                "a message of {len} bytes, over the limit of {} bytes",
                self.max
            )));
        }
        self.len = len;
        self.gathering = BytesMut::new();
        if len == 0 {
            self.done(Bytes::new());
        }
        Ok(())
    }

    /// The next whole message, if one is in.
    pub(crate) fn next(&mut self) -> Option<Bytes> {
        self.ready.pop_front()
    }

    /// Whether the frames so far stop inside a message.
    pub(crate) fn is_partial(&self) -> bool {
        self.prefix_len > 0
    }

    fn finish(mut self) -> Result<Bytes, CallError> {
        if self.is_partial() {
            return Err(CallError::Protocol(
                "the answer's message is cut short".to_owned(),
            ));
        }
        self.next()
            .ok_or_else(|| CallError::Protocol("the answer has no message".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn the_timeout_sent_is_never_shorter_than_what_is_left() {
        let parse = |v: HeaderValue| {
            let text = v.to_str().unwrap().to_owned();
            let (digits, unit) = text.split_at(text.len() - 1);
            let n: u64 = digits.parse().unwrap();
            assert!(digits.len() <= 8, "{text}");
            match unit {
                "u" => Duration::from_micros(n),
                "m" => Duration::from_millis(n),
                _ => panic!("{text}"),
            }
        };
        for left in [
            Duration::from_micros(10_500),
            Duration::from_nanos(1),
            Duration::from_secs(99),
            Duration::from_secs(3600) + Duration::from_nanos(1),
        ] {
            let deadline = Instant::now() + left;
            let sent = parse(grpc_timeout(deadline));
            let made = Instant::now();
            // At least what was left when the header was made, and never
            // much more than `left`.
            assert!(made + sent >= deadline, "{left:?} -> {sent:?}");
            assert!(
                sent <= left + Duration::from_millis(1),
                "{left:?} -> {sent:?}"
            );
        }
        assert_eq!(
            parse(grpc_timeout(Instant::now())),
            Duration::from_micros(1)
        );
    }

    #[test]
    fn a_message_split_anywhere_is_gathered() {
        let whole = framed(b"hello world");
        for cut in 0..whole.len() {
            let mut reader = MessageReader::new(1024);
            reader.push(Bytes::copy_from_slice(&whole[..cut])).unwrap();
            reader.push(Bytes::copy_from_slice(&whole[cut..])).unwrap();
            assert_eq!(
                &reader.finish().unwrap()[..],
                b"hello world",
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_streams_messages_split_anywhere_are_gathered_in_order() {
        let mut whole = framed(b"one");
        whole.extend(framed(b""));
        whole.extend(framed(b"three"));
        for cut in 0..whole.len() {
            let mut reader = MessageReader::stream(64);
            let mut got = Vec::new();
            for part in [&whole[..cut], &whole[cut..]] {
                reader.push(Bytes::copy_from_slice(part)).unwrap();
                while let Some(m) = reader.next() {
                    got.push(m);
                }
            }
            assert_eq!(got, [&b"one"[..], b"", b"three"], "cut at {cut}");
            assert!(!reader.is_partial());
        }
        let mut reader = MessageReader::stream(64);
        reader
            .push(Bytes::from(framed(b"abc")[..6].to_vec()))
            .unwrap();
        assert!(reader.is_partial());
    }

    #[test]
    fn oversized_compressed_and_extra_messages_are_refused() {
        let mut reader = MessageReader::new(4);
        let e = reader.push(Bytes::from(framed(b"hello"))).unwrap_err();
        assert!(e.to_string().contains("over the limit of 4 bytes"), "{e}");
        let mut reader = MessageReader::new(64);
        let mut compressed = framed(b"x");
        compressed[0] = 1;
        let e = reader.push(Bytes::from(compressed)).unwrap_err();
        assert!(e.to_string().contains("compressed"), "{e}");
        let mut reader = MessageReader::new(64);
        let mut two = framed(b"a");
        two.extend(framed(b"b"));
        let e = reader.push(Bytes::from(two)).unwrap_err();
        assert!(e.to_string().contains("more than one message"), "{e}");
        let mut reader = MessageReader::new(64);
        reader
            .push(Bytes::from(framed(b"abc")[..6].to_vec()))
            .unwrap();
        assert!(reader
            .finish()
            .unwrap_err()
            .to_string()
            .contains("cut short"));
    }

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(
            percent_decode(b"model %27x%27 not found%"),
            "model 'x' not found%"
        );
    }
}
