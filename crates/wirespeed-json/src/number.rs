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

use half::{bf16, f16};

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

/// Reads a number token at the start of `bytes` in one pass, checking the
/// JSON grammar. `None` when the token does not end inside `bytes` (more may
/// follow in the next chunk), is not valid, or has more than 19 digits or a
/// large exponent: the caller then takes the exact path, which also words
/// the error.
#[inline(always)]
pub(crate) fn scan_decimal(bytes: &[u8]) -> Option<Decimal> {
    let negative = bytes.first() == Some(&b'-');
    let mut i = usize::from(negative);
    // The integer part is short in practice: a plain loop predicts well.
    let mut mantissa = 0u64;
    let mut n = 0;
    while let Some(&b) = bytes.get(i + n) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
        n += 1;
    }
    // JSON: at least one digit, and no leading zero before another digit.
    if n == 0 || (n > 1 && bytes[i] == b'0') {
        return None;
    }
    i += n;
    let mut digits = n;
    let mut exponent = 0i32;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        let (m, n) = digit_run(bytes, i, mantissa);
        if n == 0 {
            return None;
        }
        mantissa = m;
        i += n;
        digits += n;
        exponent = -(n as i32);
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let exp_negative = match bytes.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let exp_start = i;
        let mut e = 0i32;
        while let Some(&b) = bytes.get(i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 || i - exp_start > 4 {
                break;
            }
            e = e * 10 + i32::from(d);
            i += 1;
        }
        if i == exp_start {
            return None;
        }
        exponent += if exp_negative { -e } else { e };
    }
    // The token must end here, inside `bytes`.
    match bytes.get(i) {
        Some(&b) if !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')) => {}
        _ => return None,
    }
    if digits > 19 {
        return None;
    }
    Some(Decimal {
        negative,
        mantissa,
        exponent,
        len: i,
    })
}

/// Powers of ten for appending up to eight digits to a mantissa.
const SHIFT10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// Reads the run of digits at `bytes[i..]` onto `mantissa` (wrapping past
/// 19 digits, which the caller refuses): the new mantissa and the run's length.
///
/// Eight bytes at a time, without a branch on the digit count: each word's
/// leading digits are counted from its non-digit mask and parsed with the
/// rest shifted away, so runs of any length cost the same few steps and
/// data-dependent lengths do not mispredict.
#[inline(always)]
fn digit_run(bytes: &[u8], mut i: usize, mut mantissa: u64) -> (u64, usize) {
    let start = i;
    while let Some(eight) = bytes.get(i..i + 8) {
        let word = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
        let values = word.wrapping_sub(0x3030_3030_3030_3030);
        let non_digits =
            (values | word.wrapping_add(0x4646_4646_4646_4646)) & 0x8080_8080_8080_8080;
        let k = (non_digits.trailing_zeros() / 8) as usize;
        // The k digits move to the top bytes; the zeros below them read as
        // leading zeros. k == 0 would shift by 64, so mask instead.
        let kept = values.checked_shl(64 - 8 * k as u32).unwrap_or(0);
        mantissa = mantissa
            .wrapping_mul(SHIFT10[k])
            .wrapping_add(digit_values(kept));
        i += k;
        if k < 8 {
            return (mantissa, i - start);
        }
    }
    // Fewer than eight bytes left in this chunk: one at a time.
    while let Some(&b) = bytes.get(i) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
        i += 1;
    }
    (mantissa, i - start)
}

/// Bytes [`plain_parts`] may look at: three words, the byte after them, and
/// one more for a caller's look past a separator.
pub(crate) const PLAIN_WINDOW: usize = 26;

/// The digit values of the eight bytes at `win[at..]`, and the high bit
/// of each byte that is not a digit.
///
/// Byte by byte with no carry or borrow between bytes (the point sits
/// before digits that must read right): `b ^ '0'` is the digit's value, and
/// is over 9 for anything else; adding 0x76 to its low seven bits reaches
/// the high bit exactly when they are 10 or more, and never carries out.
#[inline(always)]
fn word(win: &[u8; PLAIN_WINDOW], at: usize) -> (u64, u64) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let eight = win[at..at + 8].try_into().expect("eight bytes");
    let values = u64::from_le_bytes(eight) ^ 0x3030_3030_3030_3030;
    let non_digits =
        ((values & LOW7).wrapping_add(0x7676_7676_7676_7676) | values) & 0x8080_8080_8080_8080;
    (values, non_digits)
}

