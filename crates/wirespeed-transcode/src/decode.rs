//! Protobuf to JSON straight from the wire bytes: the proto3 JSON mapping
//! written as each message is read, with no message tree.
//!
//! A message's fields may come in any order, and a repeated field's
//! elements may be spread among the others, while JSON groups each field.
//! So each message is read twice: once to note where each field's values
//! lie (a list of byte ranges), then in field-number order to write them.
//! A singular field given more than once keeps its last value, and a
//! message field given more than once is the merge of its parts, as
//! protobuf's parsers read them. Unknown fields are skipped.
//!
//! The well-known types are written in their JSON forms. Options: emit
//! fields that hold their default, the proto field names instead of the
//! JSON names, enums as numbers.

use base64::Engine;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use wirespeed_json::encode_string;

use crate::error::{Category, TranscodeError};
use crate::wire::{FIXED32, FIXED64, LEN, VARINT};
use crate::wkt::{wkt, Wkt};

/// How a message is printed as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrintOptions {
    /// Print fields that hold their default (empty lists and maps
    /// included); fields that track presence are printed only when set.
    pub emit_defaults: bool,
    /// Keys are the proto field names (`user_id`), not the JSON names
    /// (`userId`).
    pub proto_field_names: bool,
    /// Enums are printed as numbers.
    pub enums_as_ints: bool,
    /// The deepest nesting of messages.
    pub max_depth: usize,
}

impl Default for PrintOptions {
    fn default() -> PrintOptions {
        PrintOptions {
            emit_defaults: false,
            proto_field_names: false,
            enums_as_ints: false,
            max_depth: 100,
        }
    }
}

/// Appends the JSON of the message `desc` whose wire format is `bytes`.
pub fn proto_to_json(
    desc: &MessageDescriptor,
    bytes: &[u8],
    options: &PrintOptions,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    Printer { options, out }.message(desc, bytes, 0)
}

/// Appends the JSON of one field of the message `desc` (a
/// `google.api.http` rule's `response_body`): `path` leads from `desc` to
/// the field. An absent field prints as its default (`[]`, `{}`, `null`
/// for a message).
pub fn field_to_json(
    desc: &MessageDescriptor,
    path: &[FieldDescriptor],
    bytes: &[u8],
    options: &PrintOptions,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    let mut printer = Printer { options, out };
    let Some((leaf, parents)) = path.split_last() else {
        return printer.message(desc, bytes, 0);
    };
    // Each parent message is the merge of its occurrences (copied only
    // when there are parents: a top-level field is read in place).
    let mut content = std::borrow::Cow::Borrowed(bytes);
    for parent in parents {
        let mut merged = Vec::new();
        for (n, raw) in fields(&content)? {
            if let (true, Raw::Len(s, e)) = (n == parent.number(), raw) {
                merged.extend_from_slice(&content[s..e]);
            }
        }
        content = std::borrow::Cow::Owned(merged);
    }
    let values: Vec<(u32, Raw)> = fields(&content)?
        .into_iter()
        .filter(|(n, _)| *n == leaf.number())
        .collect();
    if leaf.is_map() {
        printer.map(leaf, &values, &content, 0)
    } else if leaf.is_list() {
        printer.list(leaf, &values, &content, 0)
    } else if values.is_empty() {
        printer.default_scalar(&leaf.kind())
    } else {
        if !printer.singular(leaf, &values, &content, 0)? {
            printer.default_scalar(&leaf.kind())?;
        }
        Ok(())
    }
}

/// One field's value on the wire.
#[derive(Debug, Clone, Copy)]
enum Raw {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Len(usize, usize),
}

fn malformed(message: impl Into<String>) -> TranscodeError {
    TranscodeError::new(Category::Invalid, 0, message)
}

fn read_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, TranscodeError> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *bytes
            .get(*pos)
            .ok_or_else(|| malformed("the message ends inside a varint"))?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(malformed("a varint longer than 64 bits"));
        }
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(malformed("a varint longer than 10 bytes"))
}

