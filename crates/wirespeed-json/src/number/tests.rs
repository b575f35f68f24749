//! Every conversion against the standard library's and the grammar against JSON's.

use super::scan::digit_run;
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
        "", "-", "01", "-01", "1.", ".5", "1e", "1e+", "+1", "--1", "1.2.3", "inf", "nan", "0x10",
        "1_0",
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
    let text =
        "0.500000029802322387695312500000000000000000000000000000000000000000000000000000000001";
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