/// The number formed by the first `k` (0..=8) digit values of `values`.
#[inline(always)]
fn leading_digits(values: u64, k: usize) -> u64 {
    digit_values(values.checked_shl(64 - 8 * k as u32).unwrap_or(0))
}

/// Reads the shape nearly every float of a large request has,
/// `-?int.frac` with at most 18 digits and the point in the first eight
/// bytes, from the start of `win`, in fewer steps than [`scan_decimal`]:
/// the parts and whether the token has that shape (the parts are
/// meaningless when not), for the caller to fold with its own checks into
/// one branch. The byte after the token is not looked at: the caller wants
/// a separator there. Anything else (an exponent, an integer, more digits,
/// a bad token) goes to [`scan_decimal`], which reads every number.
///
/// The three words are loaded at fixed places and every length comes from
/// a mask, so the only branch is the caller's: the lengths of json.dumps
/// floats vary from one value to the next, and a branch on them would be
/// mispredicted about once a value. The point is taken out by moving the
/// integer digits up one byte, so integer and fraction read as one string
/// of digits.
#[inline(always)]
pub(crate) fn plain_parts(win: &[u8; PLAIN_WINDOW]) -> (Decimal, bool) {
    let (v0, nd0) = word(win, 0);
    let negative = win[0] == b'-';
    let p = usize::from(negative);
    // The sign is not a digit, but neither is it the point.
    let nd0 = nd0 & !(u64::from(negative) << 7);
    let point = (nd0.trailing_zeros() / 8) as usize;
    // 1 to 7 integer digits, then the point, with no leading zero; the
    // point, or the token's end, is in the first word. (`&`, not `&&`:
    // no branches.)
    let mut ok = (point > p) & (point < 8) & (win[point.min(7)] == b'.');
    ok &= !((point > p + 1) & (win[p] == b'0'));
    // The integer digits move up one byte over the point; below them the
    // bytes read as zeros.
    let int_mask = (u64::MAX << (8 * p)) & !(u64::MAX << (8 * (point & 7)));
    let frac_mask = (u64::MAX << (8 * (point & 7))) << 8;
    let d0 = ((v0 & int_mask) << 8) | (v0 & frac_mask);
    // The end: the first byte after the point that is not a digit.
    let after = nd0 & nd0.wrapping_sub(1);
    // How many words the digits take: one for 4-decimal floats, two for
    // shortest float32 text, three for float32 widened to float64 as
    // json.dumps writes it. These are the only branches on a length, and
    // each goes the same way throughout a body of one style.
    let (end, mantissa) = if after != 0 {
        let end = (after.trailing_zeros() / 8) as usize;
        (end, leading_digits(d0, end))
    } else {
        let (v1, nd1) = word(win, 8);
        if nd1 != 0 {
            let c1 = (nd1.trailing_zeros() / 8) as usize;
            let mantissa = digit_values(d0) * SHIFT10[c1] + leading_digits(v1, c1);
            (8 + c1, mantissa)
        } else {
            let (v2, nd2) = word(win, 16);
            let c2 = (nd2.trailing_zeros() / 8) as usize;
            let high = digit_values(d0) * SHIFT10[8] + digit_values(v1);
            let mantissa = high
                .wrapping_mul(SHIFT10[c2])
                .wrapping_add(leading_digits(v2, c2));
            (16 + c2, mantissa)
        }
    };
    // At least one fraction digit, at most 18 digits in all (the
    // mantissa then stays below 2^63).
    ok &= (end > point + 1) & (end - p <= 19);
    let d = Decimal {
        negative,
        mantissa,
        exponent: point as i32 + 1 - end as i32,
        len: end.min(24),
    };
    (d, ok)
}

