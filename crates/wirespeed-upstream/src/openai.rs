//! The OpenAI API as a client: a model served by another server's
//! OpenAI-compatible endpoints (vLLM, llama.cpp's server, TGI, OpenAI,
//! another wirespeed), reached at the URL its SDKs take as `base_url`
//! (`http://host:8000/v1`).
//!
//! A request goes out as its client wrote it, with only `model` renamed
//! to the upstream's name ([`rename_model`]), over the upstream's pooled
//! HTTP/1.1 connections, balanced and retried as every call
//! (`upstream.rs`). A streamed answer (`text/event-stream`) is read as it
//! arrives: [`Events`] splits the bytes into events at each blank line
//! and yields each event's data as soon as its last line is in, never
//! waiting for the body's end. An error status becomes the error it means
//! (a 400 stays the client's, a 429 is overload, a 503 unavailable), with
//! the upstream's own message.
//!
//! The event-stream splitter is written here rather than taken from
//! `eventsource-stream`: that crate buffers an event of any size (an
//! upstream that never ends a line would grow it without bound) and copies
//! each event into a `String`; this one is bounded by the upstream's
//! `max_message_bytes` and hands out the event's bytes.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::Method;
use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;
use wirespeed_core::TraceContext;

use crate::body::Chunks;
use crate::error::CallError;
use crate::rest::{self, Answer, Opened};
use crate::upstream::{Held, Upstream, UpstreamError};

/// A client of one upstream's OpenAI API.
pub struct OpenAiClient {
    upstream: Arc<Upstream>,
}

/// An answer: one JSON body, or a stream of events.
pub enum OpenAiAnswer {
    /// The whole answer (a request without `stream`, an embeddings one).
    Whole(Bytes),
    /// Server-sent events, read as they arrive.
    Events(Box<Events>),
}

impl OpenAiClient {
    /// A client of `upstream`'s OpenAI API, at each replica's URL path.
    pub fn new(upstream: Arc<Upstream>) -> OpenAiClient {
        OpenAiClient { upstream }
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The ids `GET {base}/models` lists.
    pub async fn models(&self, deadline: Option<Instant>) -> Result<Vec<String>, UpstreamError> {
        #[derive(serde::Deserialize)]
        struct Model {
            id: String,
        }
        #[derive(serde::Deserialize)]
        struct List {
            #[serde(default)]
            data: Vec<Model>,
        }
        let headers = &self.upstream.options().headers;
        let (opened, _held, address) = self
            .upstream
            .rest_open(
                Method::GET,
                "/models",
                Chunks::default(),
                headers,
                deadline,
                refusal,
            )
            .await?;
        let answer = opened
            .whole(16 << 20)
            .await
            .map_err(|error| UpstreamError {
                upstream: address.clone(),
                error,
            })?;
        let list: List = serde_json::from_slice(&answer.body).map_err(|e| UpstreamError {
            upstream: address,
            error: CallError::Protocol(format!("GET /models is not OpenAI's model list: {e}")),
        })?;
        Ok(list.data.into_iter().map(|m| m.id).collect())
    }

    /// `POST {base}/{endpoint}` of the JSON `body`; returns once the
    /// answer's head is in, before `deadline`. A whole answer is read
    /// within `deadline` too; a stream's events as long as the caller
    /// reads them.
    pub async fn post(
        &self,
        endpoint: &str,
        body: Vec<u8>,
        trace: Option<&TraceContext>,
        deadline: Option<Instant>,
    ) -> Result<OpenAiAnswer, UpstreamError> {
        let mut headers = self.upstream.options().headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(trace) = trace {
            rest::trace_headers(&mut headers, trace);
        }
        let path = format!("/{}", endpoint.trim_start_matches('/'));
        let (opened, held, address) = self
            .upstream
            .rest_open(
                Method::POST,
                &path,
                Chunks::new([Bytes::from(body)]),
                &headers,
                deadline,
                refusal,
            )
            .await?;
        let max = self.upstream.options().max_message_bytes;
        if is_event_stream(&opened.headers) {
            return Ok(OpenAiAnswer::Events(Box::new(Events {
                opened: Some(opened),
                _held: held,
                address,
                splitter: Splitter::new(max),
            })));
        }
        let whole = async { opened.whole(max).await };
        let answer = match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), whole)
                .await
                .unwrap_or(Err(CallError::Deadline)),
            None => whole.await,
        };
        answer
            .map(|a| OpenAiAnswer::Whole(a.body))
            .map_err(|error| UpstreamError {
                upstream: address,
                error,
            })
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// An upstream's error answer as the error it means, with its own
/// message: OpenAI's `{"error": {"message": ...}}`, vLLM's older
/// `{"message": ...}`, FastAPI's `{"detail": ...}`, or the text itself.
fn refusal(answer: &Answer) -> CallError {
    CallError::Status {
        code: rest::grpc_code(answer.status),
        message: format!(
            "HTTP {}: {}",
            answer.status.as_u16(),
            error_message(&answer.body)
        ),
    }
}

