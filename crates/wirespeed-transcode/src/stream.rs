//! Streams of messages as JSON: a client-streaming call's body, encoded
//! message by message while it arrives ([`JsonToProtoStream`]), and the
//! framings a server-streaming call's answer is printed in
//! ([`StreamFormat`]).
//!
//! A body of messages is either one JSON array of them or the messages one
//! after another, separated by whitespace (newline-delimited JSON; one
//! object alone is a stream of one). Each message is handed on as soon as
//! its closing brace arrives, so a long upload goes upstream as it is
//! read, not after it.

use prost_reflect::MessageDescriptor;
use wirespeed_json::push::{Bounds, Sink, Tokenizer};

use crate::encode::{EncodeOptions, Encoder};
use crate::error::TranscodeError;
use crate::wkt::{wkt, Wkt};

/// Encodes a body of many `message`s, pushed in chunks of any size.
pub struct JsonToProtoStream {
    tokenizer: Tokenizer,
    split: Split,
}

impl JsonToProtoStream {
    /// An encoder of a stream of `message`s.
    pub fn new(message: MessageDescriptor, options: EncodeOptions) -> JsonToProtoStream {
        let bounds = Bounds {
            // The array around the messages is one level more.
            max_depth: options.max_depth.saturating_add(1),
            max_string_bytes: options.max_message_bytes,
        };
        JsonToProtoStream {
            tokenizer: Tokenizer::sequence(bounds),
            split: Split {
                encoder: Encoder::idle(options),
                message,
                array: None,
                closed: false,
                depth: 0,
                ready: Vec::new(),
                count: 0,
            },
        }
    }

    /// Encodes the next chunk of the body; the messages it completed wait
    /// in [`JsonToProtoStream::messages`].
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), TranscodeError> {
        self.tokenizer.feed(chunk, &mut self.split)
    }

    /// The messages completed since the last call, in order.
    pub fn messages(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.split.ready.drain(..)
    }

    /// Ends the body: it must not stop inside a message.
    pub fn finish(&mut self) -> Result<(), TranscodeError> {
        self.tokenizer.finish(&mut self.split)
    }

    /// The messages completed so far.
    pub fn count(&self) -> u64 {
        self.split.count
    }
}

/// Finds each message of the body and hands its tokens to the encoder.
struct Split {
    encoder: Encoder,
    message: MessageDescriptor,
    /// Whether the messages are an array's elements (`None` until the
    /// body's first token).
    array: Option<bool>,
    /// The array has closed.
    closed: bool,
    /// Nesting, counting the array.
    depth: usize,
    ready: Vec<Vec<u8>>,
    count: u64,
}

impl Split {
    /// The depth at which messages start.
    fn level(&self) -> usize {
        usize::from(self.array == Some(true))
    }

    fn not_a_message(&self, found: &str, at: u64) -> TranscodeError {
        TranscodeError::invalid(
            at,
            format!(
                "message {} of the stream is {found}, where a {} object goes",
                self.count + 1,
                self.message.full_name()
            ),
        )
    }

    /// A token outside any message.
    fn between(&mut self, found: &str, at: u64) -> Result<(), TranscodeError> {
        if self.closed {
            return Err(TranscodeError::invalid(
                at,
                format!("{found} after the stream's closing ']'"),
            ));
        }
        Err(self.not_a_message(found, at))
    }

    fn in_message(&self) -> bool {
        self.depth > self.level()
    }

    /// A scalar token: inside a message, or a message of its own when the
    /// stream's message is written as a scalar (a Duration's `"1s"`, a
    /// wrapper's bare value, a `Value`), as protojson writes them. `true`
    /// when it is a whole message.
    fn scalar(&mut self, found: &str, at: u64) -> Result<bool, TranscodeError> {
        if self.in_message() {
            return Ok(false);
        }
        let kind = wkt(&self.message);
        if self.closed || !(kind.takes_text() || kind == Wkt::Value) {
            return self.between(found, at).map(|()| false);
        }
        self.array.get_or_insert(false);
        self.encoder.start(self.message.clone());
        Ok(true)
    }

    /// After a scalar that was a whole message.
    fn whole(&mut self, message: bool) {
        if message && self.encoder.ended() {
            self.ready.push(self.encoder.take());
            self.count += 1;
        }
    }
}

impl Sink for Split {
    type Error = TranscodeError;

    fn number_run(&mut self, bytes: &[u8]) -> usize {
        if self.in_message() {
            self.encoder.number_run(bytes)
        } else {
            0
        }
    }