/// The number whose eight digit values (0..=9) are the bytes of `values`,
/// the most significant in the lowest byte.
#[inline(always)]
fn digit_values(values: u64) -> u64 {
    let pairs = (values.wrapping_mul(10) + (values >> 8)) & 0x00FF_00FF_00FF_00FF;
    let quads = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    (quads.wrapping_mul(10_000) + (quads >> 32)) & 0xFFFF_FFFF
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

/// Rounds `x` once, to nearest with ties to even, to the 16-bit binary
/// format with `mant_bits` fraction bits and `exp_bits` exponent bits, and
/// returns its bit pattern.
pub(crate) fn narrow_f64(x: f64, mant_bits: u32, exp_bits: u32) -> u16 {
    let bias = (1i32 << (exp_bits - 1)) - 1;
    let sign = ((x.to_bits() >> 63) as u16) << (mant_bits + exp_bits);
    let infinity = ((1u32 << exp_bits) - 1) << mant_bits;
    if x.is_nan() {
        return sign | infinity as u16 | (1 << (mant_bits - 1));
    }
    let ax = x.abs();
    if ax == 0.0 || ax.is_infinite() {
        return sign | if ax == 0.0 { 0 } else { infinity as u16 };
    }
    let exponent = ((ax.to_bits() >> 52) as i32) - 1023;
    let min_normal = 1 - bias;
    // The target's spacing at this magnitude is 2^quantum; scaling by a
    // power of two is exact, so the only rounding is this one.
    let quantum = exponent.max(min_normal) - mant_bits as i32;
    let steps = (ax * 2f64.powi(-quantum)).round_ties_even() as u32;
    let bits = if exponent < min_normal {
        // Subnormal; `steps == 2^mant_bits` encodes the smallest normal.
        steps
    } else {
        // `steps` is in [2^m, 2^(m+1)]; the top value carries into the exponent.
        (((exponent + bias) as u32) << mant_bits) + (steps - (1 << mant_bits))
    };
    sign | bits.min(infinity) as u16
}

/// `x` is the `f64` nearest the decimal `token`. No rounding boundary of the
/// narrow type lies strictly between them (it would be an `f64` nearer the
/// decimal), so narrowing `x` is right unless `x` *is* a boundary. Then the
/// decimal's side of it decides, and `x` moves one ulp to that side.
fn settle_boundary(token: &[u8], x: f64, narrow: impl Fn(f64) -> u16) -> f64 {
    if !x.is_finite() || narrow(x.next_down()) == narrow(x.next_up()) {
        return x;
    }
    match compare_decimal_with(token, x) {
        std::cmp::Ordering::Greater => x.next_up(),
        std::cmp::Ordering::Less => x.next_down(),
        std::cmp::Ordering::Equal => x,
    }
}

/// Compares the decimal `token` with the exact value of `x` (same sign).
fn compare_decimal_with(token: &[u8], x: f64) -> std::cmp::Ordering {
    let negative = token.first() == Some(&b'-');
    // Rust prints a float with a requested precision exactly; 1100 digits
    // cover every finite f64.
    let exact = format!("{:.1100e}", x.abs());
    let (a_digits, a_exp) = normalize(token);
    let (b_digits, b_exp) = normalize(exact.as_bytes());
    let magnitude = if a_digits.is_empty() || b_digits.is_empty() {
        a_digits.len().cmp(&b_digits.len())
    } else {
        a_exp.cmp(&b_exp).then_with(|| {
            let n = a_digits.len().max(b_digits.len());
            let pad = |d: &[u8], i: usize| d.get(i).copied().unwrap_or(b'0');
            (0..n)
                .map(|i| pad(&a_digits, i).cmp(&pad(&b_digits, i)))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    };
    if negative {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// Significant digits (no leading or trailing zeros) and the decimal
/// exponent of the first one, for `[-]digits[.digits][e[+-]digits]`.
fn normalize(text: &[u8]) -> (Vec<u8>, i64) {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    let (mantissa, exponent) = match text.iter().position(|&b| b == b'e' || b == b'E') {
        Some(e) => (
            &text[..e],
            std::str::from_utf8(&text[e + 1..])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0),
        ),
        None => (text, 0),
    };
    let point = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len());
    let mut digits: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(u8::is_ascii_digit)
        .collect();
    let leading = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..leading);
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    // The first significant digit sits `point - leading - 1` places above the units.
    (digits, exponent + point as i64 - leading as i64 - 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`plain_parts`] as an `Option`, checking the byte after the token
    /// as [`scan_decimal`] does.
    fn scan_plain(win: &[u8; PLAIN_WINDOW]) -> Option<Decimal> {
        let (d, ok) = plain_parts(win);
        let next = win[d.len];
        (ok && !(next.is_ascii_alphabetic() || matches!(next, b'.' | b'+' | b'-'))).then_some(d)
    }

    #[test]
    fn the_grammar_is_json_not_rust() {
        for good in [
            "0",
            "-0",
            "1",
            "-12",
            "1.5",
            "0.25e-3",
            "1E+9",
            "123456789012345678901234567890",
        ] {
            assert!(check_grammar(good.as_bytes()).is_ok(), "{good}");
        }
        for bad in [
            "", "-", "01", "-01", "1.", ".5", "1e", "1e+", "+1", "--1", "1.2.3", "inf", "nan",
            "0x10", "1_0",
        ] {
            assert!(check_grammar(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(check_grammar(b"10"), Ok(Shape::Integer));
        assert_eq!(check_grammar(b"1e1"), Ok(Shape::Decimal));
    }

    #[test]
    fn f32_is_rounded_once_where_via_f64_rounds_twice() {
        // 2^-1 + 2^-25 + 2^-80: nearest f64 is the f32 midpoint 2^-1 + 2^-25,
        // which ties to even (down); the decimal itself is above it (up).
        let text = "0.500000029802322387695312500000000000000000000000000000000000000000000000000000000001";
        let via_f64 = text.parse::<f64>().unwrap() as f32;
        let exact = text.parse::<f32>().unwrap();
        assert_ne!(via_f64, exact, "the sample must expose double rounding");
        assert_eq!(to_f32(text.as_bytes()), exact);
    }

    #[test]
    fn f16_and_bf16_settle_exact_boundaries_by_the_decimal() {
        // 1 + 2^-11 is the f16 midpoint between 1 and 1 + 2^-10.
        let mid = 1.0 + 2f64.powi(-11);
        assert_eq!(to_f16(b"1.00048828125"), f16::from_f64(mid)); // exactly the midpoint: ties to even (1.0)
        assert_eq!(to_f16(b"1.00048828125"), f16::ONE);
        let above = b"1.0004882812500000000000000000001";
        let below = b"1.0004882812499999999999999999999";
        assert_eq!(text_f64(above), mid, "rounds to the midpoint in f64");
        assert_eq!(to_f16(above), f16::from_f64(1.0 + 2f64.powi(-10)));
        assert_eq!(to_f16(below), f16::ONE);
        assert_eq!(
            to_f16(b"-1.0004882812500000000000000000001"),
            -f16::from_f64(1.0 + 2f64.powi(-10))
        );
        // bf16: 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7.
        assert_eq!(
            to_bf16(b"1.0039062500000000000000000001"),
            bf16::from_f64(1.0 + 2f64.powi(-7))
        );
        assert_eq!(to_bf16(b"1.00390625"), bf16::ONE);
        // Overflow boundary: 65520 rounds to infinity, a hair below it does not.
        assert_eq!(to_f16(b"65520"), f16::INFINITY);
        assert_eq!(to_f16(b"65519.99999999999999999999"), f16::MAX);
    }

    #[test]
    fn narrowing_rounds_once() {
        // Just above an f16 midpoint: rounding to f32 first would land on the
        // midpoint and tie down to 1.0.
        let x = (1.0 + 2f64.powi(-11)).next_up();
        assert_eq!(
            f16::from_bits(narrow_f64(x, 10, 5)),
            f16::from_f64(1.0 + 2f64.powi(-10))
        );
        // Every f32 narrows as `half` narrows it from f32 (one rounding there).
        for i in 0..200_000u32 {
            let f = f32::from_bits(i.wrapping_mul(2_654_435_761));
            if f.is_nan() {
                continue;
            }
            assert_eq!(
                narrow_f64(f64::from(f), 10, 5),
                f16::from_f32(f).to_bits(),
                "{f:e}"
            );
            assert_eq!(
                narrow_f64(f64::from(f), 7, 8),
                bf16::from_f32(f).to_bits(),
                "{f:e}"
            );
        }
    }

    fn text_f64(t: &[u8]) -> f64 {
        std::str::from_utf8(t).unwrap().parse().unwrap()
    }

    #[test]
    fn digit_runs_of_every_length_and_position() {
        for len in 0..=24 {
            for pad in 0..9 {
                let digits: String = (0..len)
                    .map(|k| char::from(b'0' + ((k * 7 + 3) % 10) as u8))
                    .collect();
                let text = format!("{}{digits}x{}", "-".repeat(pad), "9".repeat(pad));
                let (m, n) = digit_run(text.as_bytes(), pad, 0);
                assert_eq!(n, len, "{text}");
                if len <= 19 {
                    assert_eq!(m, digits.parse::<u64>().unwrap_or(0), "{text}");
                }
            }
        }
        // Bytes just outside '0'..='9' stop a run.
        for stop in [b'/', b':', b' ', 0x80, 0xff, b'.', b'e'] {
            let mut text = b"12345678901".to_vec();
            text[5] = stop;
            assert_eq!(digit_run(&text, 0, 0), (12345, 5), "{stop}");
        }
    }

    #[test]
    fn the_one_pass_scan_agrees_with_std_or_declines() {
        let mut state = 7u64;
        let mut fast = 0;
        for i in 0..300_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bits = (state >> 32) as u32;
            let x = f32::from_bits(bits);
            if !x.is_finite() {
                continue;
            }
            let text = match i % 4 {
                0 => format!("{:?}", f64::from(x)),
                1 => format!("{:.4}", f64::from(x).clamp(-1e9, 1e9)),
                2 => format!("{:e}", f64::from(x)),
                _ => format!("{}", (state >> 40) as f64 / 1e3),
            };
            let token = format!("{text},");
            if let Some(d) = scan_decimal(token.as_bytes()) {
                assert_eq!(d.len, text.len(), "{text}");
                if let Some(f) = d.to_f32() {
                    fast += 1;
                    assert_eq!(
                        f.to_bits(),
                        text.parse::<f32>().unwrap().to_bits(),
                        "{text}"
                    );
                }
                if let Some(f) = d.to_f64() {
                    assert_eq!(
                        f.to_bits(),
                        text.parse::<f64>().unwrap().to_bits(),
                        "{text}"
                    );
                }
            }
        }
        assert!(
            fast > 150_000,
            "the fast path must take the common cases ({fast})"
        );
        // Cut by the chunk end, bad grammar, or too many digits: declined.
        for declined in [
            "1.5",
            "1.5e",
            "01,",
            "1.,",
            "-,",
            "12345678901234567890.5,",
            "1e99999,",
        ] {
            assert_eq!(
                scan_decimal(declined.as_bytes()).and_then(Decimal::to_f32),
                None,
                "{declined}"
            );
        }
        // Near an f32 midpoint: declined, so the exact path decides.
        assert_eq!(
            scan_decimal(b"1.00000005960464477,").unwrap().to_f32(),
            None
        );
    }

    #[test]
    fn the_plain_scan_reads_what_the_one_pass_scan_reads_or_declines() {
        let window = |text: &str, after: &str| {
            let mut win = [b'#'; PLAIN_WINDOW];
            let bytes = format!("{text}{after}");
            let n = bytes.len().min(PLAIN_WINDOW);
            win[..n].copy_from_slice(&bytes.as_bytes()[..n]);
            win
        };
        let digits = "73019284561029384756";
        let mut taken = 0;
        for sign in ["", "-"] {
            for int in 0..=9 {
                for frac in 0..=20 {
                    for lead in ["", "0", "00"] {
                        let int_part = if int == 0 { "0" } else { &digits[..int] };
                        let text = format!("{sign}{int_part}.{lead}{}", &digits[..frac]);
                        let text = text.trim_end_matches('.');
                        for after in [",", ", ", "]", " ", "e5", "E-2", "x", ".5", "-", "+1"] {
                            let win = window(text, after);
                            let plain = scan_plain(&win);
                            let one_pass = scan_decimal(&win);
                            let Some(d) = plain else { continue };
                            taken += 1;
                            assert_eq!(Some(d), one_pass, "{text}{after}");
                            let token = std::str::from_utf8(&win[..d.len]).unwrap();
                            let (f, exact) = d.plain_to_f32();
                            let f = if exact { f } else { to_f32(token.as_bytes()) };
                            assert_eq!(
                                f.to_bits(),
                                token.parse::<f32>().unwrap().to_bits(),
                                "{token}"
                            );
                        }
                    }
                }
            }
        }
        // It takes the shapes of json.dumps floats, with any terminator that
        // cannot continue a number.
        assert!(taken > 2_000, "{taken}");
        for taken in [
            "0.5",
            "-1.25",
            "1234567.5",
            "-0.12345678901234567",
            "0.00000000000000001",
        ] {
            for after in [",", "]", " ", "}", "\n"] {
                assert!(
                    scan_plain(&window(taken, after)).is_some(),
                    "{taken}{after}"
                );
            }
        }
        // Everything else goes to the one-pass scan.
        for declined in [
            "1",
            "-1",
            "01.5",
            "-01.5",
            "12345678.5",
            "1.5e3",
            "1.5E3",
            "1.",
            "-.5",
            ".5",
            "1.5.5",
            "1.5-",
            "1.5+",
            "1.5x",
            "--1.5",
            "0.1234567890123456789",
            "1.234567890123456789",
        ] {
            assert_eq!(scan_plain(&window(declined, ",")), None, "{declined}");
        }
        // Random windows from the bytes numbers are made of: whatever the
        // plain scan takes, the one-pass scan reads the same.
        let alphabet = b"0123456789000.--eE+, ]";
        let mut state = 11u64;
        let mut agreed = 0;
        for _ in 0..400_000 {
            let mut win = [0u8; PLAIN_WINDOW];
            for b in win.iter_mut() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Mostly digits, so that long plain tokens come up.
                let r = (state >> 33) as usize;
                *b = if !r.is_multiple_of(4) {
                    b'0' + (r / 4 % 10) as u8
                } else {
                    alphabet[r / 4 % alphabet.len()]
                };
            }
            if let Some(d) = scan_plain(&win) {
                agreed += 1;
                assert_eq!(
                    Some(d),
                    scan_decimal(&win),
                    "{:?}",
                    String::from_utf8_lossy(&win)
                );
            }
        }
        assert!(agreed > 1_000, "{agreed}");
        // Near an f32 midpoint: declined by the conversion, so the exact path decides.
        let near = scan_plain(&window("1.00000005960464477", ",")).unwrap();
        assert!(!near.plain_to_f32().1);
    }

    #[test]
    fn integers_are_range_checked() {
        assert_eq!(to_int::<u8>(b"255", Shape::Integer), Ok(255));
        assert_eq!(
            to_int::<u8>(b"256", Shape::Integer),
            Err(IntError::OutOfRange)
        );
        assert_eq!(
            to_int::<u8>(b"-1", Shape::Integer),
            Err(IntError::OutOfRange)
        );
        assert_eq!(
            to_int::<i64>(b"-9223372036854775808", Shape::Integer),
            Ok(i64::MIN)
        );
        assert_eq!(
            to_int::<u64>(b"18446744073709551616", Shape::Integer),
            Err(IntError::OutOfRange)
        );
        assert_eq!(
            to_int::<u64>(b"123456789012345678901234567890", Shape::Integer),
            Err(IntError::OutOfRange)
        );
        assert_eq!(
            to_int::<i32>(b"1.0", Shape::Decimal),
            Err(IntError::NotInteger)
        );
        assert_eq!(to_int::<u32>(b"-0", Shape::Integer), Ok(0));
    }
}
