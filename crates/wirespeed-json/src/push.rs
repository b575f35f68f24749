//! A push tokenizer for any JSON document: feed it chunks of any size, and
//! it hands each token to a [`Sink`] as soon as the token is whole.
//!
//! The tensor decoder (`decoder/`) walks the grammar with its semantic
//! layer and its float runs fused into one state machine, for speed on
//! tensors. Other formats that turn JSON into something typed while it
//! arrives (the HTTP/JSON to gRPC transcoder's protobuf encoder) need the
//! same walk without knowing tensors: this is it, on the same pieces (the
//! resumable [`StringScanner`](crate::string), the number grammar). A
//! token cut by a chunk boundary is finished when the next chunk comes: a
//! bare token (number, literal) is carried in a small buffer, a string is
//! scanned resumably and its decoded content kept. Nesting depth and the
//! lengths of strings and bare tokens are bounded.

use crate::error::{Category, DecodeError};
use crate::number;
use crate::string::{Scan, StringScanner};

/// What a [`Tokenizer`] hands its tokens to. Each call gets the token's
/// offset in the document, for errors. Strings are decoded (escapes
/// resolved, UTF-8 checked); numbers have passed JSON's number grammar.
pub trait Sink {
    /// The sink's own errors, which stop the tokenizer.
    type Error: From<DecodeError>;

    /// `{` opens an object.
    fn begin_object(&mut self, at: u64) -> Result<(), Self::Error>;
    /// An object's key, before its value.
    fn key(&mut self, key: &[u8], at: u64) -> Result<(), Self::Error>;
    /// `}` closes the innermost object.
    fn end_object(&mut self, at: u64) -> Result<(), Self::Error>;
    /// `[` opens an array.
    fn begin_array(&mut self, at: u64) -> Result<(), Self::Error>;
    /// `]` closes the innermost array.
    fn end_array(&mut self, at: u64) -> Result<(), Self::Error>;
    /// A string value.
    fn string(&mut self, value: &[u8], at: u64) -> Result<(), Self::Error>;
    /// A number, as its text.
    fn number(&mut self, token: &[u8], at: u64) -> Result<(), Self::Error>;
    /// `true` or `false`.
    fn boolean(&mut self, value: bool, at: u64) -> Result<(), Self::Error>;
    /// `null`.
    fn null(&mut self, at: u64) -> Result<(), Self::Error>;

    /// Offered `bytes` where an array's next value starts with a digit or
    /// `-`: a sink that knows the array holds numbers may take a run of
    /// whole `number,` items in one loop (the hot path of a large array),
    /// returning the bytes taken, which must end just after a comma (and
    /// any whitespace). Anything it does not take, the tokenizer reads as
    /// usual; by default that is everything.
    fn number_run(&mut self, _bytes: &[u8]) -> usize {
        0
    }
}

/// The bounds a [`Tokenizer`] holds a document to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The deepest nesting of objects and arrays.
    pub max_depth: usize,
    /// The longest string, decoded.
    pub max_string_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_depth: 64,
            max_string_bytes: 64 << 20,
        }
    }
}

/// The longest bare token (number or literal) carried across chunks.
const MAX_BARE_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    ValueOrEnd,
    Key,
    KeyOrEnd,
    Colon,
    AfterValue,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Object,
    Array,
}

/// A token cut by the end of a chunk.
#[derive(Debug)]
enum Partial {
    None,
    Bare,
    String { key: bool, at: u64 },
}

/// Walks one JSON document pushed to it in chunks.
pub struct Tokenizer {
    bounds: Bounds,
    /// Offset in the document of the current chunk's first byte.
    base: u64,
    expect: Expect,
    stack: Vec<Open>,
    partial: Partial,
    /// The bare token cut by a chunk boundary, and where it started.
    carry: Vec<u8>,
    carry_at: u64,
    /// The string being scanned, decoded.
    scratch: Vec<u8>,
    scanner: StringScanner,
    failed: bool,
    /// Values follow one another (NDJSON, or JSON text sequences).
    sequence: bool,
}

impl Tokenizer {
    /// A tokenizer expecting one JSON value.
    pub fn new(bounds: Bounds) -> Tokenizer {
        Tokenizer {
            bounds,
            base: 0,
            expect: Expect::Value,
            stack: Vec::new(),
            partial: Partial::None,
            carry: Vec::new(),
            carry_at: 0,
            scratch: Vec::new(),
            scanner: StringScanner::default(),
            failed: false,
            sequence: false,
        }
    }

    /// A tokenizer of any number of JSON values one after another,
    /// separated by whitespace (newline-delimited JSON): each is handed to
    /// the sink whole, and none is also a document.
    pub fn sequence(bounds: Bounds) -> Tokenizer {
        Tokenizer {
            sequence: true,
            ..Tokenizer::new(bounds)
        }
    }

