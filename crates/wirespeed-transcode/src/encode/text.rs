//! Reading the text of JSON values: plain and 128-bit integers, doubles,
//! base64 in either alphabet, a map's key as its key field, and the words
//! errors use for a field's kind.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use prost_reflect::{FieldDescriptor, Kind};

use super::*;
use crate::error::TranscodeError;
use crate::wire::{self, FIXED32, FIXED64, VARINT};
use crate::wkt::{wkt, Wkt};

pub(super) fn plain_int(token: &[u8]) -> Option<i64> {
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

/// The plain integer (digits, an optional minus, at most 18 digits, no
/// leading zero) at the start of `bytes`: its value and length.
pub(super) fn int_prefix(bytes: &[u8]) -> Option<(i64, usize)> {
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
pub(super) struct FieldName<'a>(pub(super) &'a FieldDescriptor);

impl std::fmt::Display for FieldName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

pub(super) fn is_value_message(f: &FieldDescriptor) -> bool {
    matches!(f.kind(), Kind::Message(m) if m.full_name() == "google.protobuf.Value")
}

pub(super) fn wkt_form(kind: Wkt) -> &'static str {
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

pub(super) fn kind_form(kind: &Kind) -> String {
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
pub(super) fn write_map_key(
    out: &mut Vec<u8>,
    key_field: &FieldDescriptor,
    key: &[u8],
) -> Result<(), String> {
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
pub(super) fn parse_f64(token: &[u8]) -> Option<f64> {
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
pub(super) fn integer128(token: &[u8], lo: i128, hi: i128) -> Result<i128, String> {
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

pub(super) fn integer(token: &[u8], lo: i64, hi: i64) -> Result<i64, String> {
    integer128(token, lo.into(), hi.into()).map(|v| v as i64)
}

/// Base64, standard or URL-safe, padded or not.
/// Appends the length (a varint) and the bytes of standard or URL-safe
/// base64, padded or not: the length is known from the text before it is
/// decoded, so the bytes are decoded in place, with no copy.
pub(super) fn base64_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
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
