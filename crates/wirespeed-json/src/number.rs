//! JSON numbers: the grammar, checked strictly, and exact conversions to
//! every numeric tensor type.
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