/// The message of an OpenAI-style error body.
pub fn error_message(body: &[u8]) -> String {
    let text = || String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
    let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(body) else {
        return text();
    };
    let said = object
        .get("error")
        .and_then(|e| e.get("message").or(Some(e)))
        .or_else(|| object.get("message"))
        .or_else(|| object.get("detail"));
    match said {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => text(),
    }
}

/// A streamed answer's events, read as they arrive.
pub struct Events {
    /// Until the stream has ended.
    opened: Option<Opened>,
    /// The stream counts as outstanding on its replica until it goes.
    _held: Held,
    address: String,
    splitter: Splitter,
}

impl Events {
    /// The next event's data (a JSON text, for OpenAI's streams); `None`
    /// once the upstream has said `[DONE]` or ended the body after a
    /// whole event.
    pub async fn next(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        loop {
            match self.splitter.next_event() {
                Ok(Some(data)) if data.as_ref() == b"[DONE]" => {
                    self.finish();
                    return None;
                }
                Ok(Some(data)) => return Some(Ok(data)),
                Ok(None) => {}
                Err(error) => return Some(Err(self.failed(error))),
            }
            let opened = self.opened.as_mut()?;
            match opened.chunk().await {
                Ok(Some(bytes)) => self.splitter.feed(&bytes),
                Ok(None) => {
                    // The body has ended, and its connection is kept.
                    self.opened = None;
                    return match self.splitter.finish() {
                        Some(data) if data.as_ref() != b"[DONE]" => Some(Ok(data)),
                        _ => None,
                    };
                }
                Err(error) => return Some(Err(self.failed(error))),
            }
        }
    }

    /// After `[DONE]`: the body's end (its last chunk, usually in the
    /// same packet) is read on a task of its own, so that its connection
    /// is kept for another request, while the caller goes on at once. A
    /// body that does not end within a few seconds is let go, and its
    /// connection with it.
    fn finish(&mut self) {
        let Some(mut opened) = self.opened.take() else {
            return;
        };
        tokio::spawn(async move {
            let drained = async { while let Ok(Some(_)) = opened.chunk().await {} };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drained).await;
        });
    }

    fn failed(&mut self, error: CallError) -> UpstreamError {
        self.opened = None;
        UpstreamError {
            upstream: self.address.clone(),
            error,
        }
    }
}

/// Splits a `text/event-stream` into its events' data, as the HTML
/// standard's "interpret an event stream" does: lines end at CR, LF or
/// CRLF; a blank line ends an event; `data` fields are joined with LF;
/// comments (`:`) and the other fields (`event`, `id`, `retry`) are not
/// needed by OpenAI's streams and are skipped.
struct Splitter {
    /// Bytes not yet split into lines.
    pending: BytesMut,
    /// The current event's data so far.
    data: Vec<u8>,
    has_data: bool,
    /// The largest event (and line) accepted.
    max: usize,
}

impl Splitter {
    fn new(max: usize) -> Splitter {
        Splitter {
            pending: BytesMut::new(),
            data: Vec::new(),
            has_data: false,
            max,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole event's data, or `None` until more bytes come.
    fn next_event(&mut self) -> Result<Option<Bytes>, CallError> {
        while let Some(line_end) = self.pending.iter().position(|&b| b == b'\n' || b == b'\r') {
            let ending = if self.pending[line_end] == b'\r' {
                match self.pending.get(line_end + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A CR at the end: its LF may be in the next piece.
                    None => return Ok(None),
                }
            } else {
                1
            };
            let line = self.pending.split_to(line_end);
            self.pending.advance(ending);
            if let Some(data) = self.line(&line)? {
                return Ok(Some(data));
            }
        }
        if self.pending.len() + self.data.len() > self.max {
            return Err(self.too_large());
        }
        Ok(None)
    }

    /// Takes one line; the event's data when the line ends it.
    fn line(&mut self, line: &[u8]) -> Result<Option<Bytes>, CallError> {
        if line.is_empty() {
            if !self.has_data {
                return Ok(None);
            }
            self.has_data = false;
            if self.data.last() == Some(&b'\n') {
                self.data.pop();
            }
            return Ok(Some(Bytes::from(std::mem::take(&mut self.data))));
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(None),
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.data.len() + value.len() + 1 > self.max {
                return Err(self.too_large());
            }
            self.data.extend_from_slice(value);
            self.data.push(b'\n');
            self.has_data = true;
        }
        Ok(None)
    }

    /// At the body's end: an event whose blank line never came is
    /// dropped, as the standard says, unless it is whole JSON (servers
    /// that end the body right after the last `data:` line).
    fn finish(&mut self) -> Option<Bytes> {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            let _ = self.line(&line);
        }
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        if self.data.last() == Some(&b'\n') {
            self.data.pop();
        }
        let data = std::mem::take(&mut self.data);
        serde_json::from_slice::<&RawValue>(&data)
            .is_ok()
            .then(|| Bytes::from(data))
    }

    fn too_large(&self) -> CallError {
        CallError::Protocol(format!(
            "an event of the stream over the limit of {} bytes",
            self.max
        ))
    }
}

/// `json` (an object) with its top-level `model` set to `name`, every
/// other member as it was, in its order; an object without `model` comes
/// back unchanged. Only the top level is parsed into parts (its values are
/// scanned, not built), so the cost is one pass over the text.
pub fn rename_model(json: &[u8], name: &str) -> Result<Vec<u8>, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let renamed = Rename {
        name,
        size: json.len(),
    }
    .deserialize(&mut deserializer)
    .and_then(|out| deserializer.end().map(|()| out))
    .map_err(|e| format!("not a JSON object: {e}"))?;
    Ok(renamed)
}

