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

use std::collections::HashSet;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use wirespeed_json::push::{Bounds, Sink, Tokenizer};

use crate::error::{Category, TranscodeError};
use crate::wire::{self, FIXED32, FIXED64, LEN, VARINT};
use crate::wkt::{self, wkt, Wkt};

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
fn plain_int(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, token),
    };
    if digits.is_empty() || digits.len() > 18 || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + i64::from(d);
    }
    Some(if negative { -v } else { v })
}

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

    fn scalar(&mut self, value: Scalar<'_>, at: u64) -> Result<(), TranscodeError> {
        match (value, self.stack.last()) {
            (
                Scalar::Number(token),
                Some(Frame::List {
                    fast: Some(kind), ..
                }),
            ) => {
                let kind = *kind;
                if self.packed_number(kind, token) {
                    return self.check_size(at);
                }
            }
            // A string list's element: tag, length, text (the tokenizer
            // checked its UTF-8).
            (
                Scalar::String(text),
                Some(Frame::List {
                    strings: Some(number),
                    ..
                }),
            ) => {
                wire::tag(&mut self.out, *number, LEN);
                wire::varint(&mut self.out, text.len() as u64);
                self.out.extend_from_slice(text);
                return self.check_size(at);
            }
            _ => {}
        }
        match self.dest(at)? {
            Dest::Skip => {}
            Dest::AnyType => self.any_type(value, at)?,
            Dest::Field(f) => {
                if matches!(value, Scalar::Null) && !is_value_message(&f) {
                    // The field's default: nothing is written.
                } else if f.is_map() || f.is_list() {
                    let want = if f.is_map() { "an object" } else { "a list" };
                    return Err(invalid(
                        at,
                        format!(
                            "field '{}' takes {want}, got {}",
                            f.name(),
                            value.describe()
                        ),
                    ));
                } else {
                    let skip_default = !f.supports_presence();
                    self.write_value(&f, f.kind(), Some(f.number()), skip_default, value, at)?;
                }
            }
            Dest::Element(f) => {
                if matches!(value, Scalar::Null) && !is_value_message(&f) {
                    return Err(invalid(
                        at,
                        format!("list '{}' may not hold null", f.name()),
                    ));
                }
                let packed = matches!(
                    self.stack.last(),
                    Some(Frame::List {
                        packed: Some(_),
                        ..
                    })
                );
                let number = (!packed).then_some(f.number());
                self.write_value(&f, f.kind(), number, false, value, at)?;
            }
            Dest::MapValue(vf) => {
                if matches!(value, Scalar::Null) && !is_value_message(&vf) {
                    return Err(invalid(at, "a map value may not be null"));
                }
                self.write_value(&vf, vf.kind(), Some(2), false, value, at)?;
            }
            Dest::Value(n) => self.write_json_value(Some(n), value, at)?,
            Dest::InPlace(desc) => {
                self.write_message_scalar(&desc, None, value, at)?;
            }
        }
        self.check_size(at)?;
        self.value_done()
    }

    /// `@type`: resolve the type, write `type_url`, and open `value`.
    fn any_type(&mut self, value: Scalar<'_>, at: u64) -> Result<(), TranscodeError> {
        let Scalar::String(url) = value else {
            return Err(invalid(at, "an Any's '@type' must be a string"));
        };
        let url = std::str::from_utf8(url).map_err(|_| invalid(at, "'@type' is not UTF-8"))?;
        let name = url.rsplit('/').next().unwrap_or(url);
        let Some(Frame::Message {
            desc,
            closes,
            pending,
            any,
            ..
        }) = self.stack.last_mut()
        else {
            return Err(invalid(at, "'@type' outside an Any"));
        };
        let resolved = desc
            .parent_pool()
            .get_message_by_name(name)
            .ok_or_else(|| {
                invalid(
                    at,
                    format!("'@type' names '{url}', a message the descriptors do not have"),
                )
            })?;
        wire::bytes_field(&mut self.out, 1, url.as_bytes());
        closes.push(wire::open(&mut self.out, 2));
        // A message with a JSON form of its own (an Any too) goes under
        // "value"; any other's fields follow "@type".
        if wkt(&resolved) == Wkt::Plain {
            *desc = resolved;
            *any = Some(AnyPhase::Body);
        } else {
            *any = Some(AnyPhase::AwaitValue(resolved));
        }
        *pending = Pending::None;
        Ok(())
    }

    /// A JSON scalar as a message-typed value: a well-known type's form.
    fn write_message_scalar(
        &mut self,
        desc: &MessageDescriptor,
        number: Option<u32>,
        value: Scalar<'_>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        let kind = wkt(desc);
        if matches!(value, Scalar::Null) && kind != Wkt::Value {
            // A message's default: unset.
            return Ok(());
        }
        let text = |v: Scalar<'_>| -> Result<String, TranscodeError> {
            match v {
                Scalar::String(s) => {
                    String::from_utf8(s.to_vec()).map_err(|_| invalid(at, "not UTF-8"))
                }
                other => Err(invalid(
                    at,
                    format!(
                        "{} is written as a string, got {}",
                        desc.full_name(),
                        other.describe()
                    ),
                )),
            }
        };
        let start = number.map(|n| wire::open(&mut self.out, n));
        match kind {
            Wkt::Timestamp | Wkt::Duration => {
                let t = text(value)?;
                let (seconds, nanos) = if kind == Wkt::Timestamp {
                    wkt::timestamp(&t)
                } else {
                    wkt::duration(&t)
                }
                .map_err(|e| invalid(at, e))?;
                if seconds != 0 {
                    wire::tag(&mut self.out, 1, VARINT);
                    wire::varint(&mut self.out, seconds as u64);
                }
                if nanos != 0 {
                    wire::tag(&mut self.out, 2, VARINT);
                    wire::varint(&mut self.out, i64::from(nanos) as u64);
                }
            }
            Wkt::FieldMask => {
                for path in wkt::field_mask(&text(value)?).map_err(|e| invalid(at, e))? {
                    wire::bytes_field(&mut self.out, 1, path.as_bytes());
                }
            }
            Wkt::Wrapper => {
                let inner = desc
                    .get_field(1)
                    .ok_or_else(|| invalid(at, "a wrapper without its field"))?;
                self.write_value(&inner, inner.kind(), Some(1), true, value, at)?;
            }
            Wkt::Value => {
                self.write_json_value_content(value, at)?;
            }
            Wkt::Struct | Wkt::ListValue | Wkt::Any | Wkt::Plain => {
                return Err(invalid(
                    at,
                    format!(
                        "{} is written as {}, got {}",
                        desc.full_name(),
                        wkt_form(kind),
                        value.describe()
                    ),
                ))
            }
        }
        if let Some(start) = start {
            wire::close(&mut self.out, start);
        }
        Ok(())
    }

    /// A `google.protobuf.Value` holding a JSON scalar, as field `number`.
    fn write_json_value(
        &mut self,
        number: Option<u32>,
        value: Scalar<'_>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        let start = number.map(|n| wire::open(&mut self.out, n));
        self.write_json_value_content(value, at)?;
        if let Some(start) = start {
            wire::close(&mut self.out, start);
        }
        Ok(())
    }

    fn write_json_value_content(
        &mut self,
        value: Scalar<'_>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        match value {
            Scalar::Null => {
                wire::tag(&mut self.out, 1, VARINT);
                wire::varint(&mut self.out, 0);
            }
            Scalar::Number(token) => {
                let x = parse_f64(token)
                    .ok_or_else(|| invalid(at, "a number out of double's range"))?;
                wire::tag(&mut self.out, 2, FIXED64);
                self.out.extend_from_slice(&x.to_le_bytes());
            }
            Scalar::String(s) => wire::bytes_field(&mut self.out, 3, s),
            Scalar::Bool(b) => {
                wire::tag(&mut self.out, 4, VARINT);
                wire::varint(&mut self.out, u64::from(b));
            }
        }
        Ok(())
    }

    /// A JSON scalar as field `field` (kind `kind`), tagged with `number`
    /// (or untagged, in a packed list). `skip_default` leaves out a value
    /// equal to the default.
    fn write_value(
        &mut self,
        field: &FieldDescriptor,
        kind: Kind,
        number: Option<u32>,
        skip_default: bool,
        value: Scalar<'_>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        // Looked up only when an error names it.
        let name = FieldName(field);
        let wrong = |want: &str| {
            invalid(
                at,
                format!("field '{name}' takes {want}, got {}", value.describe()),
            )
        };
        let out = &mut self.out;
        let tag = |out: &mut Vec<u8>, wire_type| {
            if let Some(n) = number {
                wire::tag(out, n, wire_type);
            }
        };
        match kind {
            Kind::Message(desc) => return self.write_message_scalar(&desc, number, value, at),
            Kind::Enum(e) => {
                let n: i32 = match value {
                    Scalar::String(s) => {
                        let text = std::str::from_utf8(s).unwrap_or("");
                        match e.get_value_by_name(text) {
                            Some(v) => v.number(),
                            None if self.options.ignore_unknown_fields => return Ok(()),
                            None => {
                                let names: Vec<String> =
                                    e.values().map(|v| v.name().to_owned()).take(16).collect();
                                return Err(invalid(
                                    at,
                                    format!(
                                    "field '{name}': '{text}' is not a value of enum {}; it has {}",
                                    e.full_name(),
                                    names.join(", ")
                                ),
                                ));
                            }
                        }
                    }
                    Scalar::Number(token) => {
                        integer(token, i64::from(i32::MIN), i64::from(i32::MAX))
                            .map_err(|e| invalid(at, format!("field '{name}': {e}")))?
                            as i32
                    }
                    Scalar::Null if e.full_name() == "google.protobuf.NullValue" => 0,
                    _ => return Err(wrong("an enum name or number")),
                };
                if !(skip_default && n == 0) {
                    tag(out, VARINT);
                    wire::varint(out, i64::from(n) as u64);
                }
            }
            Kind::Bool => {
                let Scalar::Bool(b) = value else {
                    return Err(wrong("true or false"));
                };
                if !skip_default || b {
                    tag(out, VARINT);
                    wire::varint(out, u64::from(b));
                }
            }
            Kind::String => {
                let Scalar::String(s) = value else {
                    return Err(wrong("a string"));
                };
                if !(skip_default && s.is_empty()) {
                    tag(out, LEN);
                    wire::varint(out, s.len() as u64);
                    out.extend_from_slice(s);
                }
            }
            Kind::Bytes => {
                let Scalar::String(s) = value else {
                    return Err(wrong("base64 text"));
                };
                if !(skip_default && s.is_empty()) {
                    // Decoded straight after its tag and length.
                    let mark = out.len();
                    tag(out, LEN);
                    let after_tag = out.len();
                    base64_into(s, out).map_err(|e| {
                        out.truncate(mark);
                        invalid(at, format!("field '{name}': {e}"))
                    })?;
                    // Padding alone decodes to nothing: the default.
                    if skip_default && out.len() == after_tag + 1 {
                        out.truncate(mark);
                    }
                }
            }
            Kind::Double | Kind::Float => {
                let token = match value {
                    Scalar::Number(t) | Scalar::String(t) => t,
                    _ => return Err(wrong("a number")),
                };
                let x = match token {
                    b"NaN" => f64::NAN,
                    b"Infinity" => f64::INFINITY,
                    b"-Infinity" => f64::NEG_INFINITY,
                    _ => parse_f64(token).ok_or_else(|| {
                        invalid(
                            at,
                            format!(
                                "field '{name}': '{}' is not a number in double's range",
                                String::from_utf8_lossy(token)
                            ),
                        )
                    })?,
                };
                if kind == Kind::Float {
                    let f = if x.is_finite() {
                        // Rounded once, from the decimal text.
                        let f = wirespeed_json::number_to_f32(token).unwrap_or(x as f32);
                        if f.is_infinite() {
                            return Err(invalid(
                                at,
                                format!("field '{name}': {x} is out of float's range"),
                            ));
                        }
                        f
                    } else {
                        x as f32
                    };
                    if !(skip_default && f.to_bits() == 0) {
                        tag(out, FIXED32);
                        out.extend_from_slice(&f.to_le_bytes());
                    }
                } else if !(skip_default && x.to_bits() == 0) {
                    tag(out, FIXED64);
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            Kind::Int32
            | Kind::Sint32
            | Kind::Sfixed32
            | Kind::Int64
            | Kind::Sint64
            | Kind::Sfixed64
            | Kind::Uint32
            | Kind::Fixed32
            | Kind::Uint64
            | Kind::Fixed64 => {
                let token = match value {
                    Scalar::Number(t) | Scalar::String(t) => t,
                    _ => return Err(wrong("an integer")),
                };
                let (lo, hi): (i128, i128) = match kind {
                    Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
                        (i32::MIN.into(), i32::MAX.into())
                    }
                    Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
                        (i64::MIN.into(), i64::MAX.into())
                    }
                    Kind::Uint32 | Kind::Fixed32 => (0, u32::MAX.into()),
                    _ => (0, u64::MAX.into()),
                };
                let v = integer128(token, lo, hi)
                    .map_err(|e| invalid(at, format!("field '{name}': {e}")))?;
                if skip_default && v == 0 {
                    return Ok(());
                }
                match kind {
                    Kind::Int32 | Kind::Int64 => {
                        tag(out, VARINT);
                        wire::varint(out, v as i64 as u64);
                    }
                    Kind::Uint32 | Kind::Uint64 => {
                        tag(out, VARINT);
                        wire::varint(out, v as u64);
                    }
                    Kind::Sint32 => {
                        tag(out, VARINT);
                        wire::varint(out, wire::zigzag32(v as i32));
                    }
                    Kind::Sint64 => {
                        tag(out, VARINT);
                        wire::varint(out, wire::zigzag64(v as i64));
                    }
                    Kind::Fixed32 | Kind::Sfixed32 => {
                        tag(out, FIXED32);
                        out.extend_from_slice(&(v as u32).to_le_bytes());
                    }
                    _ => {
                        tag(out, FIXED64);
                        out.extend_from_slice(&(v as u64).to_le_bytes());
                    }
                }
            }
        }
        Ok(())
    }

    /// A key in the innermost object.
    fn on_key(&mut self, key: &[u8], at: u64) -> Result<(), TranscodeError> {
        let ignore = self.options.ignore_unknown_fields;
        let out = &mut self.out;
        match self.stack.last_mut() {
            Some(Frame::Message {
                desc,
                seen,
                oneofs,
                pending,
                any,
                ..
            }) => {
                let name =
                    std::str::from_utf8(key).map_err(|_| invalid(at, "a key that is not UTF-8"))?;
                match any {
                    Some(AnyPhase::AwaitType) => {
                        if name != "@type" {
                            return Err(invalid(at, format!(
                                "an Any gives '@type' first (its type decides how the rest is read); got '{name}'"
                            )));
                        }
                        *pending = Pending::AnyType;
                        return Ok(());
                    }
                    Some(AnyPhase::AwaitValue(value_desc)) => {
                        if name != "value" {
                            return Err(invalid(
                                at,
                                format!(
                                    "an Any holding {} has only 'value', got '{name}'",
                                    value_desc.full_name()
                                ),
                            ));
                        }
                        *pending = Pending::AnyValue(value_desc.clone());
                        *any = Some(AnyPhase::Body);
                        return Ok(());
                    }
                    _ => {}
                }
                let field = desc
                    .get_field_by_json_name(name)
                    .or_else(|| desc.get_field_by_name(name));
                let Some(field) = field else {
                    if ignore {
                        *pending = Pending::Skip;
                        return Ok(());
                    }
                    let names: Vec<String> = desc
                        .fields()
                        .map(|f| f.json_name().to_owned())
                        .take(24)
                        .collect();
                    return Err(invalid(
                        at,
                        format!(
                            "message {} has no field '{name}'; its fields are {}",
                            desc.full_name(),
                            names.join(", ")
                        ),
                    ));
                };
                if seen.contains(&field.number()) {
                    return Err(invalid(
                        at,
                        format!("field '{}' is given twice", field.name()),
                    ));
                }
                seen.push(field.number());
                if let Some(oneof) = field.containing_oneof().filter(|o| !o.is_synthetic()) {
                    if oneofs.iter().any(|o| o == oneof.name()) {
                        return Err(invalid(
                            at,
                            format!(
                                "oneof '{}' already has a field; '{}' is another of its fields",
                                oneof.name(),
                                field.name()
                            ),
                        ));
                    }
                    oneofs.push(oneof.name().to_owned());
                }
                *pending = Pending::Field(field);
            }
            Some(Frame::Map { field, entry, keys }) => {
                if !keys.insert(key.to_vec()) {
                    return Err(invalid(
                        at,
                        format!(
                            "map '{}' has key '{}' twice",
                            field.name(),
                            String::from_utf8_lossy(key)
                        ),
                    ));
                }
                let Kind::Message(entry_desc) = field.kind() else {
                    return Err(invalid(at, "a map field without an entry message"));
                };
                *entry = Some(wire::open(out, field.number()));
                let key_field = entry_desc.map_entry_key_field();
                write_map_key(out, &key_field, key)
                    .map_err(|e| invalid(at, format!("map '{}': {e}", field.name())))?;
            }
            Some(Frame::Struct { entry, keys, .. }) => {
                if !keys.insert(key.to_vec()) {
                    return Err(invalid(
                        at,
                        format!("key '{}' is given twice", String::from_utf8_lossy(key)),
                    ));
                }
                *entry = Some(wire::open(out, 1));
                wire::bytes_field(out, 1, key);
            }
            Some(Frame::Skip { .. }) => {}
            Some(Frame::List { .. } | Frame::ListValue { .. }) | None => {
                return Err(invalid(at, "a key outside an object"));
            }
        }
        Ok(())
    }

    fn on_begin_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        match self.dest(at)? {
            Dest::Skip => self.skip_open(),
            Dest::AnyType => return Err(invalid(at, "an Any's '@type' must be a string")),
            Dest::Field(f) => {
                if f.is_map() {
                    self.stack.push(Frame::Map {
                        field: f,
                        entry: None,
                        keys: HashSet::new(),
                    });
                } else if f.is_list() {
                    return Err(invalid(
                        at,
                        format!("field '{}' takes a list, got an object", f.name()),
                    ));
                } else {
                    match f.kind() {
                        Kind::Message(desc) => self.open_message(desc, Some(f.number()), at)?,
                        _ => {
                            return Err(invalid(
                                at,
                                format!(
                                    "field '{}' takes {}, got an object",
                                    f.name(),
                                    kind_form(&f.kind())
                                ),
                            ))
                        }
                    }
                }
            }
            Dest::Element(f) | Dest::MapValue(f) => {
                let number = if matches!(self.stack.last(), Some(Frame::Map { .. })) {
                    2
                } else {
                    f.number()
                };
                match f.kind() {
                    Kind::Message(desc) => self.open_message(desc, Some(number), at)?,
                    _ => {
                        return Err(invalid(
                            at,
                            format!(
                                "'{}' takes {}, got an object",
                                f.name(),
                                kind_form(&f.kind())
                            ),
                        ))
                    }
                }
            }
            Dest::Value(n) => {
                let closes = vec![wire::open(&mut self.out, n), wire::open(&mut self.out, 5)];
                self.stack.push(Frame::Struct {
                    closes,
                    entry: None,
                    keys: HashSet::new(),
                });
            }
            Dest::InPlace(desc) => self.open_message(desc, None, at)?,
        }
        Ok(())
    }

    fn on_begin_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        match self.dest(at)? {
            Dest::Skip => self.skip_open(),
            Dest::AnyType => return Err(invalid(at, "an Any's '@type' must be a string")),
            Dest::Field(f) => {
                if f.is_list() {
                    let packed = if f.is_packed() {
                        let tag_at = self.out.len();
                        Some((wire::open(&mut self.out, f.number()), tag_at))
                    } else {
                        None
                    };
                    let kind = f.kind();
                    let fast = packed.and_then(|_| Packed::of(&kind));
                    let strings = (kind == Kind::String).then(|| f.number());
                    self.stack.push(Frame::List {
                        field: f,
                        packed,
                        fast,
                        strings,
                    });
                } else if let Kind::Message(desc) = f.kind() {
                    self.open_message_list(&desc, Some(f.number()), at)?;
                } else {
                    let want = if f.is_map() {
                        "an object".to_owned()
                    } else {
                        kind_form(&f.kind())
                    };
                    return Err(invalid(
                        at,
                        format!("field '{}' takes {want}, got a list", f.name()),
                    ));
                }
            }
            Dest::Element(f) | Dest::MapValue(f) => {
                let number = if matches!(self.stack.last(), Some(Frame::Map { .. })) {
                    2
                } else {
                    f.number()
                };
                match f.kind() {
                    Kind::Message(desc) => self.open_message_list(&desc, Some(number), at)?,
                    _ => {
                        return Err(invalid(
                            at,
                            format!("'{}' takes {}, got a list", f.name(), kind_form(&f.kind())),
                        ))
                    }
                }
            }
            Dest::Value(n) => {
                let closes = vec![wire::open(&mut self.out, n), wire::open(&mut self.out, 6)];
                self.stack.push(Frame::ListValue { closes });
            }
            Dest::InPlace(desc) => self.open_message_list(&desc, None, at)?,
        }
        Ok(())
    }

    fn skip_open(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Skip { depth }) => *depth += 1,
            _ => self.stack.push(Frame::Skip { depth: 1 }),
        }
    }

    /// The innermost object or array ends.
    fn on_end(&mut self, at: u64) -> Result<(), TranscodeError> {
        if let Some(Frame::Skip { depth }) = self.stack.last_mut() {
            *depth -= 1;
            if *depth > 0 {
                return Ok(());
            }
        }
        match self.stack.pop() {
            Some(Frame::Message { closes, any, .. }) => {
                // An Any with no '@type' is the empty Any.
                if let Some(AnyPhase::AwaitValue(v)) = any {
                    return Err(invalid(
                        at,
                        format!("an Any holding {} needs its 'value'", v.full_name()),
                    ));
                }
                for start in closes.into_iter().rev() {
                    wire::close(&mut self.out, start);
                }
            }
            Some(Frame::List { packed, .. }) => {
                if let Some((start, tag_at)) = packed {
                    if self.out.len() == start {
                        self.out.truncate(tag_at);
                    } else {
                        wire::close(&mut self.out, start);
                    }
                }
            }
            Some(Frame::Struct { closes, .. } | Frame::ListValue { closes }) => {
                for start in closes.into_iter().rev() {
                    wire::close(&mut self.out, start);
                }
            }
            Some(Frame::Map { .. } | Frame::Skip { .. }) => {}
            None => return Err(invalid(at, "a closing bracket with nothing open")),
        }
        self.check_size(at)?;
        self.value_done()
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

/// The plain integer (digits, an optional minus, at most 18 digits, no
/// leading zero) at the start of `bytes`: its value and length.
fn int_prefix(bytes: &[u8]) -> Option<(i64, usize)> {
    let negative = bytes.first() == Some(&b'-');
    let digits = usize::from(negative);
    let mut pos = digits;
    let mut v: i64 = 0;
    while let Some(&d) = bytes.get(pos) {
        if !d.is_ascii_digit() {
            break;
        }
        if pos - digits == 18 {
            return None;
        }
        v = v * 10 + i64::from(d - b'0');
        pos += 1;
    }
    let n = pos - digits;
    if n == 0 || (n > 1 && bytes[digits] == b'0') {
        return None;
    }
    Some((if negative { -v } else { v }, pos))
}

/// A field's name, looked up when it is printed.
#[derive(Clone, Copy)]
struct FieldName<'a>(&'a FieldDescriptor);

