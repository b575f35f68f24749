//! JSON to protobuf as the body arrives: the proto3 JSON mapping, written
//! as wire format from the tokenizer's events (`wirespeed_json::push`),
//! with no message tree in between.
//!
//! A stack of frames follows the JSON's nesting: a message's object, a
//! repeated field's array (packed for scalars), a map's object (an entry
//! per key), and the well-known types that take any JSON
//! (`google.protobuf.Struct`, `Value`, `ListValue`). Each length-delimited
//! record is reserved when it opens and closed in place (`wire.rs`).
//! The other well-known types take their JSON forms: `Timestamp` and
//! `Duration` strings, `FieldMask` paths, the wrappers' bare values,
//! `Empty`, and `Any` with its `@type`, resolved in the descriptor pool.
//!
//! Decisions the mapping leaves to a parser, as protobuf's own parsers
//! make them: a field's JSON name or its proto name is taken; `null` is
//! the field's default (for `Value`, `NULL_VALUE`); 64-bit integers come
//! as numbers or strings, and any integer as an integral number in
//! exponent form (`1e3`); floats and doubles as numbers, numeric strings,
//! or `"NaN"`, `"Infinity"` and `"-Infinity"`; bytes in standard or
//! URL-safe base64, padded or not; enums by name or number. A field given
//! twice, or two fields of one oneof, are errors. Singular fields that
//! hold their default are not written (as an encoder would not), unless
//! the field tracks presence. An `Any` must give `@type` first: its type
//! decides how the rest is read, and the body is not held back to wait
//! for it.
//!
//! `mod.rs` holds the encoder's state and its stack; `events.rs` what each
//! tokenizer event does to it; `scalar.rs` how a JSON scalar is written as
//! a field's wire format; `text.rs` reads numbers, base64 and map keys.

mod events;
mod scalar;
mod text;

use std::collections::HashSet;

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use wirespeed_json::push::{Bounds, Sink, Tokenizer};

use crate::error::{Category, TranscodeError};
use crate::wire::{self};
use crate::wkt::{wkt, Wkt};

pub(crate) use text::field_from_text;
use text::*;

/// How a JSON body is read into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Skip fields the message does not have (and enum names it does not
    /// know) instead of refusing the body.
    pub ignore_unknown_fields: bool,
    /// The deepest nesting of JSON objects and arrays.
    pub max_depth: usize,
    /// The largest message written, in bytes.
    pub max_message_bytes: usize,
}

impl Default for EncodeOptions {
    fn default() -> EncodeOptions {
        EncodeOptions {
            ignore_unknown_fields: false,
            max_depth: 64,
            max_message_bytes: 64 << 20,
        }
    }
}

/// Encodes one JSON body, pushed in chunks of any size, as one message.
pub struct JsonToProto {
    tokenizer: Tokenizer,
    encoder: Encoder,
}

impl JsonToProto {
    /// An encoder of the JSON form of `message`.
    pub fn new(message: MessageDescriptor, options: EncodeOptions) -> JsonToProto {
        let bounds = Bounds {
            max_depth: options.max_depth,
            max_string_bytes: options.max_message_bytes,
        };
        JsonToProto {
            tokenizer: Tokenizer::new(bounds),
            encoder: Encoder {
                out: Vec::new(),
                stack: Vec::new(),
                root: Some(message),
                options,
                field_body: false,
            },
        }
    }

