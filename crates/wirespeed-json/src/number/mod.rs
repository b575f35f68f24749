//! JSON numbers: the grammar, checked strictly, and exact conversions to
//! every numeric tensor type.
//!
//! The hot path, [`scan_decimal`], reads a token once: it checks the grammar
//! and gathers the digits into a `u64` and a decimal exponent. For `f32`
//! that is converted with two `f64` roundings, then checked: if the result
//! is clearly away from an `f32` rounding boundary, narrowing it is exact;
//! otherwise (about one token in 2^26) the exact path runs. `f64` uses
//! Clinger's exact fast path. This is hand-written because fast-float2
//! alone costs about 28 ns on a json.dumps-length token on our machines,
//! more than serde_json's whole per-value cost.
//!
//! fast-float2 converts decimal text straight to `f32` or `f64`, correctly
//! rounded, but it also accepts `inf`, `nan`, a leading `+`, `.5` and `1.`,
//! so the JSON grammar is checked here first. `FP16` and `BF16` have no
//! direct parser: the text is rounded to `f64` first, which can only go
//! wrong when that `f64` is exactly a rounding boundary of the narrow type;
//! that rare case is settled by comparing the decimal text with the boundary
//! exactly.
//!
//! `scan.rs` is the hot path's one-pass scanner; `narrow.rs` rounds to
//! the 16-bit types and settles their boundaries exactly.

mod narrow;
mod scan;
#[cfg(test)]
mod tests;

use half::{bf16, f16};

pub(crate) use narrow::narrow_f64;
use narrow::settle_boundary;
pub(crate) use scan::{plain_parts, scan_decimal, PLAIN_WINDOW};

/// What a well-formed number token looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Digits only, with an optional minus sign.
    Integer,
    /// With a fraction or an exponent.
    Decimal,
}