impl std::fmt::Display for FieldName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

fn is_value_message(f: &FieldDescriptor) -> bool {
    matches!(f.kind(), Kind::Message(m) if m.full_name() == "google.protobuf.Value")
}

fn wkt_form(kind: Wkt) -> &'static str {
    match kind {
        Wkt::Timestamp => "an RFC 3339 string",
        Wkt::Duration => "a string such as \"1.5s\"",
        Wkt::FieldMask => "a string of comma-separated paths",
        Wkt::Wrapper => "its bare value",
        Wkt::ListValue => "a list",
        Wkt::Struct | Wkt::Any | Wkt::Plain => "an object",
        Wkt::Value => "any JSON value",
    }
}

fn kind_form(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("a {} message", m.full_name()),
        Kind::Enum(e) => format!("a {} name or number", e.full_name()),
        Kind::String => "a string".to_owned(),
        Kind::Bytes => "base64 text".to_owned(),
        Kind::Bool => "true or false".to_owned(),
        _ => "a number".to_owned(),
    }
}

/// A text value (a path variable, a query parameter) as `field`, tagged:
/// `true`/`false` for booleans, a name or number for enums, base64
/// (URL-safe too) for bytes, and the string forms of numbers and of the
/// well-known types.
pub(crate) fn field_from_text(
    field: &FieldDescriptor,
    text: &str,
    options: EncodeOptions,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    let kind = field.kind();
    let leaf = match &kind {
        Kind::Message(m) if wkt(m) == Wkt::Wrapper => {
            m.get_field(1).map(|f| f.kind()).unwrap_or(Kind::String)
        }
        other => other.clone(),
    };
    let value = match leaf {
        Kind::Bool => match text {
            "true" => Scalar::Bool(true),
            "false" => Scalar::Bool(false),
            _ => {
                return Err(invalid(
                    0,
                    format!("field '{}' takes true or false, got '{text}'", field.name()),
                ))
            }
        },
        Kind::Enum(_) if text.parse::<i64>().is_ok() => Scalar::Number(text.as_bytes()),
        _ => Scalar::String(text.as_bytes()),
    };
    let mut encoder = Encoder {
        out: std::mem::take(out),
        stack: Vec::new(),
        root: None,
        options,
        field_body: false,
    };
    let result = encoder.write_value(field, kind, Some(field.number()), false, value, 0);
    *out = encoder.out;
    result
}