    /// Encodes the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), TranscodeError> {
        self.tokenizer.feed(chunk, &mut self.encoder)
    }

    /// An encoder of a body that is the value of one field of `message`
    /// (a `google.api.http` rule's `body: "field"`): `path` leads from
    /// `message` to the field. The wire format is `message`'s, with that
    /// field set.
    pub fn for_field(
        message: MessageDescriptor,
        path: &[FieldDescriptor],
        options: EncodeOptions,
    ) -> JsonToProto {
        let mut encoder = JsonToProto::new(message.clone(), options);
        let e = &mut encoder.encoder;
        e.root = None;
        let mut closes = Vec::new();
        let mut desc = message;
        for parent in &path[..path.len().saturating_sub(1)] {
            closes.push(wire::open(&mut e.out, parent.number()));
            if let Kind::Message(m) = parent.kind() {
                desc = m;
            }
        }
        let pending = match path.last() {
            Some(f) => Pending::Field(f.clone()),
            None => Pending::None,
        };
        e.stack.push(Frame::Message {
            desc,
            closes,
            seen: Vec::new(),
            oneofs: Vec::new(),
            pending,
            any: None,
        });
        e.field_body = true;
        encoder
    }

    /// Ends the body; the message's wire format.
    pub fn finish(mut self) -> Result<Vec<u8>, TranscodeError> {
        self.tokenizer.finish(&mut self.encoder)?;
        let mut encoder = self.encoder;
        if encoder.field_body {
            // The frame holding the body's field, opened by `for_field`.
            if let Some(Frame::Message { closes, .. }) = encoder.stack.pop() {
                for start in closes.into_iter().rev() {
                    wire::close(&mut encoder.out, start);
                }
            }
        }
        Ok(encoder.out)
    }

    /// Encodes a whole body.
    pub fn encode(
        message: MessageDescriptor,
        json: &[u8],
        options: EncodeOptions,
    ) -> Result<Vec<u8>, TranscodeError> {
        let mut encoder = JsonToProto::new(message, options);
        encoder.feed(json)?;
        encoder.finish()
    }
}

/// An `Any`'s progress.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AnyPhase {
    /// `@type` must come first.
    AwaitType,
    /// A well-known type's JSON is under `"value"`.
    AwaitValue(MessageDescriptor),
    /// The value is being (or was) read.
    Body,
}

/// Where the next key's value goes in a message.
#[derive(Debug, Clone)]
enum Pending {
    None,
    Field(FieldDescriptor),
    /// An unknown field, skipped.
    Skip,
    /// An `Any`'s `@type`.
    AnyType,
    /// An `Any`'s well-known value.
    AnyValue(MessageDescriptor),
}

enum Frame {
    /// A message's object; `closes` are the records to close when it ends.
    Message {
        desc: MessageDescriptor,
        closes: Vec<usize>,
        seen: Vec<u32>,
        oneofs: Vec<String>,
        pending: Pending,
        any: Option<AnyPhase>,
    },
    /// A repeated field's array; `packed` is the packed record's content
    /// start and the offset of its tag (to drop an empty one).
    List {
        field: FieldDescriptor,
        packed: Option<(usize, usize)>,
        /// A packed numeric element's kind, for the fast path.
        fast: Option<Packed>,
        /// A string list's field number, for the fast path.
        strings: Option<u32>,
    },
    /// A map field's object; `entry` is the open entry's content start.
    Map {
        field: FieldDescriptor,
        entry: Option<usize>,
        keys: HashSet<Vec<u8>>,
    },
    /// `google.protobuf.Struct`'s object.
    Struct {
        closes: Vec<usize>,
        entry: Option<usize>,
        keys: HashSet<Vec<u8>>,
    },
    /// `google.protobuf.ListValue`'s array.
    ListValue { closes: Vec<usize> },
    /// An unknown field's value, skipped: the nesting still open.
    Skip { depth: usize },
}

/// The element kinds of packed lists that numbers fill, copied out of the
/// descriptor once per list: the hot loop of a large array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Packed {
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Float,
    Double,
}

