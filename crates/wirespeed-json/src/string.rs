//! JSON string bodies, scanned resumably: a string may be split across
//! chunks anywhere, inside an escape or a UTF-8 sequence. Escapes are
//! decoded, UTF-8 is validated byte by byte outside the ASCII fast path, and
//! lone surrogates are refused.

/// Where a string scan stopped.
pub(crate) enum Scan {
    /// The closing quote was found; this many bytes were consumed, quote included.
    Closed(usize),
    /// The input ran out inside the string; all of it was consumed.
    Open,
}

/// A string scan that failed at `at` bytes into the input given.
#[derive(Debug)]
pub(crate) struct StringError {
    pub(crate) at: usize,
    pub(crate) message: &'static str,
    pub(crate) limit: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Normal,
    /// After a backslash.
    Escape,
    /// Inside `\uXXXX`, with `digits` hex digits read so far.
    Unicode { digits: u8, value: u16 },
    /// A high surrogate was read; a `\` must follow.
    LowBackslash { high: u16 },
    /// A high surrogate and `\` were read; a `u` must follow.
    LowU { high: u16 },
    /// Inside the `\uXXXX` that must be a low surrogate.
    LowUnicode { high: u16, digits: u8, value: u16 },
}

/// The resumable state of one string being scanned.
#[derive(Debug, Default)]
pub(crate) struct StringScanner {
    state: State,
    /// UTF-8 continuation bytes still expected.
    utf8_pending: u8,
    /// The allowed range of the next continuation byte.
    utf8_lo: u8,
    utf8_hi: u8,
}

impl StringScanner {
    /// Whether the scanner is between characters (no escape or UTF-8
    /// sequence open), so that a closing quote may end the string.
    fn at_boundary(&self) -> bool {
        self.state == State::Normal && self.utf8_pending == 0
    }

    /// Scans `input` (the bytes after the opening quote, or after the
    /// previous chunk's part), appending the decoded content to `out` when
    /// given. `out` may hold at most `limit` bytes.
    pub(crate) fn scan(
        &mut self,
        input: &[u8],
        mut out: Option<&mut Vec<u8>>,
        limit: usize,
    ) -> Result<Scan, StringError> {
        let err = |at, message| StringError {
            at,
            message,
            limit: false,
        };
        let mut i = 0;
        while i < input.len() {
            if self.at_boundary() {
                // ASCII fast path: copy the run up to the next special byte,
                // found eight bytes at a time, then byte by byte.
                let start = i;
                i = ascii_run(input, i);
                if let Some(out) = out.as_deref_mut() {
                    if out.len() + (i - start) > limit {
                        return Err(StringError {
                            at: i,
                            message: "string is longer than the limit",
                            limit: true,
                        });
                    }
                    out.extend_from_slice(&input[start..i]);
                }
                if i == input.len() {
                    break;
                }
            }
            let b = input[i];
            i += 1;
            match self.state {
                State::Normal if self.utf8_pending > 0 => {
                    if b < self.utf8_lo || b > self.utf8_hi {
                        return Err(err(i - 1, "invalid UTF-8 in string"));
                    }
                    self.utf8_pending -= 1;
                    (self.utf8_lo, self.utf8_hi) = (0x80, 0xBF);
                    push(&mut out, &[b], limit, i)?;
                }
                State::Normal => match b {
                    b'"' => return Ok(Scan::Closed(i)),
                    b'\\' => self.state = State::Escape,
                    0..=0x1F => return Err(err(i - 1, "unescaped control character in string")),
                    _ => {
                        // A UTF-8 lead byte: how many continuation bytes and
                        // the range of the first, which excludes overlong
                        // forms, surrogates and code points past U+10FFFF.
                        let (pending, lo, hi) = match b {
                            0xC2..=0xDF => (1, 0x80, 0xBF),
                            0xE0 => (2, 0xA0, 0xBF),
                            0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                            0xED => (2, 0x80, 0x9F),
                            0xF0 => (3, 0x90, 0xBF),
                            0xF1..=0xF3 => (3, 0x80, 0xBF),
                            0xF4 => (3, 0x80, 0x8F),
                            _ => return Err(err(i - 1, "invalid UTF-8 in string")),
                        };
                        (self.utf8_pending, self.utf8_lo, self.utf8_hi) = (pending, lo, hi);
                        push(&mut out, &[b], limit, i)?;
                    }
                },
                _ => self.escaped(b, &mut out, limit, i)?,
            }
        }
        Ok(Scan::Open)
    }