/// A map key, written as the entry's field 1 from its JSON text.
fn write_map_key(out: &mut Vec<u8>, key_field: &FieldDescriptor, key: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(key).map_err(|_| "a key that is not UTF-8".to_owned())?;
    match key_field.kind() {
        Kind::String => wire::bytes_field(out, 1, key),
        Kind::Bool => {
            let b = match text {
                "true" => true,
                "false" => false,
                _ => return Err(format!("key '{text}' is not true or false")),
            };
            wire::tag(out, 1, VARINT);
            wire::varint(out, u64::from(b));
        }
        kind => {
            let (lo, hi): (i128, i128) = match kind {
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => (i32::MIN.into(), i32::MAX.into()),
                Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => (i64::MIN.into(), i64::MAX.into()),
                Kind::Uint32 | Kind::Fixed32 => (0, u32::MAX.into()),
                _ => (0, u64::MAX.into()),
            };
            let v = integer128(key, lo, hi).map_err(|e| format!("key '{text}': {e}"))?;
            match kind {
                Kind::Sint32 => {
                    wire::tag(out, 1, VARINT);
                    wire::varint(out, wire::zigzag32(v as i32));
                }
                Kind::Sint64 => {
                    wire::tag(out, 1, VARINT);
                    wire::varint(out, wire::zigzag64(v as i64));
                }
                Kind::Fixed32 | Kind::Sfixed32 => {
                    wire::tag(out, 1, FIXED32);
                    out.extend_from_slice(&(v as u32).to_le_bytes());
                }
                Kind::Fixed64 | Kind::Sfixed64 => {
                    wire::tag(out, 1, FIXED64);
                    out.extend_from_slice(&(v as u64).to_le_bytes());
                }
                _ => {
                    wire::tag(out, 1, VARINT);
                    wire::varint(out, v as i64 as u64);
                }
            }
        }
    }
    Ok(())
}