impl Packed {
    /// Writes integer `v` as an element of this kind; false when it is out
    /// of the kind's range (or the kind is a float).
    fn write_int(self, out: &mut Vec<u8>, v: i64) -> bool {
        let fits32 = i32::try_from(v).is_ok();
        let fitsu32 = u32::try_from(v).is_ok();
        match self {
            Packed::Int32 if fits32 => wire::varint(out, v as u64),
            Packed::Int64 => wire::varint(out, v as u64),
            Packed::Uint32 if fitsu32 => wire::varint(out, v as u64),
            Packed::Uint64 if v >= 0 => wire::varint(out, v as u64),
            Packed::Sint32 if fits32 => wire::varint(out, wire::zigzag32(v as i32)),
            Packed::Sint64 => wire::varint(out, wire::zigzag64(v)),
            Packed::Fixed32 if fitsu32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
            Packed::Fixed64 if v >= 0 => out.extend_from_slice(&(v as u64).to_le_bytes()),
            Packed::Sfixed32 if fits32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
            Packed::Sfixed64 => out.extend_from_slice(&v.to_le_bytes()),
            _ => return false,
        }
        true
    }

    fn of(kind: &Kind) -> Option<Packed> {
        Some(match kind {
            Kind::Int32 => Packed::Int32,
            Kind::Int64 => Packed::Int64,
            Kind::Uint32 => Packed::Uint32,
            Kind::Uint64 => Packed::Uint64,
            Kind::Sint32 => Packed::Sint32,
            Kind::Sint64 => Packed::Sint64,
            Kind::Fixed32 => Packed::Fixed32,
            Kind::Fixed64 => Packed::Fixed64,
            Kind::Sfixed32 => Packed::Sfixed32,
            Kind::Sfixed64 => Packed::Sfixed64,
            Kind::Float => Packed::Float,
            Kind::Double => Packed::Double,
            _ => return None,
        })
    }
}

/// A plain integer token (`-?[0-9]{1,18}`) without a detour through i128;
/// anything else is left to the general path.
/// Where a value goes.
enum Dest {
    Field(FieldDescriptor),
    Element(FieldDescriptor),
    /// The open map entry's value field.
    MapValue(FieldDescriptor),
    /// A `google.protobuf.Value` as field `n` of the enclosing record.
    Value(u32),
    /// A message written in place: the body's root, an `Any`'s value.
    InPlace(MessageDescriptor),
    AnyType,
    Skip,
}

/// A JSON scalar.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    String(&'a [u8]),
    Number(&'a [u8]),
    Bool(bool),
    Null,
}

impl Scalar<'_> {
    fn describe(&self) -> &'static str {
        match self {
            Scalar::String(_) => "a string",
            Scalar::Number(_) => "a number",
            Scalar::Bool(_) => "a boolean",
            Scalar::Null => "null",
        }
    }
}

pub(crate) struct Encoder {
    out: Vec<u8>,
    stack: Vec<Frame>,
    /// The body's message, until its value starts.
    root: Option<MessageDescriptor>,
    options: EncodeOptions,
    /// The body is one field's value (`JsonToProto::for_field`).
    field_body: bool,
}

fn invalid(at: u64, message: impl Into<String>) -> TranscodeError {
    TranscodeError::invalid(at, message)
}

impl Encoder {
    /// An encoder of one `message` at a time, for a stream of them: each
    /// begins with [`Encoder::start`].
    pub(crate) fn idle(options: EncodeOptions) -> Encoder {
        Encoder {
            out: Vec::new(),
            stack: Vec::new(),
            root: None,
            options,
            field_body: false,
        }
    }

    /// The next object is a whole `message`.
    pub(crate) fn start(&mut self, message: MessageDescriptor) {
        self.out.clear();
        self.stack.clear();
        self.root = Some(message);
    }

    /// Whether the message begun by [`Encoder::start`] has ended.
    pub(crate) fn ended(&self) -> bool {
        self.stack.is_empty() && self.root.is_none()
    }