/// The fields of a message, in wire order: number and value.
fn fields(bytes: &[u8]) -> Result<Vec<(u32, Raw)>, TranscodeError> {
    let mut pos = 0;
    let mut fields = Vec::new();
    while pos < bytes.len() {
        let key = read_varint(bytes, &mut pos)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| malformed(format!("invalid field number {}", key >> 3)))?;
        let raw = match (key & 7) as u32 {
            VARINT => Raw::Varint(read_varint(bytes, &mut pos)?),
            FIXED64 => {
                let b: [u8; 8] = bytes
                    .get(pos..pos + 8)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(|| malformed("the message ends inside a fixed64"))?;
                pos += 8;
                Raw::Fixed64(u64::from_le_bytes(b))
            }
            FIXED32 => {
                let b: [u8; 4] = bytes
                    .get(pos..pos + 4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(|| malformed("the message ends inside a fixed32"))?;
                pos += 4;
                Raw::Fixed32(u32::from_le_bytes(b))
            }
            LEN => {
                let len = read_varint(bytes, &mut pos)?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| pos.checked_add(len))
                    .filter(|&end| end <= bytes.len())
                    .ok_or_else(|| {
                        malformed(format!(
                            "field {number} claims {len} bytes past the message's end"
                        ))
                    })?;
                let raw = Raw::Len(pos, end);
                pos = end;
                raw
            }
            other => {
                return Err(malformed(format!(
                    "field {number} has wire type {other}, which proto3 does not use"
                )))
            }
        };
        fields.push((number, raw));
    }
    Ok(fields)
}

struct Printer<'a> {
    options: &'a PrintOptions,
    out: &'a mut Vec<u8>,
}