/// A finite number's value, from JSON number text (or a numeric string).
fn parse_f64(token: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(token).ok()?;
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
    {
        return None;
    }
    wirespeed_json::number_to_f64(text.as_bytes()).filter(|x| x.is_finite())
}

/// An integer in `lo..=hi` from JSON number text: plain digits exactly,
/// or an integral number in decimal or exponent form.
fn integer128(token: &[u8], lo: i128, hi: i128) -> Result<i128, String> {
    let text = std::str::from_utf8(token).unwrap_or("");
    let value = if !text.is_empty()
        && text
            .bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
        && text != "-"
    {
        text.parse::<i128>()
            .map_err(|_| format!("'{text}' is out of range"))?
    } else {
        let x = parse_f64(token).ok_or_else(|| format!("'{text}' is not an integer"))?;
        if x.fract() != 0.0 {
            return Err(format!("'{text}' is not an integer"));
        }
        if x.abs() > 1.8e19 {
            return Err(format!("'{text}' is out of range"));
        }
        x as i128
    };
    if value < lo || value > hi {
        return Err(format!("{value} is out of range [{lo}, {hi}]"));
    }
    Ok(value)
}

fn integer(token: &[u8], lo: i64, hi: i64) -> Result<i64, String> {
    integer128(token, lo.into(), hi.into()).map(|v| v as i64)
}

/// Base64, standard or URL-safe, padded or not.
/// Appends the length (a varint) and the bytes of standard or URL-safe
/// base64, padded or not: the length is known from the text before it is
/// decoded, so the bytes are decoded in place, with no copy.
fn base64_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    const CONFIG: GeneralPurposeConfig =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, CONFIG);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, CONFIG);
    let engine = if memchr::memchr2(b'-', b'_', text).is_some() {
        &URL_SAFE
    } else {
        &STANDARD
    };
    let unpadded = text.len()
        - text
            .iter()
            .rev()
            .take(2)
            .take_while(|&&b| b == b'=')
            .count();
    if unpadded % 4 == 1 {
        return Err("invalid base64: its length is not a whole number of bytes".to_owned());
    }
    let len = unpadded / 4 * 3 + (unpadded % 4).saturating_sub(1);
    wire::varint(out, len as u64);
    let start = out.len();
    engine
        .decode_vec(text, out)
        .map_err(|e| format!("invalid base64: {e}"))?;
    if out.len() - start != len {
        return Err("invalid base64: padding in the middle".to_owned());
    }
    Ok(())
}
