//! A JSON scalar written as a field's wire format: enums by name or
//! number, booleans, strings, base64 bytes, floats and doubles rounded
//! once from their text, integers of every width and encoding, and the
//! well-known types a scalar stands for.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use super::*;
use crate::error::TranscodeError;
use crate::wire::{self, FIXED32, FIXED64, LEN, VARINT};
use crate::wkt::{self, wkt, Wkt};

impl Encoder {
    pub(super) fn scalar(&mut self, value: Scalar<'_>, at: u64) -> Result<(), TranscodeError> {
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
        let at_root = self.stack.is_empty() && self.root.is_some();
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
            // A body of `null` is no message (protojson and json_format
            // refuse it); `{}` is the empty one. A `Value` takes null.
            Dest::InPlace(desc)
                if at_root && matches!(value, Scalar::Null) && wkt(&desc) != Wkt::Value =>
            {
                return Err(invalid(
                    at,
                    format!(
                        "the body is null, not a {}; send {{}} for an empty message",
                        desc.full_name()
                    ),
                ));
            }
            Dest::InPlace(desc) => {
                self.write_message_scalar(&desc, None, value, at)?;
            }
        }
        self.check_size(at)?;
        self.value_done()
    }

    /// `@type`: resolve the type, write `type_url`, and open `value`.
    pub(super) fn any_type(&mut self, value: Scalar<'_>, at: u64) -> Result<(), TranscodeError> {
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
    pub(super) fn write_message_scalar(
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
    pub(super) fn write_json_value(
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

    pub(super) fn write_json_value_content(
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
    pub(super) fn write_value(
        &mut self,
        field: &FieldDescriptor,
        kind: Kind,
        number: Option<u32>,
        skip_default: bool,
        value: Scalar<'_>,
        at: u64,
    ) -> Result<(), TranscodeError> {
        let out = Tagged {
            out: &mut self.out,
            number,
        };
        let written = match kind {
            Kind::Message(desc) => return self.write_message_scalar(&desc, number, value, at),
            Kind::Enum(e) => match enum_number(&e, value, self.options.ignore_unknown_fields) {
                Ok(Some(n)) => {
                    if !(skip_default && n == 0) {
                        out.varint(i64::from(n) as u64);
                    }
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(refusal) => Err(refusal),
            },
            Kind::Bool => match value {
                Scalar::Bool(b) => {
                    if !skip_default || b {
                        out.varint(u64::from(b));
                    }
                    Ok(())
                }
                _ => Err(Refusal::Wrong("true or false")),
            },
            Kind::String => match value {
                Scalar::String(s) => {
                    if !(skip_default && s.is_empty()) {
                        out.bytes(s);
                    }
                    Ok(())
                }
                _ => Err(Refusal::Wrong("a string")),
            },
            Kind::Bytes => base64_value(out, value, skip_default),
            Kind::Double | Kind::Float => floating(out, &kind, value, skip_default),
            _ => integral(out, &kind, value, skip_default),
        };
        // The field's name is looked up only when an error names it.
        written.map_err(|refusal| {
            let name = FieldName(field);
            let message = match refusal {
                Refusal::Wrong(want) => {
                    format!("field '{name}' takes {want}, got {}", value.describe())
                }
                Refusal::Field(why) => format!("field '{name}': {why}"),
            };
            invalid(at, message)
        })
    }
}

/// Why a scalar cannot be a field's value.
enum Refusal {
    /// The field takes this kind of JSON value.
    Wrong(&'static str),
    /// The value is of the right kind, but not one the field takes.
    Field(String),
}

/// The output, with a field's tag written before each value (none in a
/// packed list).
struct Tagged<'o> {
    out: &'o mut Vec<u8>,
    number: Option<u32>,
}

impl Tagged<'_> {
    fn tag(&mut self, wire_type: u32) {
        if let Some(n) = self.number {
            wire::tag(self.out, n, wire_type);
        }
    }

    fn varint(mut self, v: u64) {
        self.tag(VARINT);
        wire::varint(self.out, v);
    }

    fn bytes(mut self, s: &[u8]) {
        self.tag(LEN);
        wire::varint(self.out, s.len() as u64);
        self.out.extend_from_slice(s);
    }

    fn fixed32(mut self, bytes: [u8; 4]) {
        self.tag(FIXED32);
        self.out.extend_from_slice(&bytes);
    }

    fn fixed64(mut self, bytes: [u8; 8]) {
        self.tag(FIXED64);
        self.out.extend_from_slice(&bytes);
    }
}

/// An enum's number, from its value's name or number; `None` for a name
/// it does not have when unknown names are skipped.
fn enum_number(
    e: &prost_reflect::EnumDescriptor,
    value: Scalar<'_>,
    ignore_unknown: bool,
) -> Result<Option<i32>, Refusal> {
    match value {
        Scalar::String(s) => {
            let text = std::str::from_utf8(s).unwrap_or("");
            match e.get_value_by_name(text) {
                Some(v) => Ok(Some(v.number())),
                None if ignore_unknown => Ok(None),
                None => {
                    let names: Vec<String> =
                        e.values().map(|v| v.name().to_owned()).take(16).collect();
                    Err(Refusal::Field(format!(
                        "'{text}' is not a value of enum {}; it has {}",
                        e.full_name(),
                        names.join(", ")
                    )))
                }
            }
        }
        Scalar::Number(token) => integer(token, i64::from(i32::MIN), i64::from(i32::MAX))
            .map(|n| Some(n as i32))
            .map_err(Refusal::Field),
        Scalar::Null if e.full_name() == "google.protobuf.NullValue" => Ok(Some(0)),
        _ => Err(Refusal::Wrong("an enum name or number")),
    }
}

/// Base64 text, decoded straight after its tag and length.
fn base64_value(out: Tagged<'_>, value: Scalar<'_>, skip_default: bool) -> Result<(), Refusal> {
    let Scalar::String(s) = value else {
        return Err(Refusal::Wrong("base64 text"));
    };
    if skip_default && s.is_empty() {
        return Ok(());
    }
    let mut out = out;
    let mark = out.out.len();
    out.tag(LEN);
    let after_tag = out.out.len();
    base64_into(s, out.out).map_err(|e| {
        out.out.truncate(mark);
        Refusal::Field(e)
    })?;
    // Padding alone decodes to nothing: the default.
    if skip_default && out.out.len() == after_tag + 1 {
        out.out.truncate(mark);
    }
    Ok(())
}

/// The text of a number, or of a string that may hold one (protobuf's
/// JSON takes both for numeric fields); else the field takes `want`.
fn numeric_token<'v>(value: Scalar<'v>, want: &'static str) -> Result<&'v [u8], Refusal> {
    match value {
        Scalar::Number(t) | Scalar::String(t) => Ok(t),
        _ => Err(Refusal::Wrong(want)),
    }
}

/// A double or a float, from a number, a numeric string, or `"NaN"`,
/// `"Infinity"` and `"-Infinity"`; a float rounded once, from the text.
fn floating(
    out: Tagged<'_>,
    kind: &Kind,
    value: Scalar<'_>,
    skip_default: bool,
) -> Result<(), Refusal> {
    let token = numeric_token(value, "a number")?;
    let x = match token {
        b"NaN" => f64::NAN,
        b"Infinity" => f64::INFINITY,
        b"-Infinity" => f64::NEG_INFINITY,
        _ => parse_f64(token).ok_or_else(|| {
            Refusal::Field(format!(
                "'{}' is not a number in double's range",
                String::from_utf8_lossy(token)
            ))
        })?,
    };
    if *kind != Kind::Float {
        if !(skip_default && x.to_bits() == 0) {
            out.fixed64(x.to_le_bytes());
        }
        return Ok(());
    }
    let f = if x.is_finite() {
        let f = wirespeed_json::number_to_f32(token).unwrap_or(x as f32);
        if f.is_infinite() {
            return Err(Refusal::Field(format!("{x} is out of float's range")));
        }
        f
    } else {
        x as f32
    };
    if !(skip_default && f.to_bits() == 0) {
        out.fixed32(f.to_le_bytes());
    }
    Ok(())
}

/// An integer of any of protobuf's widths and encodings, from a number
/// (integral, in any notation) or a numeric string, within its range.
fn integral(
    out: Tagged<'_>,
    kind: &Kind,
    value: Scalar<'_>,
    skip_default: bool,
) -> Result<(), Refusal> {
    let token = numeric_token(value, "an integer")?;
    let (lo, hi): (i128, i128) = match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => (i32::MIN.into(), i32::MAX.into()),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => (i64::MIN.into(), i64::MAX.into()),
        Kind::Uint32 | Kind::Fixed32 => (0, u32::MAX.into()),
        _ => (0, u64::MAX.into()),
    };
    let v = integer128(token, lo, hi).map_err(Refusal::Field)?;
    if skip_default && v == 0 {
        return Ok(());
    }
    match kind {
        Kind::Int32 | Kind::Int64 => out.varint(v as i64 as u64),
        Kind::Uint32 | Kind::Uint64 => out.varint(v as u64),
        Kind::Sint32 => out.varint(wire::zigzag32(v as i32)),
        Kind::Sint64 => out.varint(wire::zigzag64(v as i64)),
        Kind::Fixed32 | Kind::Sfixed32 => out.fixed32((v as u32).to_le_bytes()),
        _ => out.fixed64((v as u64).to_le_bytes()),
    }
    Ok(())
}