    /// One byte of an escape (`\x`, `\uXXXX`, a surrogate pair's second
    /// half), at `i - 1`.
    #[inline]
    fn escaped(
        &mut self,
        b: u8,
        out: &mut Option<&mut Vec<u8>>,
        limit: usize,
        i: usize,
    ) -> Result<(), StringError> {
        let err = |at, message| StringError {
            at,
            message,
            limit: false,
        };
        match self.state {
            State::Escape => {
                let decoded = match b {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b'f' => 0x0C,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        self.state = State::Unicode {
                            digits: 0,
                            value: 0,
                        };
                        return Ok(());
                    }
                    _ => return Err(err(i - 1, "invalid escape in string")),
                };
                self.state = State::Normal;
                push(out, &[decoded], limit, i)?;
            }
            State::Unicode { digits, value } | State::LowUnicode { digits, value, .. } => {
                let digit = hex(b)
                    .ok_or_else(|| err(i - 1, "invalid \\u escape: expected 4 hex digits"))?;
                let value = value << 4 | digit;
                let digits = digits + 1;
                self.state = match (self.state, digits) {
                    (State::Unicode { .. }, 4) => match value {
                        0xD800..=0xDBFF => State::LowBackslash { high: value },
                        0xDC00..=0xDFFF => {
                            return Err(err(i - 1, "lone low surrogate in \\u escape"))
                        }
                        _ => {
                            let c = char::from_u32(u32::from(value))
                                .unwrap_or(char::REPLACEMENT_CHARACTER);
                            push(out, c.encode_utf8(&mut [0; 4]).as_bytes(), limit, i)?;
                            State::Normal
                        }
                    },
                    (State::LowUnicode { high, .. }, 4) => {
                        if !(0xDC00..=0xDFFF).contains(&value) {
                            return Err(err(
                                i - 1,
                                "high surrogate not followed by a low surrogate",
                            ));
                        }
                        let code = 0x10000
                            + ((u32::from(high) - 0xD800) << 10)
                            + (u32::from(value) - 0xDC00);
                        let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                        push(out, c.encode_utf8(&mut [0; 4]).as_bytes(), limit, i)?;
                        State::Normal
                    }
                    (State::LowUnicode { high, .. }, _) => State::LowUnicode {
                        high,
                        digits,
                        value,
                    },
                    _ => State::Unicode { digits, value },
                };
            }
            State::LowBackslash { high } => {
                if b != b'\\' {
                    return Err(err(i - 1, "high surrogate not followed by a low surrogate"));
                }
                self.state = State::LowU { high };
            }
            State::LowU { high } => {
                if b != b'u' {
                    return Err(err(i - 1, "high surrogate not followed by a low surrogate"));
                }
                self.state = State::LowUnicode {
                    high,
                    digits: 0,
                    value: 0,
                };
            }
            State::Normal => unreachable!("a byte outside an escape is the caller's"),
        }
        Ok(())
    }
}

/// The end of the run of plain ASCII (no quote, backslash, control or
/// non-ASCII byte) from `i`: eight bytes at a time, then byte by byte.
#[inline(always)]
fn ascii_run(input: &[u8], mut i: usize) -> usize {
    while let Some(eight) = input.get(i..i + 8) {
        let special = special_bytes(u64::from_le_bytes(eight.try_into().expect("eight bytes")));
        if special != 0 {
            i += (special.trailing_zeros() / 8) as usize;
            break;
        }
        i += 8;
    }
    while i < input.len() {
        let b = input[i];
        if b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b) {
            break;
        }
        i += 1;
    }
    i
}