    /// The ended message's wire format.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// A run of whole `number,` items of a packed list: each read by
    /// `read` (its value and length) and written by `write` (false when the
    /// value does not fit the field). It stops before an item it cannot
    /// take whole (the list's last, one cut by the chunk's end, one out of
    /// range, a form the fast reader does not know), which the general path
    /// then reads or words the error for; and after the item that passes
    /// the message's size bound, for the general path's check to word.
    /// Returns the bytes taken.
    fn items<V>(
        &mut self,
        bytes: &[u8],
        read: impl Fn(&[u8]) -> Option<(V, usize)>,
        write: impl Fn(&mut Vec<u8>, V) -> bool,
    ) -> usize {
        let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let mut pos = 0;
        loop {
            let start = pos;
            let Some((value, n)) = read(&bytes[pos..]) else {
                return start;
            };
            pos += n;
            while pos < bytes.len() && ws(bytes[pos]) {
                pos += 1;
            }
            if bytes.get(pos) != Some(&b',') || !write(&mut self.out, value) {
                return start;
            }
            pos += 1;
            while pos < bytes.len() && ws(bytes[pos]) {
                pos += 1;
            }
            if self.out.len() > self.options.max_message_bytes {
                return pos;
            }
        }
    }

    fn dest(&mut self, at: u64) -> Result<Dest, TranscodeError> {
        let Some(top) = self.stack.last_mut() else {
            return match self.root.take() {
                Some(root) => Ok(Dest::InPlace(root)),
                None => Err(invalid(at, "a second value after the body's message")),
            };
        };
        Ok(match top {
            Frame::Message { pending, .. } => match std::mem::replace(pending, Pending::None) {
                Pending::Field(f) => Dest::Field(f),
                Pending::Skip => Dest::Skip,
                Pending::AnyType => Dest::AnyType,
                Pending::AnyValue(desc) => Dest::InPlace(desc),
                Pending::None => return Err(invalid(at, "a value without a key")),
            },
            Frame::List { field, .. } => Dest::Element(field.clone()),
            Frame::Map { field, .. } => {
                let Kind::Message(entry) = field.kind() else {
                    return Err(invalid(at, "a map field without an entry message"));
                };
                Dest::MapValue(entry.map_entry_value_field())
            }
            Frame::Struct { .. } => Dest::Value(2),
            Frame::ListValue { .. } => Dest::Value(1),
            Frame::Skip { .. } => Dest::Skip,
        })
    }

    /// After a whole value: a message waits for its next key, a map or
    /// struct entry closes.
    fn value_done(&mut self) -> Result<(), TranscodeError> {
        if let Some(Frame::Map { entry, .. } | Frame::Struct { entry, .. }) = self.stack.last_mut()
        {
            if let Some(start) = entry.take() {
                wire::close(&mut self.out, start);
            }
        }
        Ok(())
    }

    fn check_size(&self, at: u64) -> Result<(), TranscodeError> {
        if self.out.len() > self.options.max_message_bytes {
            return Err(TranscodeError::new(
                Category::Limit,
                at,
                format!(
                    "the message is larger than {} bytes, the limit",
                    self.options.max_message_bytes
                ),
            ));
        }
        Ok(())
    }

    /// An object that is the message `desc`, as field `number` of its
    /// parent (or in place).
    fn open_message(
        &mut self,
        desc: MessageDescriptor,
        number: Option<u32>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        let mut closes = Vec::new();
        if let Some(n) = number {
            closes.push(wire::open(&mut self.out, n));
        }
        match wkt(&desc) {
            Wkt::Struct => self.stack.push(Frame::Struct {
                closes,
                entry: None,
                keys: HashSet::new(),
            }),
            Wkt::Value => {
                closes.push(wire::open(&mut self.out, 5));
                self.stack.push(Frame::Struct {
                    closes,
                    entry: None,
                    keys: HashSet::new(),
                });
            }
            Wkt::Plain | Wkt::Any => {
                let any = (wkt(&desc) == Wkt::Any).then_some(AnyPhase::AwaitType);
                self.stack.push(Frame::Message {
                    desc,
                    closes,
                    seen: Vec::new(),
                    oneofs: Vec::new(),
                    pending: Pending::None,
                    any,
                });
            }
            other => {
                return Err(invalid(
                    at,
                    format!(
                        "{} is written as {}, not an object",
                        desc.full_name(),
                        wkt_form(other)
                    ),
                ))
            }
        }
        Ok(())
    }

