//! The hot path: a number token read once, its grammar checked and its
//! digits gathered into a `u64` and a decimal exponent, eight digits at a
//! time, and the fixed window of a plain run's values read as words.

use super::Decimal;

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
pub(super) const SHIFT10: [u64; 9] = [
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
pub(super) fn digit_run(bytes: &[u8], mut i: usize, mut mantissa: u64) -> (u64, usize) {
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
pub(super) fn word(win: &[u8; PLAIN_WINDOW], at: usize) -> (u64, u64) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let eight = win[at..at + 8].try_into().expect("eight bytes");
    let values = u64::from_le_bytes(eight) ^ 0x3030_3030_3030_3030;
    let non_digits =
        ((values & LOW7).wrapping_add(0x7676_7676_7676_7676) | values) & 0x8080_8080_8080_8080;
    (values, non_digits)
}

/// The number formed by the first `k` (0..=8) digit values of `values`.
#[inline(always)]
pub(super) fn leading_digits(values: u64, k: usize) -> u64 {
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
pub(super) fn digit_values(values: u64) -> u64 {
    let pairs = (values.wrapping_mul(10) + (values >> 8)) & 0x00FF_00FF_00FF_00FF;
    let quads = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    (quads.wrapping_mul(10_000) + (quads >> 32)) & 0xFFFF_FFFF
}