    /// The bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.base
    }

    /// Tokenizes the next chunk, handing `sink` every token it completes.
    /// After an error the tokenizer is spent.
    pub fn feed<S: Sink>(&mut self, chunk: &[u8], sink: &mut S) -> Result<(), S::Error> {
        if self.failed {
            return Err(syntax(self.base, "the document already failed").into());
        }
        let result = self.feed_chunk(chunk, sink);
        self.base += chunk.len() as u64;
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    /// Ends the document: a number at its very end is complete now, and
    /// the value must be whole.
    pub fn finish<S: Sink>(&mut self, sink: &mut S) -> Result<(), S::Error> {
        if self.failed {
            return Err(syntax(self.base, "the document already failed").into());
        }
        match self.partial {
            Partial::Bare => self.end_bare(sink)?,
            Partial::String { .. } => {
                return Err(syntax(self.base, "the document ends inside a string").into())
            }
            Partial::None => {}
        }
        let between = self.sequence && self.stack.is_empty() && self.expect == Expect::Value;
        if self.expect != Expect::Done && !between {
            let what = if self.stack.is_empty() && self.expect == Expect::Value {
                "the document is empty"
            } else {
                "the document ends before its value does"
            };
            return Err(syntax(self.base, what).into());
        }
        Ok(())
    }

    fn feed_chunk<S: Sink>(&mut self, chunk: &[u8], sink: &mut S) -> Result<(), S::Error> {
        let mut pos = match self.partial {
            Partial::None => 0,
            Partial::Bare => self.continue_bare(chunk, 0, sink)?,
            Partial::String { .. } => self.continue_string(chunk, 0, sink)?,
        };
        while pos < chunk.len() {
            let b = chunk[pos];
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                pos += 1;
                continue;
            }
            let at = self.base + pos as u64;
            let value = matches!(self.expect, Expect::Value | Expect::ValueOrEnd);
            if value && (b == b'-' || b.is_ascii_digit()) && self.stack.last() == Some(&Open::Array)
            {
                let taken = sink.number_run(&chunk[pos..]);
                if taken > 0 {
                    // The sink took whole `number,` items: at a value again.
                    pos += taken;
                    self.expect = Expect::Value;
                    continue;
                }
            }
            match self.expect {
                Expect::Value | Expect::ValueOrEnd => match b {
                    b'{' => {
                        self.push(Open::Object, at)?;
                        sink.begin_object(at)?;
                        self.expect = Expect::KeyOrEnd;
                        pos += 1;
                    }
                    b'[' => {
                        self.push(Open::Array, at)?;
                        sink.begin_array(at)?;
                        self.expect = Expect::ValueOrEnd;
                        pos += 1;
                    }
                    b']' if self.expect == Expect::ValueOrEnd => {
                        self.pop(at, sink)?;
                        pos += 1;
                    }
                    b'"' => {
                        self.partial = Partial::String { key: false, at };
                        self.scratch.clear();
                        self.scanner = StringScanner::default();
                        pos = self.continue_string(chunk, pos + 1, sink)?;
                    }
                    b'-' | b'0'..=b'9' | b't' | b'f' | b'n' | b'N' | b'I' => {
                        self.partial = Partial::Bare;
                        self.carry.clear();
                        self.carry_at = at;
                        pos = self.continue_bare(chunk, pos, sink)?;
                    }
                    _ => {
                        let found = describe(b);
                        return Err(syntax(at, format!("expected a value, found {found}")).into());
                    }
                },
                Expect::Key | Expect::KeyOrEnd => match b {
                    b'"' => {
                        self.partial = Partial::String { key: true, at };
                        self.scratch.clear();
                        self.scanner = StringScanner::default();
                        pos = self.continue_string(chunk, pos + 1, sink)?;
                    }
                    b'}' if self.expect == Expect::KeyOrEnd => {
                        self.pop(at, sink)?;
                        pos += 1;
                    }
                    _ => {
                        let found = describe(b);
                        return Err(
                            syntax(at, format!("expected a string key, found {found}")).into()
                        );
                    }
                },
                Expect::Colon => {
                    if b != b':' {
                        let found = describe(b);
                        return Err(syntax(
                            at,
                            format!("expected ':' after the key, found {found}"),
                        )
                        .into());
                    }
                    self.expect = Expect::Value;
                    pos += 1;
                }
                Expect::AfterValue => {
                    match (b, self.stack.last()) {
                        (b',', Some(Open::Object)) => self.expect = Expect::Key,
                        (b',', Some(Open::Array)) => self.expect = Expect::Value,
                        (b']', Some(Open::Array)) | (b'}', Some(Open::Object)) => {
                            self.pop(at, sink)?
                        }
                        _ => {
                            let found = describe(b);
                            return Err(syntax(
                                at,
                                format!("expected ',' or a closing bracket, found {found}"),
                            )
                            .into());
                        }
                    }
                    pos += 1;
                }
                Expect::Done if self.sequence => self.expect = Expect::Value,
                Expect::Done => {
                    let found = describe(b);
                    return Err(syntax(
                        at,
                        format!("unexpected {found} after the end of the document"),
                    )
                    .into());
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, open: Open, at: u64) -> Result<(), DecodeError> {
        if self.stack.len() >= self.bounds.max_depth {
            return Err(DecodeError::new(
                Category::Limit,
                at,
                format!(
                    "the document nests deeper than {} levels",
                    self.bounds.max_depth
                ),
            ));
        }
        self.stack.push(open);
        Ok(())
    }

    fn pop<S: Sink>(&mut self, at: u64, sink: &mut S) -> Result<(), S::Error> {
        match self.stack.pop() {
            Some(Open::Object) => sink.end_object(at)?,
            Some(Open::Array) => sink.end_array(at)?,
            None => return Err(syntax(at, "a closing bracket with nothing open").into()),
        }
        self.value_done();
        Ok(())
    }

    fn value_done(&mut self) {
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::AfterValue
        };
    }

    /// Continues the bare token at `pos`: carries it if the chunk ends
    /// inside it, else hands it on. Returns where it stopped.
    fn continue_bare<S: Sink>(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut S,
    ) -> Result<usize, S::Error> {
        let end = chunk[pos..]
            .iter()
            .position(|&b| !is_bare(b))
            .map_or(chunk.len(), |n| pos + n);
        if self.carry.len() + (end - pos) > MAX_BARE_BYTES {
            return Err(syntax(self.carry_at, "a number or literal is too long").into());
        }
        if end == chunk.len() {
            // The chunk ends inside the token: carried to the next one.
            self.carry.extend_from_slice(&chunk[pos..end]);
        } else if self.carry.is_empty() {
            // Whole within the chunk (the common case): no copy.
            self.partial = Partial::None;
            self.bare(&chunk[pos..end], self.carry_at, sink)?;
        } else {
            self.carry.extend_from_slice(&chunk[pos..end]);
            self.end_bare(sink)?;
        }
        Ok(end)
    }

    fn end_bare<S: Sink>(&mut self, sink: &mut S) -> Result<(), S::Error> {
        self.partial = Partial::None;
        let token = std::mem::take(&mut self.carry);
        let result = self.bare(&token, self.carry_at, sink);
        self.carry = token;
        self.carry.clear();
        result
    }

    /// A whole bare token: a literal or a number.
    fn bare<S: Sink>(&mut self, token: &[u8], at: u64, sink: &mut S) -> Result<(), S::Error> {
        match token {
            b"true" => sink.boolean(true, at)?,
            b"false" => sink.boolean(false, at)?,
            b"null" => sink.null(at)?,
            _ => match number::check_grammar(token) {
                Ok(_) => sink.number(token, at)?,
                Err(message) => {
                    return Err(syntax(
                        at,
                        format!("{message}: {}", String::from_utf8_lossy(token)),
                    )
                    .into())
                }
            },
        }
        self.value_done();
        Ok(())
    }

    /// Continues the string whose content starts at `pos`. Returns where
    /// it stopped.
    fn continue_string<S: Sink>(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut S,
    ) -> Result<usize, S::Error> {
        let Partial::String { key, at } = self.partial else {
            return Ok(pos);
        };
        let limit = self.bounds.max_string_bytes;
        let scanned = self
            .scanner
            .scan(&chunk[pos..], Some(&mut self.scratch), limit)
            .map_err(|e| {
                let category = if e.limit {
                    Category::Limit
                } else {
                    Category::Syntax
                };
                DecodeError::new(category, self.base + (pos + e.at) as u64, e.message)
            })?;
        match scanned {
            Scan::Open => Ok(chunk.len()),
            Scan::Closed(used) => {
                self.partial = Partial::None;
                let value = std::mem::take(&mut self.scratch);
                let result = if key {
                    self.expect = Expect::Colon;
                    sink.key(&value, at)
                } else {
                    let r = sink.string(&value, at);
                    self.value_done();
                    r
                };
                self.scratch = value;
                result?;
                Ok(pos + used)
            }
        }
    }
}

fn is_bare(b: u8) -> bool {
    matches!(b, b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}

fn syntax(at: u64, message: impl Into<String>) -> DecodeError {
    DecodeError::new(Category::Syntax, at, message)
}

fn describe(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the events back as compact JSON.
    #[derive(Default)]
    struct Echo {
        out: String,
        /// Whether a comma goes before the next value, per open container.
        first: Vec<bool>,
        after_key: bool,
    }

    impl Echo {
        fn before_value(&mut self) {
            if self.after_key {
                self.after_key = false;
                return;
            }
            if let Some(first) = self.first.last_mut() {
                if !*first {
                    self.out.push(',');
                }
                *first = false;
            }
        }
    }

    impl Sink for Echo {
        type Error = DecodeError;
        fn begin_object(&mut self, _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out.push('{');
            self.first.push(true);
            Ok(())
        }
        fn key(&mut self, key: &[u8], _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out += &serde_json::to_string(std::str::from_utf8(key).unwrap()).unwrap();
            self.out.push(':');
            self.after_key = true;
            Ok(())
        }
        fn end_object(&mut self, _: u64) -> Result<(), DecodeError> {
            self.first.pop();
            self.out.push('}');
            Ok(())
        }
        fn begin_array(&mut self, _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out.push('[');
            self.first.push(true);
            Ok(())
        }
        fn end_array(&mut self, _: u64) -> Result<(), DecodeError> {
            self.first.pop();
            self.out.push(']');
            Ok(())
        }
        fn string(&mut self, v: &[u8], _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out += &serde_json::to_string(std::str::from_utf8(v).unwrap()).unwrap();
            Ok(())
        }
        fn number(&mut self, t: &[u8], _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out += std::str::from_utf8(t).unwrap();
            Ok(())
        }
        fn boolean(&mut self, b: bool, _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out += if b { "true" } else { "false" };
            Ok(())
        }
        fn null(&mut self, _: u64) -> Result<(), DecodeError> {
            self.before_value();
            self.out += "null";
            Ok(())
        }
    }

    fn echo(text: &str, chunk: usize) -> Result<String, DecodeError> {
        let mut t = Tokenizer::new(Bounds::default());
        let mut sink = Echo::default();
        for piece in text.as_bytes().chunks(chunk.max(1)) {
            t.feed(piece, &mut sink)?;
        }
        t.finish(&mut sink)?;
        Ok(sink.out)
    }

    #[test]
    fn every_chunking_gives_serde_jsons_reading() {
        let text = r#" {"a": [1, -2.5e3, true, false, null, "x\"\u00e9\ud83d\ude00"],
            "nested": {"b": {"c": []}, "d": {}}, "n": 12345678901234567890} "#;
        let want = serde_json::to_string(&serde_json::from_str::<serde_json::Value>(text).unwrap())
            .unwrap();
        for chunk in [1, 2, 3, 5, 7, 64, text.len()] {
            let got = echo(text, chunk).unwrap();
            let got: serde_json::Value = serde_json::from_str(&got).unwrap();
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                want,
                "chunks of {chunk}"
            );
        }
        assert_eq!(echo("7", 1).unwrap(), "7");
    }

    #[test]
    fn bad_documents_are_refused_where_they_go_wrong() {
        for (text, needle) in [
            ("", "empty"),
            ("{", "ends before"),
            ("[1,]", "expected a value"),
            ("{\"a\" 1}", "expected ':'"),
            ("[1 2]", "expected ','"),
            ("{\"a\":1}}", "after the end"),
            ("[01]", "leading zeros"),
            ("\"abc", "inside a string"),
            ("[nul]", "nul"),
            ("[1}", "expected ','"),
        ] {
            for chunk in [1, 3, 100] {
                let e = echo(text, chunk).unwrap_err();
                assert!(e.to_string().contains(needle), "{text:?} by {chunk}: {e}");
            }
        }
        let deep = "[".repeat(65) + &"]".repeat(65);
        let e = echo(&deep, 7).unwrap_err();
        assert_eq!(e.category(), Category::Limit);
    }

    #[test]
    fn a_sequence_hands_on_each_value_and_may_be_empty() {
        let text = "{\"a\": 1}\n{\"b\": [2, 3]}\n\n7 \"x\"{}";
        for chunk in [1, 2, 5, 100] {
            let mut t = Tokenizer::sequence(Bounds::default());
            let mut sink = Echo::default();
            for piece in text.as_bytes().chunks(chunk) {
                t.feed(piece, &mut sink).unwrap();
            }
            t.finish(&mut sink).unwrap();
            assert_eq!(sink.out, r#"{"a":1}{"b":[2,3]}7"x"{}"#, "chunks of {chunk}");
        }
        for text in ["", " \n "] {
            let mut t = Tokenizer::sequence(Bounds::default());
            t.feed(text.as_bytes(), &mut Echo::default()).unwrap();
            t.finish(&mut Echo::default()).unwrap();
        }
        let mut t = Tokenizer::sequence(Bounds::default());
        let mut sink = Echo::default();
        t.feed(b"{} {\"a\":", &mut sink).unwrap();
        let e = t.finish(&mut sink).unwrap_err();
        assert!(e.to_string().contains("ends before"), "{e}");
    }
}