impl Printer<'_> {
    fn message(
        &mut self,
        desc: &MessageDescriptor,
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), TranscodeError> {
        if depth > self.options.max_depth {
            return Err(TranscodeError::new(
                Category::Limit,
                0,
                format!("messages nest deeper than {}", self.options.max_depth),
            ));
        }
        match wkt(desc) {
            Wkt::Timestamp => return self.timestamp(bytes, false),
            Wkt::Duration => return self.timestamp(bytes, true),
            Wkt::FieldMask => return self.field_mask(bytes),
            Wkt::Struct => return self.structure(bytes, depth),
            Wkt::ListValue => return self.list_value(bytes, depth),
            Wkt::Value => return self.value(bytes, depth),
            Wkt::Any => return self.any(desc, bytes, depth),
            Wkt::Wrapper => {
                let field = desc
                    .get_field(1)
                    .ok_or_else(|| malformed("a wrapper without its field"))?;
                let raws = fields(bytes)?;
                return match raws.iter().rev().find(|(n, _)| *n == 1) {
                    Some(&(_, raw)) => self.scalar(&field, field.kind(), raw, bytes),
                    None => self.default_scalar(&field.kind()),
                };
            }
            Wkt::Plain => {}
        }
        self.out.push(b'{');
        self.fields(desc, bytes, depth)?;
        self.out.push(b'}');
        Ok(())
    }

    /// A message's fields as `"key":value` pairs; whether any was written.
    fn fields(
        &mut self,
        desc: &MessageDescriptor,
        bytes: &[u8],
        depth: usize,
    ) -> Result<bool, TranscodeError> {
        let mut raws = fields(bytes)?;
        // Grouped by field, in wire order within each.
        raws.sort_by_key(|&(n, _)| n);
        let mut wrote = false;
        let mut i = 0;
        let mut fields: Vec<FieldDescriptor> = desc.fields().collect();
        fields.sort_by_key(|f| f.number());
        for field in fields {
            while i < raws.len() && raws[i].0 < field.number() {
                i += 1;
            }
            let start = i;
            while i < raws.len() && raws[i].0 == field.number() {
                i += 1;
            }
            let values = &raws[start..i];
            if values.is_empty() && !self.emits_unset(&field) {
                continue;
            }
            let key_at = self.out.len();
            if wrote {
                self.out.push(b',');
            }
            let name = if self.options.proto_field_names {
                field.name()
            } else {
                field.json_name()
            };
            encode_string(name, self.out);
            self.out.push(b':');
            let printed = if field.is_map() {
                self.map(&field, values, bytes, depth)?;
                true
            } else if field.is_list() {
                self.list(&field, values, bytes, depth)?;
                true
            } else {
                self.singular(&field, values, bytes, depth)?
            };
            if printed {
                wrote = true;
            } else {
                self.out.truncate(key_at);
            }
        }
        Ok(wrote)
    }

    /// Whether a field absent from the wire is printed.
    fn emits_unset(&self, field: &FieldDescriptor) -> bool {
        self.options.emit_defaults
            && (field.is_list() || field.is_map() || !field.supports_presence())
    }

    /// A singular field; false when it holds its default and is not
    /// printed.
    fn singular(
        &mut self,
        field: &FieldDescriptor,
        values: &[(u32, Raw)],
        bytes: &[u8],
        depth: usize,
    ) -> Result<bool, TranscodeError> {
        let kind = field.kind();
        let Some(&(_, last)) = values.last() else {
            self.default_scalar(&kind)?;
            return Ok(true);
        };
        if let Kind::Message(m) = &kind {
            let merged;
            let content: &[u8] = if values.len() == 1 {
                let Raw::Len(s, e) = last else {
                    return Err(malformed(format!(
                        "field '{}' is a message with a non-length wire type",
                        field.name()
                    )));
                };
                &bytes[s..e]
            } else {
                // Concatenated parts are their merge.
                let mut all = Vec::new();
                for &(_, raw) in values {
                    let Raw::Len(s, e) = raw else {
                        return Err(malformed(format!(
                            "field '{}' is a message with a non-length wire type",
                            field.name()
                        )));
                    };
                    all.extend_from_slice(&bytes[s..e]);
                }
                merged = all;
                &merged
            };
            self.message(m, content, depth + 1)?;
            return Ok(true);
        }
        if !field.supports_presence()
            && !self.options.emit_defaults
            && is_default(&kind, last, bytes)
        {
            return Ok(false);
        }
        self.scalar(field, kind, last, bytes)?;
        Ok(true)
    }

    fn list(
        &mut self,
        field: &FieldDescriptor,
        values: &[(u32, Raw)],
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let kind = field.kind();
        self.out.push(b'[');
        let mut first = true;
        for &(_, raw) in values {
            match (&kind, raw) {
                (Kind::Message(m), Raw::Len(s, e)) => {
                    if !first {
                        self.out.push(b',');
                    }
                    first = false;
                    self.message(m, &bytes[s..e], depth + 1)?;
                }
                (Kind::String, Raw::Len(s, e)) => {
                    if !first {
                        self.out.push(b',');
                    }
                    first = false;
                    let text = std::str::from_utf8(&bytes[s..e]).map_err(|_| {
                        malformed(format!("string field '{}' is not UTF-8", field.name()))
                    })?;
                    encode_string(text, self.out);
                }
                (Kind::Bytes, Raw::Len(..)) => {
                    if !first {
                        self.out.push(b',');
                    }
                    first = false;
                    self.scalar(field, kind.clone(), raw, bytes)?;
                }
                (Kind::Int32, Raw::Len(s, e)) => {
                    // Packed int32: the hot loop of a large array.
                    first = packed_int32(&bytes[s..e], first, self.out)?;
                }
                (Kind::Double, Raw::Len(s, e)) => {
                    first = packed_floats::<8>(&bytes[s..e], first, self.out)?;
                }
                (Kind::Float, Raw::Len(s, e)) => {
                    first = packed_floats::<4>(&bytes[s..e], first, self.out)?;
                }
                (Kind::Int64 | Kind::Uint32 | Kind::Uint64, Raw::Len(s, e)) => {
                    let packed = &bytes[s..e];
                    let quoted = matches!(kind, Kind::Int64 | Kind::Uint64);
                    let mut ints = itoa::Buffer::new();
                    let mut pos = 0;
                    while pos < packed.len() {
                        let v = read_varint(packed, &mut pos)?;
                        if !first {
                            self.out.push(b',');
                        }
                        first = false;
                        if quoted {
                            self.out.push(b'"');
                        }
                        let text = match kind {
                            Kind::Int64 => ints.format(v as i64),
                            Kind::Uint32 => ints.format(v as u32),
                            _ => ints.format(v),
                        };
                        self.out.extend_from_slice(text.as_bytes());
                        if quoted {
                            self.out.push(b'"');
                        }
                    }
                }
                (_, Raw::Len(s, e)) => {
                    // Packed.
                    let packed = &bytes[s..e];
                    let mut pos = 0;
                    while pos < packed.len() {
                        let raw = match wire_type(&kind) {
                            VARINT => Raw::Varint(read_varint(packed, &mut pos)?),
                            FIXED32 => {
                                let b: [u8; 4] = packed
                                    .get(pos..pos + 4)
                                    .and_then(|s| s.try_into().ok())
                                    .ok_or_else(|| {
                                        malformed("a packed list ends inside a value")
                                    })?;
                                pos += 4;
                                Raw::Fixed32(u32::from_le_bytes(b))
                            }
                            _ => {
                                let b: [u8; 8] = packed
                                    .get(pos..pos + 8)
                                    .and_then(|s| s.try_into().ok())
                                    .ok_or_else(|| {
                                        malformed("a packed list ends inside a value")
                                    })?;
                                pos += 8;
                                Raw::Fixed64(u64::from_le_bytes(b))
                            }
                        };
                        if !first {
                            self.out.push(b',');
                        }
                        first = false;
                        self.scalar(field, kind.clone(), raw, bytes)?;
                    }
                }
                _ => {
                    if !first {
                        self.out.push(b',');
                    }
                    first = false;
                    self.scalar(field, kind.clone(), raw, bytes)?;
                }
            }
        }
        self.out.push(b']');
        Ok(())
    }

    fn map(
        &mut self,
        field: &FieldDescriptor,
        values: &[(u32, Raw)],
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let Kind::Message(entry) = field.kind() else {
            return Err(malformed("a map field without an entry message"));
        };
        let (key_field, value_field) = (entry.map_entry_key_field(), entry.map_entry_value_field());
        self.out.push(b'{');
        for (i, &(_, raw)) in values.iter().enumerate() {
            let Raw::Len(s, e) = raw else {
                return Err(malformed(format!(
                    "map '{}' has an entry with a non-length wire type",
                    field.name()
                )));
            };
            let entry_bytes = &bytes[s..e];
            let raws = fields(entry_bytes)?;
            if i > 0 {
                self.out.push(b',');
            }
            // The key, as a JSON string.
            match raws.iter().rev().find(|(n, _)| *n == 1) {
                Some(&(_, key)) => match key_field.kind() {
                    Kind::String => self.scalar(&key_field, Kind::String, key, entry_bytes)?,
                    kind => {
                        self.out.push(b'"');
                        let at = self.out.len();
                        self.scalar(&key_field, kind, key, entry_bytes)?;
                        // 64-bit keys are printed quoted already.
                        if self.out.get(at) == Some(&b'"') {
                            self.out.remove(at);
                            self.out.pop();
                        }
                        self.out.push(b'"');
                    }
                },
                None => match key_field.kind() {
                    Kind::String => self.out.extend_from_slice(b"\"\""),
                    Kind::Bool => self.out.extend_from_slice(b"\"false\""),
                    _ => self.out.extend_from_slice(b"\"0\""),
                },
            }
            self.out.push(b':');
            let value_raws: Vec<(u32, Raw)> = raws.into_iter().filter(|(n, _)| *n == 2).collect();
            match value_field.kind() {
                Kind::Message(m) => {
                    let mut all = Vec::new();
                    for &(_, raw) in &value_raws {
                        if let Raw::Len(s, e) = raw {
                            all.extend_from_slice(&entry_bytes[s..e]);
                        }
                    }
                    self.message(&m, &all, depth + 1)?;
                }
                kind => match value_raws.last() {
                    Some(&(_, raw)) => self.scalar(&value_field, kind, raw, entry_bytes)?,
                    None => self.default_scalar(&kind)?,
                },
            }
        }
        self.out.push(b'}');
        Ok(())
    }

    fn default_scalar(&mut self, kind: &Kind) -> Result<(), TranscodeError> {
        let text: &[u8] = match kind {
            Kind::Bool => b"false",
            Kind::String | Kind::Bytes => b"\"\"",
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64 => b"\"0\"",
            Kind::Enum(e) => {
                if self.options.enums_as_ints {
                    b"0"
                } else {
                    let name = e
                        .get_value(0)
                        .map(|v| v.name().to_owned())
                        .unwrap_or_else(|| "0".to_owned());
                    encode_string(&name, self.out);
                    return Ok(());
                }
            }
            Kind::Message(_) => b"null",
            Kind::Float | Kind::Double => b"0.0",
            _ => b"0",
        };
        self.out.extend_from_slice(text);
        Ok(())
    }

    fn scalar(
        &mut self,
        field: &FieldDescriptor,
        kind: Kind,
        raw: Raw,
        bytes: &[u8],
    ) -> Result<(), TranscodeError> {
        let wrong = || {
            malformed(format!(
                "field '{}' has a wire type its kind does not use",
                field.name()
            ))
        };
        let mut ints = itoa_buffer();
        match (kind, raw) {
            (Kind::Int32, Raw::Varint(v)) => self.int(v as i32 as i64, &mut ints, false),
            (Kind::Int64, Raw::Varint(v)) => self.int(v as i64, &mut ints, true),
            (Kind::Uint32, Raw::Varint(v)) => self.uint(u64::from(v as u32), false),
            (Kind::Uint64, Raw::Varint(v)) => self.uint(v, true),
            (Kind::Sint32, Raw::Varint(v)) => {
                let v = v as u32;
                self.int(
                    i64::from(((v >> 1) as i32) ^ -((v & 1) as i32)),
                    &mut ints,
                    false,
                )
            }
            (Kind::Sint64, Raw::Varint(v)) => {
                self.int(((v >> 1) as i64) ^ -((v & 1) as i64), &mut ints, true)
            }
            (Kind::Fixed32, Raw::Fixed32(v)) => self.uint(u64::from(v), false),
            (Kind::Sfixed32, Raw::Fixed32(v)) => self.int(i64::from(v as i32), &mut ints, false),
            (Kind::Fixed64, Raw::Fixed64(v)) => self.uint(v, true),
            (Kind::Sfixed64, Raw::Fixed64(v)) => self.int(v as i64, &mut ints, true),
            (Kind::Bool, Raw::Varint(v)) => {
                self.out
                    .extend_from_slice(if v != 0 { b"true" } else { b"false" })
            }
            (Kind::Float, Raw::Fixed32(v)) => {
                let x = f32::from_bits(v);
                if x.is_finite() {
                    self.out
                        .extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
                } else {
                    self.non_finite(f64::from(x));
                }
            }
            (Kind::Double, Raw::Fixed64(v)) => {
                let x = f64::from_bits(v);
                if x.is_finite() {
                    self.out
                        .extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
                } else {
                    self.non_finite(x);
                }
            }
            (Kind::String, Raw::Len(s, e)) => {
                let text = std::str::from_utf8(&bytes[s..e]).map_err(|_| {
                    malformed(format!("string field '{}' is not UTF-8", field.name()))
                })?;
                encode_string(text, self.out);
            }
            (Kind::Bytes, Raw::Len(s, e)) => {
                self.out.push(b'"');
                let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes[s..e]);
                self.out.extend_from_slice(encoded.as_bytes());
                self.out.push(b'"');
            }
            (Kind::Enum(e), Raw::Varint(v)) => {
                let n = v as i32;
                match e.get_value(n).filter(|_| !self.options.enums_as_ints) {
                    Some(value) => encode_string(value.name(), self.out),
                    None if e.full_name() == "google.protobuf.NullValue" => {
                        self.out.extend_from_slice(b"null")
                    }
                    None => self.out.extend_from_slice(ints.format(n).as_bytes()),
                }
            }
            _ => return Err(wrong()),
        }
        Ok(())
    }

    fn int(&mut self, v: i64, ints: &mut itoa::Buffer, quoted: bool) {
        if quoted {
            self.out.push(b'"');
        }
        self.out.extend_from_slice(ints.format(v).as_bytes());
        if quoted {
            self.out.push(b'"');
        }
    }

    fn uint(&mut self, v: u64, quoted: bool) {
        if quoted {
            self.out.push(b'"');
        }
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        if quoted {
            self.out.push(b'"');
        }
    }

    fn non_finite(&mut self, x: f64) {
        self.out.extend_from_slice(if x.is_nan() {
            b"\"NaN\""
        } else if x > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    }

    /// `Timestamp` as RFC 3339, `Duration` as `"1.5s"`: 0, 3, 6 or 9
    /// fraction digits.
    fn timestamp(&mut self, bytes: &[u8], duration: bool) -> Result<(), TranscodeError> {
        let (mut seconds, mut nanos) = (0i64, 0i32);
        for (n, raw) in fields(bytes)? {
            match (n, raw) {
                (1, Raw::Varint(v)) => seconds = v as i64,
                (2, Raw::Varint(v)) => nanos = v as i32,
                _ => {}
            }
        }
        let fraction = |nanos: i32| -> String {
            if nanos == 0 {
                String::new()
            } else if nanos % 1_000_000 == 0 {
                format!(".{:03}", nanos / 1_000_000)
            } else if nanos % 1_000 == 0 {
                format!(".{:06}", nanos / 1_000)
            } else {
                format!(".{nanos:09}")
            }
        };
        let text = if duration {
            if !(-999_999_999..=999_999_999).contains(&nanos)
                || (seconds > 0 && nanos < 0)
                || (seconds < 0 && nanos > 0)
            {
                return Err(malformed(format!(
                    "Duration {seconds}s {nanos}ns is not normalized"
                )));
            }
            let sign = if seconds < 0 || nanos < 0 { "-" } else { "" };
            format!("{sign}{}{}s", seconds.unsigned_abs(), fraction(nanos.abs()))
        } else {
            if !(0..=999_999_999).contains(&nanos)
                || !(-62_135_596_800..=253_402_300_799).contains(&seconds)
            {
                return Err(malformed(format!(
                    "Timestamp {seconds}s {nanos}ns is out of range"
                )));
            }
            let days = seconds.div_euclid(86_400);
            let secs = seconds.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(days);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{}Z",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                fraction(nanos)
            )
        };
        encode_string(&text, self.out);
        Ok(())
    }

    fn field_mask(&mut self, bytes: &[u8]) -> Result<(), TranscodeError> {
        let mut paths = Vec::new();
        for (n, raw) in fields(bytes)? {
            if let (1, Raw::Len(s, e)) = (n, raw) {
                let path = std::str::from_utf8(&bytes[s..e])
                    .map_err(|_| malformed("a field mask path is not UTF-8"))?;
                let mut camel = String::with_capacity(path.len());
                let mut upper = false;
                for c in path.chars() {
                    if c == '_' {
                        upper = true;
                    } else if upper {
                        camel.push(c.to_ascii_uppercase());
                        upper = false;
                    } else {
                        camel.push(c);
                    }
                }
                paths.push(camel);
            }
        }
        encode_string(&paths.join(","), self.out);
        Ok(())
    }

    /// `Struct`: its `fields` map as an object.
    fn structure(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        self.out.push(b'{');
        let mut first = true;
        for (n, raw) in fields(bytes)? {
            let (1, Raw::Len(s, e)) = (n, raw) else {
                continue;
            };
            let entry = &bytes[s..e];
            let raws = fields(entry)?;
            if !first {
                self.out.push(b',');
            }
            first = false;
            match raws.iter().rev().find(|(n, _)| *n == 1) {
                Some(&(_, Raw::Len(ks, ke))) => {
                    let key = std::str::from_utf8(&entry[ks..ke])
                        .map_err(|_| malformed("a Struct key is not UTF-8"))?;
                    encode_string(key, self.out);
                }
                _ => self.out.extend_from_slice(b"\"\""),
            }
            self.out.push(b':');
            let mut value = Vec::new();
            for (n, raw) in &raws {
                if let (2, Raw::Len(vs, ve)) = (n, raw) {
                    value.extend_from_slice(&entry[*vs..*ve]);
                }
            }
            self.value(&value, depth + 1)?;
        }
        self.out.push(b'}');
        Ok(())
    }

    fn list_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        self.out.push(b'[');
        let mut first = true;
        for (n, raw) in fields(bytes)? {
            let (1, Raw::Len(s, e)) = (n, raw) else {
                continue;
            };
            if !first {
                self.out.push(b',');
            }
            first = false;
            self.value(&bytes[s..e], depth + 1)?;
        }
        self.out.push(b']');
        Ok(())
    }

    /// `Value`: its one kind, the last one given.
    fn value(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        if depth > self.options.max_depth {
            return Err(TranscodeError::new(
                Category::Limit,
                0,
                format!("values nest deeper than {}", self.options.max_depth),
            ));
        }
        let raws = fields(bytes)?;
        let Some(&(n, raw)) = raws.iter().rev().find(|(n, _)| (1..=6).contains(n)) else {
            // A Value with no kind: printed as null, as protobuf does.
            self.out.extend_from_slice(b"null");
            return Ok(());
        };
        match (n, raw) {
            (1, _) => self.out.extend_from_slice(b"null"),
            (2, Raw::Fixed64(v)) => {
                let x = f64::from_bits(v);
                if !x.is_finite() {
                    return Err(malformed(
                        "a Value's number is NaN or infinite, which JSON cannot hold",
                    ));
                }
                self.out
                    .extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
            }
            (3, Raw::Len(s, e)) => {
                let text = std::str::from_utf8(&bytes[s..e])
                    .map_err(|_| malformed("a Value's string is not UTF-8"))?;
                encode_string(text, self.out);
            }
            (4, Raw::Varint(v)) => {
                self.out
                    .extend_from_slice(if v != 0 { b"true" } else { b"false" })
            }
            (5, Raw::Len(s, e)) => self.structure(&bytes[s..e], depth)?,
            (6, Raw::Len(s, e)) => self.list_value(&bytes[s..e], depth)?,
            _ => return Err(malformed("a Value's kind has the wrong wire type")),
        }
        Ok(())
    }

    /// `Any`: `@type`, then the message's fields (or its well-known JSON
    /// under `value`).
    fn any(
        &mut self,
        desc: &MessageDescriptor,
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let (mut url, mut value) = ("", (0, 0));
        for (n, raw) in fields(bytes)? {
            match (n, raw) {
                (1, Raw::Len(s, e)) => {
                    url = std::str::from_utf8(&bytes[s..e])
                        .map_err(|_| malformed("an Any's type URL is not UTF-8"))?
                }
                (2, Raw::Len(s, e)) => value = (s, e),
                _ => {}
            }
        }
        if url.is_empty() {
            self.out.extend_from_slice(b"{}");
            return Ok(());
        }
        let name = url.rsplit('/').next().unwrap_or(url);
        let inner = desc
            .parent_pool()
            .get_message_by_name(name)
            .ok_or_else(|| {
                malformed(format!(
                    "an Any holds '{url}', a message the descriptors do not have"
                ))
            })?;
        let content = &bytes[value.0..value.1];
        self.out.extend_from_slice(b"{\"@type\":");
        encode_string(url, self.out);
        let special = wkt(&inner) != Wkt::Plain;
        if special {
            self.out.extend_from_slice(b",\"value\":");
            self.message(&inner, content, depth + 1)?;
        } else {
            self.out.push(b',');
            let mark = self.out.len();
            if !self.fields(&inner, content, depth + 1)? {
                self.out.truncate(mark - 1);
            }
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// A packed int32 list's values as JSON numbers, comma-separated after
/// what `out` holds (a comma first unless `first`). Room for every value
/// is reserved once, each varint is read with one bounds check while ten
/// bytes remain, and digits are written into the reserved room. Returns
/// whether the list is still empty.
fn packed_int32(packed: &[u8], mut first: bool, out: &mut Vec<u8>) -> Result<bool, TranscodeError> {
    // Text is gathered in a block on the stack, written out when nearly
    // full: each value costs a few stores, not a vector's bookkeeping.
    const BLOCK: usize = 4096;
    let mut block = [0u8; BLOCK];
    let mut n = 0;
    out.reserve(packed.len() * 4);
    let mut pos = 0;
    while pos < packed.len() {
        let v = match packed.get(pos..pos + 10) {
            Some(window) => {
                let mut v = 0u64;
                let mut k = 0;
                loop {
                    let b = window[k];
                    v |= u64::from(b & 0x7f) << (7 * k);
                    k += 1;
                    if b < 0x80 {
                        break;
                    }
                    if k == 10 {
                        return Err(malformed("a varint longer than 10 bytes"));
                    }
                }
                pos += k;
                v
            }
            None => read_varint(packed, &mut pos)?,
        };
        // A comma, a sign and ten digits at most.
        if n > BLOCK - 12 {
            out.extend_from_slice(&block[..n]);
            n = 0;
        }
        if !first {
            block[n] = b',';
            n += 1;
        }
        first = false;
        n += write_i32(v as i32, &mut block[n..n + 11]);
    }
    out.extend_from_slice(&block[..n]);
    Ok(first)
}

/// Two-digit pairs, "00" to "99".
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `x` in decimal at the start of `out` (room for 11 bytes);
/// returns its length.
#[inline(always)]
fn write_i32(x: i32, out: &mut [u8]) -> usize {
    let sign = usize::from(x < 0);
    out[0] = b'-';
    let mut u = x.unsigned_abs();
    let digits = match u {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1_000..=9_999 => 4,
        10_000..=99_999 => 5,
        100_000..=999_999 => 6,
        1_000_000..=9_999_999 => 7,
        10_000_000..=99_999_999 => 8,
        100_000_000..=999_999_999 => 9,
        _ => 10,
    };
    let mut end = sign + digits;
    while u >= 100 {
        let pair = (u % 100) as usize * 2;
        u /= 100;
        out[end - 2..end].copy_from_slice(&PAIRS[pair..pair + 2]);
        end -= 2;
    }
    if u >= 10 {
        let pair = u as usize * 2;
        out[end - 2..end].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        out[end - 1] = b'0' + u as u8;
    }
    sign + digits
}

/// A packed double (`W` = 8) or float (`W` = 4) list's values as JSON
/// numbers, comma-separated after what `out` holds (a comma first unless
/// `first`), in the shortest form that reads back to the same value
/// (zmij); non-finite values as the mapping's strings. Returns whether the
/// list is still empty.
fn packed_floats<const W: usize>(
    packed: &[u8],
    mut first: bool,
    out: &mut Vec<u8>,
) -> Result<bool, TranscodeError> {
    if !packed.len().is_multiple_of(W) {
        return Err(malformed("a packed list ends inside a value"));
    }
    out.reserve(packed.len() / W * 26);
    let mut floats = zmij::Buffer::new();
    for value in packed.chunks_exact(W) {
        if !first {
            out.push(b',');
        }
        first = false;
        let x = if W == 8 {
            f64::from_le_bytes(value.try_into().expect("eight bytes"))
        } else {
            let x = f32::from_le_bytes(value.try_into().expect("four bytes"));
            if x.is_finite() {
                out.extend_from_slice(floats.format_finite(x).as_bytes());
                continue;
            }
            f64::from(x)
        };
        if x.is_finite() {
            out.extend_from_slice(floats.format_finite(x).as_bytes());
        } else {
            out.extend_from_slice(if x.is_nan() {
                b"\"NaN\""
            } else if x > 0.0 {
                b"\"Infinity\""
            } else {
                b"\"-Infinity\""
            });
        }
    }
    Ok(first)
}

fn itoa_buffer() -> itoa::Buffer {
    itoa::Buffer::new()
}

fn wire_type(kind: &Kind) -> u32 {
    match kind {
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => FIXED32,
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => FIXED64,
        Kind::String | Kind::Bytes | Kind::Message(_) => LEN,
        _ => VARINT,
    }
}

/// Whether a singular scalar's wire value is its kind's default.
fn is_default(kind: &Kind, raw: Raw, bytes: &[u8]) -> bool {
    match (kind, raw) {
        (_, Raw::Varint(v)) => v == 0,
        (Kind::Float, Raw::Fixed32(v)) => v == 0,
        (_, Raw::Fixed32(v)) => v == 0,
        (_, Raw::Fixed64(v)) => v == 0,
        (_, Raw::Len(s, e)) => bytes[s..e].is_empty(),
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int32s_are_written_as_itoa_writes_them() {
        let mut values = vec![
            0,
            1,
            -1,
            9,
            10,
            -10,
            99,
            100,
            i32::MIN,
            i32::MAX,
            i32::MIN + 1,
        ];
        for p in 0..10 {
            let t = 10i64.pow(p);
            for d in [-1, 0, 1] {
                for s in [1, -1] {
                    if let Ok(v) = i32::try_from(s * (t + d)) {
                        values.push(v);
                    }
                }
            }
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            values.push(state as i32 >> (state % 31));
        }
        let mut packed = Vec::new();
        for &v in &values {
            crate::wire::varint(&mut packed, v as i64 as u64);
        }
        let mut out = Vec::new();
        packed_int32(&packed, true, &mut out).unwrap();
        let want: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        assert_eq!(String::from_utf8(out).unwrap(), want.join(","));
    }
}