    /// An array that is the message `desc` (a `ListValue`, or a `Value`
    /// holding one).
    fn open_message_list(
        &mut self,
        desc: &MessageDescriptor,
        number: Option<u32>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        let mut closes = Vec::new();
        match wkt(desc) {
            Wkt::ListValue => {
                if let Some(n) = number {
                    closes.push(wire::open(&mut self.out, n));
                }
            }
            Wkt::Value => {
                if let Some(n) = number {
                    closes.push(wire::open(&mut self.out, n));
                }
                closes.push(wire::open(&mut self.out, 6));
            }
            other => {
                return Err(invalid(
                    at,
                    format!(
                        "{} is written as {}, not a list",
                        desc.full_name(),
                        wkt_form(other)
                    ),
                ))
            }
        }
        self.stack.push(Frame::ListValue { closes });
        Ok(())
    }

    /// A number in a packed numeric list, written without the
    /// descriptor; false to leave it to the general path (which words any
    /// error).
    fn packed_number(&mut self, kind: Packed, token: &[u8]) -> bool {
        let out = &mut self.out;
        match kind {
            Packed::Float | Packed::Double => {
                let Some(text) = std::str::from_utf8(token).ok() else {
                    return false;
                };
                if kind == Packed::Double {
                    let Some(x) = text.parse::<f64>().ok().filter(|x| x.is_finite()) else {
                        return false;
                    };
                    out.extend_from_slice(&x.to_le_bytes());
                } else {
                    let Some(x) = text.parse::<f32>().ok().filter(|x| x.is_finite()) else {
                        return false;
                    };
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            _ => {
                let Some(v) = plain_int(token) else {
                    return false;
                };
                if !kind.write_int(out, v) {
                    return false;
                }
            }
        }
        true
    }
}

impl Sink for Encoder {
    type Error = TranscodeError;

    /// A packed numeric list's run of `number,` items, in one loop.
    fn number_run(&mut self, bytes: &[u8]) -> usize {
        let Some(Frame::List {
            fast: Some(kind), ..
        }) = self.stack.last()
        else {
            return 0;
        };
        let kind = *kind;
        match kind {
            // Read in one pass and rounded once.
            Packed::Double => self.items(
                bytes,
                |b| wirespeed_json::f64_prefix(b).filter(|(x, _)| x.is_finite()),
                |out, x| {
                    out.extend_from_slice(&x.to_le_bytes());
                    true
                },
            ),
            Packed::Float => self.items(
                bytes,
                |b| wirespeed_json::f32_prefix(b).filter(|(x, _)| x.is_finite()),
                |out, x| {
                    out.extend_from_slice(&x.to_le_bytes());
                    true
                },
            ),
            _ => self.items(bytes, int_prefix, |out, v| kind.write_int(out, v)),
        }
    }

    fn begin_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.on_begin_object(at)
    }

    fn key(&mut self, key: &[u8], at: u64) -> Result<(), TranscodeError> {
        self.on_key(key, at)
    }

    fn end_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.on_end(at)
    }

    fn begin_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.on_begin_array(at)
    }

    fn end_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.on_end(at)
    }

    fn string(&mut self, value: &[u8], at: u64) -> Result<(), TranscodeError> {
        self.scalar(Scalar::String(value), at)
    }

    fn number(&mut self, token: &[u8], at: u64) -> Result<(), TranscodeError> {
        self.scalar(Scalar::Number(token), at)
    }

    fn boolean(&mut self, value: bool, at: u64) -> Result<(), TranscodeError> {
        self.scalar(Scalar::Bool(value), at)
    }

    fn null(&mut self, at: u64) -> Result<(), TranscodeError> {
        self.scalar(Scalar::Null, at)
    }
}
