//! Rounding to FP16 and BF16: once, from the `f64` the text rounds to,
//! with the rare `f64` that is exactly a boundary of the narrow type
//! settled by comparing the decimal text with it exactly.

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
pub(super) fn settle_boundary(token: &[u8], x: f64, narrow: impl Fn(f64) -> u16) -> f64 {
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
pub(super) fn compare_decimal_with(token: &[u8], x: f64) -> std::cmp::Ordering {
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
pub(super) fn normalize(text: &[u8]) -> (Vec<u8>, i64) {
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
