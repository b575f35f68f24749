//! Universal Binary JSON (UBJSON), as XGBoost writes `.ubj` models, read
//! into a `serde_json::Value` so the JSON loader's checks apply unchanged.
//!
//! Hand-written because no maintained crate reads it. It follows the
//! UBJSON draft 12 spec: big-endian numbers, `[`/`{` containers with the
//! optimized `$type` and `#count` forms (which XGBoost uses for its node
//! arrays), object keys as length-prefixed strings. Every count is checked
//! against the bytes left before anything is allocated, and nesting is
//! limited, so a corrupt file is an error, never a huge allocation or a
//! stack overflow.

use serde_json::{Map, Number, Value};

use crate::LoadError;

const MAX_DEPTH: usize = 128;

fn invalid(at: usize, message: impl std::fmt::Display) -> LoadError {
    LoadError::format(format!("UBJSON at byte {at}: {message}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], LoadError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| invalid(self.at, format!("needs {n} more bytes than the file has")))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn byte(&mut self) -> Result<u8, LoadError> {
        Ok(self.take(1)?[0])
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn int(&mut self, marker: u8) -> Result<i64, LoadError> {
        let at = self.at;
        Ok(match marker {
            b'i' => i64::from(self.byte()? as i8),
            b'U' => i64::from(self.byte()?),
            b'I' => i64::from(i16::from_be_bytes(
                self.take(2)?.try_into().expect("2 bytes"),
            )),
            b'l' => i64::from(i32::from_be_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            )),
            b'L' => i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")),
            other => {
                return Err(invalid(
                    at,
                    format!("expected an integer type, found {:?}", other as char),
                ))
            }
        })
    }

    /// A length or count: an integer of any type, not negative.
    fn length(&mut self) -> Result<usize, LoadError> {
        let at = self.at;
        let marker = self.byte()?;
        usize::try_from(self.int(marker)?).map_err(|_| invalid(at, "a negative length"))
    }

    fn string(&mut self) -> Result<String, LoadError> {
        let at = self.at;
        let n = self.length()?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| invalid(at, "a string that is not UTF-8"))
    }

    fn value(&mut self, depth: usize) -> Result<Value, LoadError> {
        let marker = self.byte()?;
        self.value_of(marker, depth)
    }

    fn value_of(&mut self, marker: u8, depth: usize) -> Result<Value, LoadError> {
        let at = self.at;
        if depth > MAX_DEPTH {
            return Err(invalid(at, "nesting deeper than 128"));
        }
        Ok(match marker {
            b'Z' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'i' | b'U' | b'I' | b'l' | b'L' => Value::from(self.int(marker)?),
            b'd' => {
                let x = f32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
                float(at, f64::from(x))?
            }
            b'D' => float(
                at,
                f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")),
            )?,
            b'C' => Value::String((self.byte()? as char).to_string()),
            b'S' => Value::String(self.string()?),
            b'H' => {
                let text = self.string()?;
                let n: f64 = text
                    .parse()
                    .map_err(|_| invalid(at, "a malformed high-precision number"))?;
                float(at, n)?
            }
            b'[' => Value::Array(self.array(depth)?),
            b'{' => Value::Object(self.object(depth)?),
            b'N' => {
                // No-op: the value is the next one.
                return self.value(depth);
            }
            other => {
                return Err(invalid(
                    at - 1,
                    format!("unknown type marker {:?}", other as char),
                ))
            }
        })
    }

    /// The optimized container header: an element type and a count.
    fn header(&mut self) -> Result<(Option<u8>, Option<usize>), LoadError> {
        let mut kind = None;
        if self.peek() == Some(b'$') {
            self.at += 1;
            kind = Some(self.byte()?);
            if self.peek() != Some(b'#') {
                return Err(invalid(self.at, "a typed container without a count"));
            }
        }
        let mut count = None;
        if self.peek() == Some(b'#') {
            self.at += 1;
            let n = self.length()?;
            // Each element takes at least one byte (or none for Z/T/F
            // when typed): bound the count by what is left.
            let least = match kind {
                Some(b'Z' | b'T' | b'F' | b'N') => 0,
                _ => 1,
            };
            if least > 0 && n > self.bytes.len() - self.at {
                return Err(invalid(
                    self.at,
                    format!("a count of {n} past the end of the file"),
                ));
            }
            count = Some(n);
        }
        Ok((kind, count))
    }

    fn array(&mut self, depth: usize) -> Result<Vec<Value>, LoadError> {
        let (kind, count) = self.header()?;
        let mut out = Vec::with_capacity(count.unwrap_or(0).min(1 << 20));
        match count {
            Some(n) => {
                for _ in 0..n {
                    out.push(match kind {
                        Some(k) => self.value_of(k, depth + 1)?,
                        None => self.value(depth + 1)?,
                    });
                }
            }
            None => loop {
                if self.peek() == Some(b']') {
                    self.at += 1;
                    break;
                }
                out.push(self.value(depth + 1)?);
            },
        }
        Ok(out)
    }

    fn object(&mut self, depth: usize) -> Result<Map<String, Value>, LoadError> {
        let (kind, count) = self.header()?;
        let mut out = Map::new();
        let mut entry = |r: &mut Self| -> Result<(), LoadError> {
            let key = r.string()?;
            let value = match kind {
                Some(k) => r.value_of(k, depth + 1)?,
                None => r.value(depth + 1)?,
            };
            out.insert(key, value);
            Ok(())
        };
        match count {
            Some(n) => {
                for _ in 0..n {
                    entry(self)?;
                }
            }
            None => loop {
                if self.peek() == Some(b'}') {
                    self.at += 1;
                    break;
                }
                entry(self)?;
            },
        }
        Ok(out)
    }
}

fn float(at: usize, x: f64) -> Result<Value, LoadError> {
    Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| invalid(at, format!("a non-finite number {x}")))
}

/// Reads a whole UBJSON document.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, LoadError> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    if reader.at != bytes.len() {
        return Err(invalid(reader.at, "bytes after the end of the document"));
    }
    Ok(value)
}

/// Whether `bytes` look like UBJSON rather than JSON: an object whose
/// first key starts with a length marker (or a container header).
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'{') && bytes.get(1).is_some_and(|b| b"iUIlL$#}".contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_scalars_and_typed_arrays() {
        // {"a": [1, 2.5 (f32)], "s": "hi", "t": [$l #2 1 -2]}
        let mut b = vec![b'{', b'i', 1, b'a', b'[', b'i', 1, b'd'];
        b.extend_from_slice(&2.5f32.to_be_bytes());
        b.push(b']');
        b.extend_from_slice(&[b'i', 1, b's', b'S', b'i', 2, b'h', b'i']);
        b.extend_from_slice(&[b'i', 1, b't', b'[', b'$', b'l', b'#', b'i', 2]);
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&(-2i32).to_be_bytes());
        b.push(b'}');
        assert!(looks_like(&b));
        let v = parse(&b).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": [1, 2.5], "s": "hi", "t": [1, -2]})
        );
    }

    #[test]
    fn corrupt_documents_are_errors_not_allocations() {
        // A count of 2^40 with a few bytes left.
        let mut b = vec![b'[', b'$', b'l', b'#', b'L'];
        b.extend_from_slice(&(1i64 << 40).to_be_bytes());
        assert!(parse(&b).unwrap_err().to_string().contains("past the end"));
        assert!(parse(b"[i").is_err());
        assert!(parse(b"?").is_err());
        assert!(parse(&vec![b'['; 1000])
            .unwrap_err()
            .to_string()
            .contains("deeper"));
    }
}
