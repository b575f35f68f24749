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
//!
//! `mod.rs` walks a message's fields and prints singular fields, maps and
//! scalars; `lists.rs` prints repeated fields, packed numbers in tight
//! loops; `well_known.rs` prints the well-known types' JSON forms.

mod lists;
mod well_known;

use base64::Engine;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use wirespeed_json::encode_string;

use crate::error::{Category, TranscodeError};
use crate::wire::{FIXED32, FIXED64, LEN, VARINT};
use crate::wkt::{wkt, Wkt};

use lists::*;

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
