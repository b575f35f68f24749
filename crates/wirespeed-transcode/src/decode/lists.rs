//! Repeated fields: each element printed in turn, packed numbers read and
//! written in loops of their own (int32s' digits two at a time in place,
//! doubles and floats by zmij).

use prost_reflect::{FieldDescriptor, Kind};
use wirespeed_json::encode_string;

use crate::error::TranscodeError;
use crate::wire::{FIXED32, VARINT};

use super::*;

impl Printer<'_> {
    pub(super) fn list(
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
}

/// A packed int32 list's values as JSON numbers, comma-separated after
/// what `out` holds (a comma first unless `first`). Room for every value
/// is reserved once, each varint is read with one bounds check while ten
/// bytes remain, and digits are written into the reserved room. Returns
/// whether the list is still empty.
pub(super) fn packed_int32(
    packed: &[u8],
    mut first: bool,
    out: &mut Vec<u8>,
) -> Result<bool, TranscodeError> {
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
pub(super) const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `x` in decimal at the start of `out` (room for 11 bytes);
/// returns its length.
#[inline(always)]
pub(super) fn write_i32(x: i32, out: &mut [u8]) -> usize {
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
pub(super) fn packed_floats<const W: usize>(
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

pub(super) fn itoa_buffer() -> itoa::Buffer {
    itoa::Buffer::new()
}