struct Rename<'n> {
    name: &'n str,
    size: usize,
}

impl<'de> DeserializeSeed<'de> for Rename<'_> {
    type Value = Vec<u8>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Rename<'_> {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(self.size + self.name.len() + 2);
        out.push(b'{');
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value: &'de RawValue = map.next_value()?;
            if out.len() > 1 {
                out.push(b',');
            }
            wirespeed_json::encode_string(&key.0, &mut out);
            out.push(b':');
            if key.0 == "model" {
                wirespeed_json::encode_string(self.name, &mut out);
            } else {
                out.extend_from_slice(value.get().as_bytes());
            }
        }
        out.push(b'}');
        Ok(out)
    }
}

/// An object's key, borrowed from the text unless it has escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(pieces: &[&[u8]]) -> Vec<String> {
        let mut splitter = Splitter::new(1 << 20);
        let mut out = Vec::new();
        for piece in pieces {
            splitter.feed(piece);
            while let Some(data) = splitter.next_event().unwrap() {
                out.push(String::from_utf8(data.to_vec()).unwrap());
            }
        }
        out.extend(
            splitter
                .finish()
                .map(|d| String::from_utf8(d.to_vec()).unwrap()),
        );
        out
    }

    #[test]
    fn events_split_wherever_the_pieces_break() {
        let stream = b"data: {\"a\":1}\n\n: keep-alive\n\nevent: x\ndata: {\"b\":\ndata: 2}\r\n\r\ndata: [DONE]\n\n";
        let whole = events(&[stream]);
        assert_eq!(whole, ["{\"a\":1}", "{\"b\":\n2}", "[DONE]"]);
        for cut in 1..stream.len() {
            assert_eq!(
                events(&[&stream[..cut], &stream[cut..]]),
                whole,
                "cut at {cut}"
            );
        }
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytewise), whole);
        // CR alone ends a line too; `data:` without a space; no blank line
        // at the end of a JSON event.
        assert_eq!(
            events(&[b"data:{\"c\":3}\r\r", b"data: {\"d\":4}"]),
            ["{\"c\":3}", "{\"d\":4}"]
        );
        assert!(events(&[b"data: {\"cut"]).is_empty());
    }

    #[test]
    fn an_event_past_the_limit_is_refused() {
        let mut splitter = Splitter::new(16);
        splitter.feed(b"data: 0123456789abcdefghij");
        assert!(matches!(splitter.next_event(), Err(CallError::Protocol(_))));
        let mut splitter = Splitter::new(16);
        splitter.feed(b"data: 0123456789\ndata: 0123456789\n");
        assert!(matches!(splitter.next_event(), Err(CallError::Protocol(_))));
    }

    #[test]
    fn only_the_top_level_model_is_renamed() {
        let json = br#"{"id":"x","model":"meta/llama","choices":[{"model":"inner","d\"e":"\u00e9"}],"usage":null}"#;
        let renamed = rename_model(json, "llm").unwrap();
        let value: serde_json::Value = serde_json::from_slice(&renamed).unwrap();
        let mut expected: serde_json::Value = serde_json::from_slice(json).unwrap();
        expected["model"] = "llm".into();
        assert_eq!(value, expected);
        assert!(String::from_utf8(renamed)
            .unwrap()
            .starts_with("{\"id\":\"x\",\"model\":\"llm\""));
        assert_eq!(
            rename_model(br#"{"a\nb":1}"#, "m").unwrap(),
            br#"{"a\nb":1}"#
        );
        assert!(rename_model(b"[1]", "m").is_err());
        assert!(rename_model(b"{\"model\":1} x", "m").is_err());
    }

    #[test]
    fn error_messages_are_read_in_every_shape() {
        assert_eq!(
            error_message(
                br#"{"error":{"message":"bad temperature","type":"invalid_request_error"}}"#
            ),
            "bad temperature"
        );
        assert_eq!(
            error_message(br#"{"object":"error","message":"no such model","code":404}"#),
            "no such model"
        );
        assert_eq!(error_message(br#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_message(br#"{"error":"plain"}"#), "plain");
        assert_eq!(error_message(b"Bad Gateway"), "Bad Gateway");
    }
}