    fn begin_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        if !self.in_message() {
            if self.closed {
                return self.between("an object", at);
            }
            self.array.get_or_insert(false);
            self.encoder.start(self.message.clone());
        }
        self.depth += 1;
        self.encoder.begin_object(at)
    }

    fn key(&mut self, key: &[u8], at: u64) -> Result<(), TranscodeError> {
        self.encoder.key(key, at)
    }

    fn end_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.encoder.end_object(at)?;
        self.depth -= 1;
        if !self.in_message() && self.encoder.ended() {
            self.ready.push(self.encoder.take());
            self.count += 1;
        }
        Ok(())
    }

    fn begin_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        if !self.in_message() {
            if self.depth == 0 && self.array.is_none() {
                self.array = Some(true);
                self.depth = 1;
                return Ok(());
            }
            // A message written as a list (`ListValue`, a `Value`).
            if self.closed || !matches!(wkt(&self.message), Wkt::ListValue | Wkt::Value) {
                return self.between("an array", at);
            }
            self.array.get_or_insert(false);
            self.encoder.start(self.message.clone());
        }
        self.depth += 1;
        self.encoder.begin_array(at)
    }

    fn end_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.depth -= 1;
        if self.depth == 0 && self.array == Some(true) {
            self.closed = true;
            return Ok(());
        }
        self.encoder.end_array(at)?;
        if !self.in_message() && self.encoder.ended() {
            self.ready.push(self.encoder.take());
            self.count += 1;
        }
        Ok(())
    }

    fn string(&mut self, value: &[u8], at: u64) -> Result<(), TranscodeError> {
        let message = self.scalar("a string", at)?;
        self.encoder.string(value, at)?;
        self.whole(message);
        Ok(())
    }

    fn number(&mut self, token: &[u8], at: u64) -> Result<(), TranscodeError> {
        let message = self.scalar("a number", at)?;
        self.encoder.number(token, at)?;
        self.whole(message);
        Ok(())
    }

    fn boolean(&mut self, value: bool, at: u64) -> Result<(), TranscodeError> {
        let message = self.scalar("a boolean", at)?;
        self.encoder.boolean(value, at)?;
        self.whole(message);
        Ok(())
    }

    fn null(&mut self, at: u64) -> Result<(), TranscodeError> {
        let message = self.scalar("null", at)?;
        self.encoder.null(at)?;
        self.whole(message);
        Ok(())
    }
}

/// How a stream of answers is written: one JSON array, streamed as the
/// messages come (the default); newline-delimited JSON; or server-sent
/// events, one `data:` event per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// `[m1,m2,...]`, `application/json`.
    JsonArray,
    /// `m1\nm2\n`, `application/x-ndjson`.
    Ndjson,
    /// `data: m1\n\n`, `text/event-stream`.
    Sse,
    /// Each message's own bytes and a newline, as grpc-gateway writes a
    /// stream of `google.api.HttpBody` (its data, then its marshaler's
    /// delimiter; the content type the first message's); a failure is an
    /// `{"error": status}` line after them. Never chosen by `Accept`.
    Raw,
}

impl StreamFormat {
    /// The format an `Accept` header asks for: `text/event-stream` for
    /// server-sent events; `application/x-ndjson`, `application/jsonl` or
    /// `application/json-seq` for one message per line; else an array.
    pub fn from_accept(accept: &str) -> StreamFormat {
        let mut format = StreamFormat::JsonArray;
        for range in accept.split(',') {
            let kind = range
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            match kind.as_str() {
                "text/event-stream" => return StreamFormat::Sse,
                "application/x-ndjson"
                | "application/ndjson"
                | "application/jsonl"
                | "application/x-jsonlines"
                | "application/json-seq" => format = StreamFormat::Ndjson,
                _ => {}
            }
        }
        format
    }

    /// The answer's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            StreamFormat::JsonArray => "application/json",
            StreamFormat::Ndjson => "application/x-ndjson",
            StreamFormat::Sse => "text/event-stream",
            StreamFormat::Raw => "application/octet-stream",
        }
    }

    /// What goes before the first message.
    pub fn begin(self, out: &mut Vec<u8>) {
        if self == StreamFormat::JsonArray {
            out.push(b'[');
        }
    }

    /// What goes before a message (`first`: the stream's first).
    pub fn before_message(self, first: bool, out: &mut Vec<u8>) {
        match self {
            StreamFormat::JsonArray if !first => out.push(b','),
            StreamFormat::JsonArray | StreamFormat::Ndjson | StreamFormat::Raw => {}
            StreamFormat::Sse => out.extend_from_slice(b"data: "),
        }
    }

    /// What goes after a message.
    pub fn after_message(self, out: &mut Vec<u8>) {
        match self {
            StreamFormat::JsonArray => {}
            StreamFormat::Ndjson | StreamFormat::Raw => out.push(b'\n'),
            StreamFormat::Sse => out.extend_from_slice(b"\n\n"),
        }
    }

    /// What ends a stream that ended well.
    pub fn end(self, out: &mut Vec<u8>) {
        if self == StreamFormat::JsonArray {
            out.push(b']');
        }
    }

    /// Writes a stream's failure, `status` being its `google.rpc.Status`
    /// JSON (one line): an `{"error": status}` line (after newline-framed
    /// messages and HttpBody data alike, as grpc-gateway writes it), or an
    /// `error` event.
    /// An array cannot carry it after its messages: returns `false`, and
    /// the stream is cut instead, so that no client takes it for whole.
    pub fn error(self, status: &[u8], out: &mut Vec<u8>) -> bool {
        match self {
            StreamFormat::JsonArray => false,
            StreamFormat::Ndjson | StreamFormat::Raw => {
                out.extend_from_slice(b"{\"error\":");
                out.extend_from_slice(status);
                out.extend_from_slice(b"}\n");
                true
            }
            StreamFormat::Sse => {
                out.extend_from_slice(b"event: error\ndata: ");
                out.extend_from_slice(status);
                out.extend_from_slice(b"\n\n");
                true
            }
        }
    }
}
