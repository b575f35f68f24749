//! How each protocol's JSON writes a tensor's values: nested by its shape
//! or flat, floats shortest round-trip, what plain JSON cannot hold (NaN,
//! the infinities, BYTES that are not UTF-8) as that protocol spells it.

use base64::Engine;
use wirespeed_core::{Tensor, TensorData};

/// How a protocol writes what plain JSON numbers and strings cannot hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Style {
    strings: Strings,
    non_finite: NonFinite,
}

impl Style {
    /// The Open Inference Protocol's JSON.
    pub(super) const V2: Style = Style {
        strings: Strings::Lossy,
        non_finite: NonFinite::Portable,
    };

    /// TF Serving's REST API and Clipper's.
    pub(super) fn tf(strings: Strings) -> Style {
        Style {
            strings,
            non_finite: NonFinite::Tokens,
        }
    }
}

/// How a float that is not finite is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NonFinite {
    /// `null` for NaN, `"Infinity"` and `"-Infinity"` for the infinities:
    /// JSON every parser reads.
    Portable,
    /// The bare `NaN`, `Infinity` and `-Infinity` tokens (not JSON, but
    /// what TF Serving's REST API and Python's `json` write and read).
    Tokens,
}

/// How BYTES elements are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strings {
    /// As strings, invalid UTF-8 replaced (V2, whose JSON has no other way).
    Lossy,
    /// As strings, or `{"b64": ...}` when not UTF-8 (TF Serving, Clipper).
    Base64IfBinary,
    /// Always `{"b64": ...}`: TF Serving's outputs whose alias ends in
    /// `_bytes`.
    Base64,
}

/// Writes elements `range` of `data`, comma-separated, as `style` says.
pub(super) fn write_range(
    out: &mut Vec<u8>,
    data: &TensorData,
    range: std::ops::Range<usize>,
    style: Style,
) {
    fn each<T: Copy>(out: &mut Vec<u8>, values: &[T], mut write: impl FnMut(&mut Vec<u8>, T)) {
        for (i, &v) in values.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write(out, v);
        }
    }
    fn ints<T: Copy + itoa::Integer>(out: &mut Vec<u8>, values: &[T]) {
        let mut buffer = itoa::Buffer::new();
        each(out, values, |o, x| {
            o.extend_from_slice(buffer.format(x).as_bytes())
        });
    }
    let mut floats = ryu::Buffer::new();
    let portable = style.non_finite == NonFinite::Portable;
    let mut float = |out: &mut Vec<u8>, x: f64, narrow: Option<f32>| {
        if x.is_nan() {
            out.extend_from_slice(if portable { b"null" } else { b"NaN" });
        } else if x.is_infinite() {
            out.extend_from_slice(match (portable, x > 0.0) {
                (true, true) => b"\"Infinity\"",
                (true, false) => b"\"-Infinity\"",
                (false, true) => b"Infinity",
                (false, false) => b"-Infinity",
            });
        } else if let Some(f) = narrow {
            out.extend_from_slice(floats.format_finite(f).as_bytes());
        } else {
            out.extend_from_slice(floats.format_finite(x).as_bytes());
        }
    };
    match data {
        TensorData::Fp32(v) => each(out, &v[range.clone()], |o, x| {
            float(o, f64::from(x), Some(x))
        }),
        TensorData::Fp64(v) => each(out, &v[range.clone()], |o, x| float(o, x, None)),
        TensorData::Fp16(v) => each(out, &v[range.clone()], |o, x| {
            float(o, x.to_f64(), Some(x.to_f32()))
        }),
        TensorData::Bf16(v) => each(out, &v[range.clone()], |o, x| {
            float(o, x.to_f64(), Some(x.to_f32()))
        }),
        TensorData::Bool(v) => each(out, &v[range.clone()], |o, b| {
            o.extend_from_slice(if b { b"true" } else { b"false" })
        }),
        TensorData::Uint8(v) => ints(out, &v[range.clone()]),
        TensorData::Uint16(v) => ints(out, &v[range.clone()]),
        TensorData::Uint32(v) => ints(out, &v[range.clone()]),
        TensorData::Uint64(v) => ints(out, &v[range.clone()]),
        TensorData::Int8(v) => ints(out, &v[range.clone()]),
        TensorData::Int16(v) => ints(out, &v[range.clone()]),
        TensorData::Int32(v) => ints(out, &v[range.clone()]),
        TensorData::Int64(v) => ints(out, &v[range.clone()]),
        TensorData::Bytes(v) => {
            for (i, s) in v[range].iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let text = match style.strings {
                    Strings::Base64 => None,
                    _ => std::str::from_utf8(s).ok(),
                };
                match (text, style.strings) {
                    (Some(text), _) => write_string(out, text.as_bytes()),
                    (None, Strings::Lossy) => {
                        write_string(out, String::from_utf8_lossy(s).as_bytes())
                    }
                    (None, _) => {
                        out.extend_from_slice(b"{\"b64\":\"");
                        let encoded = base64::engine::general_purpose::STANDARD.encode(s);
                        out.extend_from_slice(encoded.as_bytes());
                        out.extend_from_slice(b"\"}");
                    }
                }
            }
        }
    }
}

/// Writes the sub-tensor of `data` at flat offset `start` whose dimensions
/// are `dims`, nested: a value when `dims` is empty, else a list of lists.
pub(super) fn write_nested(
    out: &mut Vec<u8>,
    data: &TensorData,
    dims: &[usize],
    start: usize,
    style: Style,
) {
    let Some((&outer, inner)) = dims.split_first() else {
        write_range(out, data, start..start + 1, style);
        return;
    };
    out.push(b'[');
    if inner.is_empty() {
        write_range(out, data, start..start + outer, style);
    } else {
        let stride: usize = inner.iter().product();
        for i in 0..outer {
            if i > 0 {
                out.push(b',');
            }
            write_nested(out, data, inner, start + i * stride, style);
        }
    }
    out.push(b']');
}

/// Row `row` of `tensor` (its first dimension), nested.
pub(super) fn write_row(out: &mut Vec<u8>, tensor: &Tensor, row: usize, style: Style) {
    let inner = tensor.shape.get(1..).unwrap_or(&[]);
    let stride: usize = inner.iter().product();
    write_nested(out, &tensor.data, inner, row * stride, style);
}

/// Writes `text` (valid UTF-8) as a JSON string literal.
pub(super) fn write_string(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in text.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1F => b"",
            _ => continue,
        };
        out.extend_from_slice(&text[run..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.extend_from_slice(escape);
        }
        run = i + 1;
    }
    out.extend_from_slice(&text[run..]);
    out.push(b'"');
}