fn push(
    out: &mut Option<&mut Vec<u8>>,
    bytes: &[u8],
    limit: usize,
    at: usize,
) -> Result<(), StringError> {
    if let Some(out) = out.as_deref_mut() {
        if out.len() + bytes.len() > limit {
            return Err(StringError {
                at,
                message: "string is longer than the limit",
                limit: true,
            });
        }
        out.extend_from_slice(bytes);
    }
    Ok(())
}

fn hex(b: u8) -> Option<u16> {
    (b as char).to_digit(16).map(|d| d as u16)
}

/// The high bit of each byte of `w` that ends an ASCII run in a string: a
/// quote, a backslash, a control character or a non-ASCII byte. Bytes
/// above the first flagged one may be flagged wrongly (a borrow carries);
/// the lowest flag is always right.
#[inline(always)]
fn special_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(0x20 * ONES) & !w & HIGH;
    (w & HIGH) | control | zero(w ^ (b'"' as u64 * ONES)) | zero(w ^ (b'\\' as u64 * ONES))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_special_byte_of_a_word_is_found() {
        let special = |b: u8| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..200_000u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Mostly plain ASCII, with a special byte somewhere.
            let mut bytes = [0u8; 8];
            for (k, b) in bytes.iter_mut().enumerate() {
                *b = 0x20 + ((state >> (k * 7)) as u8 % 0x5F);
            }
            let at = (round % 9) as usize;
            if at < 8 {
                bytes[at] =
                    [b'"', b'\\', 0x00, 0x1F, 0x7F, 0x80, 0xFF, b'\n'][(state % 8) as usize];
            }
            let want = bytes.iter().position(|&b| special(b));
            let flags = special_bytes(u64::from_le_bytes(bytes));
            let got = (flags != 0).then(|| (flags.trailing_zeros() / 8) as usize);
            assert_eq!(got, want, "{bytes:?}");
        }
    }

    use super::*;

    /// Scans `body` (string content plus closing quote) in chunks of `size`.
    fn scan_in_chunks(body: &[u8], size: usize) -> Result<Vec<u8>, &'static str> {
        let mut scanner = StringScanner::default();
        let mut out = Vec::new();
        for chunk in body.chunks(size) {
            match scanner
                .scan(chunk, Some(&mut out), usize::MAX)
                .map_err(|e| e.message)?
            {
                Scan::Closed(_) => return Ok(out),
                Scan::Open => {}
            }
        }
        Err("unterminated")
    }

    #[test]
    fn escapes_and_utf8_decode_like_serde_json_at_every_split() {
        let text = r#"a\"b\\c\/d\b\f\n\r\t\u00e9\u20AC\ud83d\ude00 é€😀 plain""#;
        let want: String = serde_json::from_str(&format!("\"{text}")).unwrap();
        for size in 1..=text.len() {
            assert_eq!(
                scan_in_chunks(text.as_bytes(), size).unwrap(),
                want.as_bytes(),
                "chunk size {size}"
            );
        }
    }

    #[test]
    fn bad_strings_are_refused_at_every_split() {
        let cases: &[(&[u8], &str)] = &[
            (b"\\ud800x\"", "high surrogate"),
            (b"\\udc00\"", "lone low"),
            (b"\\ud800\\u0041\"", "high surrogate"),
            (b"\\x\"", "invalid escape"),
            (b"\\u12g4\"", "hex digits"),
            (b"a\x01\"", "control"),
            (b"\xff\"", "UTF-8"),
            (b"\xc0\xaf\"", "UTF-8"),         // overlong '/'
            (b"\xed\xa0\x80\"", "UTF-8"),     // encoded surrogate
            (b"\xf4\x90\x80\x80\"", "UTF-8"), // past U+10FFFF
            (b"\xe2\x82\"", "UTF-8"),         // truncated sequence before the quote
        ];
        for (body, words) in cases {
            for size in 1..=body.len() {
                let e = scan_in_chunks(body, size).unwrap_err();
                assert!(e.contains(words), "{body:?} at {size}: {e}");
            }
        }
    }
}