/// Checks `token` against the JSON number grammar.
pub(crate) fn check_grammar(token: &[u8]) -> Result<Shape, &'static str> {
    let mut i = usize::from(token.first() == Some(&b'-'));
    match token.get(i) {
        Some(b'0') => {
            i += 1;
            if token.get(i).is_some_and(u8::is_ascii_digit) {
                return Err("a number may not have leading zeros");
            }
        }
        Some(b'1'..=b'9') => {
            while token.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return Err("a number must start with a digit"),
    }
    let mut shape = Shape::Integer;
    if token.get(i) == Some(&b'.') {
        shape = Shape::Decimal;
        i += 1;
        if !token.get(i).is_some_and(u8::is_ascii_digit) {
            return Err("a decimal point must be followed by digits");
        }
        while token.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if matches!(token.get(i), Some(b'e' | b'E')) {
        shape = Shape::Decimal;
        i += 1;
        if matches!(token.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !token.get(i).is_some_and(u8::is_ascii_digit) {
            return Err("an exponent must have digits");
        }
        while token.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if i != token.len() {
        return Err("not a valid number");
    }
    Ok(shape)
}

/// A decimal number read in one pass: `(-1)^negative * mantissa * 10^exponent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    pub(crate) negative: bool,
    pub(crate) mantissa: u64,
    pub(crate) exponent: i32,
    /// Bytes in the token.
    pub(crate) len: usize,
}

/// Correctly rounded negative powers of ten: multiplying by one is faster
/// than dividing by its positive power, for one more rounding.
const NEG_POW10: [f64; 23] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22,
];

/// Exact powers of ten in `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `r` (positive, normal as an `f32`, within 4 ulp of an exact decimal)
/// narrowed to `f32` with the decimal's sign, and whether that is the
/// decimal's correct rounding.
///
/// Narrowing drops 29 bits; the f32 rounding boundary is the pattern 1
/// followed by 28 zeros. Clear of it by more than 8 ulp (twice the error
/// bound), the exact value rounds the same way as `r`. The sign is set
/// without a branch: it is as likely either way.
#[inline(always)]
fn narrow(r: f64, negative: bool) -> (f32, bool) {
    let dropped = (r.to_bits() & ((1 << 29) - 1)) as i64;
    let exact = (dropped - (1 << 28)).abs() > 8;
    let sign = u32::from(negative) << 31;
    (f32::from_bits((r as f32).to_bits() | sign), exact)
}

impl Decimal {
    /// The `f32` nearest the decimal, when it can be had cheaply and
    /// certainly; `None` sends the caller to the exact path.
    #[inline(always)]
    pub(crate) fn to_f32(self) -> Option<f32> {
        if self.mantissa == 0 {
            return Some(if self.negative { -0.0 } else { 0.0 });
        }
        if !(-22..=22).contains(&self.exponent) {
            return None;
        }
        let w = self.mantissa as f64;
        let index = self.exponent.unsigned_abs() as usize;
        // At most three roundings (of w, of 10^-k, of the product), each
        // within 2^-53 relative, put r within 4 ulp of the exact value.
        let r = if self.exponent < 0 {
            w * NEG_POW10[index]
        } else {
            w * POW10[index]
        };
        if !(f64::from(f32::MIN_POSITIVE)..f64::from(f32::MAX)).contains(&r) {
            return None;
        }
        let (f, exact) = narrow(r, self.negative);
        exact.then_some(f)
    }

    /// [`to_f32`](Self::to_f32) for what [`plain_parts`] reads: fewer than
    /// 2^63 (18 digits) times 10^-1 ... 10^-18, which is well inside the
    /// normal `f32` range, so only the rounding boundary is checked, and
    /// the mantissa converts as a signed integer (one instruction).
    /// Its verdict is a flag beside the value (meaningless when false), for
    /// the caller to fold into one branch.
    #[inline(always)]
    pub(crate) fn plain_to_f32(self) -> (f32, bool) {
        // From a failed plain read the parts may be anything: keep the table
        // look-up in bounds, the flag is false anyway.
        let index = (self.exponent.unsigned_abs() as usize).min(NEG_POW10.len() - 1);
        narrow(
            self.mantissa as i64 as f64 * NEG_POW10[index],
            self.negative,
        )
    }

    /// The `f64` nearest the decimal by Clinger's fast path (exact: one
    /// rounding), or `None`.
    #[inline(always)]
    pub(crate) fn to_f64(self) -> Option<f64> {
        if self.mantissa > 1 << 53 || !(-22..=22).contains(&self.exponent) {
            return None;
        }
        let w = self.mantissa as f64;
        let scale = POW10[self.exponent.unsigned_abs() as usize];
        let r = if self.exponent < 0 {
            w / scale
        } else {
            w * scale
        };
        Some(if self.negative { -r } else { r })
    }
}

/// The JSON number at the start of `bytes`, as the nearest `f64` (rounded
/// once), and its length: for other formats' readers of number runs (the
/// transcoder's packed lists). `None` when the number does not end inside
/// `bytes`, or is not one; the caller's general path then reads (or
/// refuses) it.
#[inline]
pub fn f64_prefix(bytes: &[u8]) -> Option<(f64, usize)> {
    let d = scan_decimal(bytes)?;
    let x = match d.to_f64() {
        Some(x) => x,
        None => fast_float2::parse(&bytes[..d.len]).ok()?,
    };
    Some((x, d.len))
}

/// [`f64_prefix`] for `f32`: the nearest `f32`, rounded once from the
/// decimal.
#[inline]
pub fn f32_prefix(bytes: &[u8]) -> Option<(f32, usize)> {
    let d = scan_decimal(bytes)?;
    let x = match d.to_f32() {
        Some(x) => x,
        None => fast_float2::parse(&bytes[..d.len]).ok()?,
    };
    Some((x, d.len))
}

/// A token that passed the JSON number grammar, as the nearest `f64`.
pub fn number_to_f64(token: &[u8]) -> Option<f64> {
    fast_float2::parse(token).ok()
}

/// A token that passed the JSON number grammar, as the nearest `f32`.
pub fn number_to_f32(token: &[u8]) -> Option<f32> {
    fast_float2::parse(token).ok()
}

/// A grammar-checked token to `f32`, correctly rounded.
#[inline]
pub(crate) fn to_f32(token: &[u8]) -> f32 {
    // A token that passed `check_grammar` always parses.
    fast_float2::parse(token).unwrap_or(f32::NAN)
}

/// A grammar-checked token to `f64`, correctly rounded.
#[inline]
pub(crate) fn to_f64(token: &[u8]) -> f64 {
    fast_float2::parse(token).unwrap_or(f64::NAN)
}

/// A grammar-checked token to `f16`, correctly rounded.
pub(crate) fn to_f16(token: &[u8]) -> f16 {
    let narrow = |x| narrow_f64(x, 10, 5);
    f16::from_bits(narrow(settle_boundary(token, to_f64(token), narrow)))
}

/// A grammar-checked token to `bf16`, correctly rounded.
pub(crate) fn to_bf16(token: &[u8]) -> bf16 {
    let narrow = |x| narrow_f64(x, 7, 8);
    bf16::from_bits(narrow(settle_boundary(token, to_f64(token), narrow)))
}

/// Why an integer token does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntError {
    /// It has a fraction or exponent.
    NotInteger,
    /// It is outside the type's range.
    OutOfRange,
}

/// A grammar-checked integer token to `i128` (every 64-bit value fits).
fn to_i128(token: &[u8]) -> Result<i128, IntError> {
    let (negative, digits) = match token.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    if digits.len() > 20 {
        return Err(IntError::OutOfRange);
    }
    let magnitude = digits
        .iter()
        .fold(0i128, |acc, &d| acc * 10 + i128::from(d - b'0'));
    Ok(if negative { -magnitude } else { magnitude })
}

/// A grammar-checked token of shape `shape` to the integer type `T`.
#[inline]
pub(crate) fn to_int<T: TryFrom<i128>>(token: &[u8], shape: Shape) -> Result<T, IntError> {
    if shape != Shape::Integer {
        return Err(IntError::NotInteger);
    }
    T::try_from(to_i128(token)?).map_err(|_| IntError::OutOfRange)
}
