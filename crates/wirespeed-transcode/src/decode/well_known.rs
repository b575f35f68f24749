//! The well-known types' JSON forms: `Timestamp` and `Duration` as
//! strings, `FieldMask` as paths, `Struct`, `ListValue` and `Value` as the
//! JSON they hold, and `Any` with its `@type`.

use prost_reflect::MessageDescriptor;
use wirespeed_json::encode_string;

use crate::error::{Category, TranscodeError};
use crate::wkt::{wkt, Wkt};

use super::*;

impl Printer<'_> {
    /// `Timestamp` as RFC 3339, `Duration` as `"1.5s"`: 0, 3, 6 or 9
    /// fraction digits.
    pub(super) fn timestamp(&mut self, bytes: &[u8], duration: bool) -> Result<(), TranscodeError> {
        let (mut seconds, mut nanos) = (0i64, 0i32);
        for (n, raw) in fields(bytes)? {
            match (n, raw) {
                (1, Raw::Varint(v)) => seconds = v as i64,
                (2, Raw::Varint(v)) => nanos = v as i32,
                _ => {}
            }
        }
        let fraction = |nanos: i32| -> String {
            if nanos == 0 {
                String::new()
            } else if nanos % 1_000_000 == 0 {
                format!(".{:03}", nanos / 1_000_000)
            } else if nanos % 1_000 == 0 {
                format!(".{:06}", nanos / 1_000)
            } else {
                format!(".{nanos:09}")
            }
        };
        let text = if duration {
            if !(-999_999_999..=999_999_999).contains(&nanos)
                || (seconds > 0 && nanos < 0)
                || (seconds < 0 && nanos > 0)
            {
                return Err(malformed(format!(
                    "Duration {seconds}s {nanos}ns is not normalized"
                )));
            }
            let sign = if seconds < 0 || nanos < 0 { "-" } else { "" };
            format!("{sign}{}{}s", seconds.unsigned_abs(), fraction(nanos.abs()))
        } else {
            if !(0..=999_999_999).contains(&nanos)
                || !(-62_135_596_800..=253_402_300_799).contains(&seconds)
            {
                return Err(malformed(format!(
                    "Timestamp {seconds}s {nanos}ns is out of range"
                )));
            }
            let days = seconds.div_euclid(86_400);
            let secs = seconds.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(days);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{}Z",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                fraction(nanos)
            )
        };
        encode_string(&text, self.out);
        Ok(())
    }

    pub(super) fn field_mask(&mut self, bytes: &[u8]) -> Result<(), TranscodeError> {
        let mut paths = Vec::new();
        for (n, raw) in fields(bytes)? {
            if let (1, Raw::Len(s, e)) = (n, raw) {
                let path = std::str::from_utf8(&bytes[s..e])
                    .map_err(|_| malformed("a field mask path is not UTF-8"))?;
                let mut camel = String::with_capacity(path.len());
                let mut upper = false;
                for c in path.chars() {
                    if c == '_' {
                        upper = true;
                    } else if upper {
                        camel.push(c.to_ascii_uppercase());
                        upper = false;
                    } else {
                        camel.push(c);
                    }
                }
                paths.push(camel);
            }
        }
        encode_string(&paths.join(","), self.out);
        Ok(())
    }

    /// `Struct`: its `fields` map as an object.
    pub(super) fn structure(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        self.out.push(b'{');
        let mut first = true;
        for (n, raw) in fields(bytes)? {
            let (1, Raw::Len(s, e)) = (n, raw) else {
                continue;
            };
            let entry = &bytes[s..e];
            let raws = fields(entry)?;
            if !first {
                self.out.push(b',');
            }
            first = false;
            match raws.iter().rev().find(|(n, _)| *n == 1) {
                Some(&(_, Raw::Len(ks, ke))) => {
                    let key = std::str::from_utf8(&entry[ks..ke])
                        .map_err(|_| malformed("a Struct key is not UTF-8"))?;
                    encode_string(key, self.out);
                }
                _ => self.out.extend_from_slice(b"\"\""),
            }
            self.out.push(b':');
            let mut value = Vec::new();
            for (n, raw) in &raws {
                if let (2, Raw::Len(vs, ve)) = (n, raw) {
                    value.extend_from_slice(&entry[*vs..*ve]);
                }
            }
            self.value(&value, depth + 1)?;
        }
        self.out.push(b'}');
        Ok(())
    }

    pub(super) fn list_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        self.out.push(b'[');
        let mut first = true;
        for (n, raw) in fields(bytes)? {
            let (1, Raw::Len(s, e)) = (n, raw) else {
                continue;
            };
            if !first {
                self.out.push(b',');
            }
            first = false;
            self.value(&bytes[s..e], depth + 1)?;
        }
        self.out.push(b']');
        Ok(())
    }

    /// `Value`: its one kind, the last one given.
    pub(super) fn value(&mut self, bytes: &[u8], depth: usize) -> Result<(), TranscodeError> {
        if depth > self.options.max_depth {
            return Err(TranscodeError::new(
                Category::Limit,
                0,
                format!("values nest deeper than {}", self.options.max_depth),
            ));
        }
        let raws = fields(bytes)?;
        let Some(&(n, raw)) = raws.iter().rev().find(|(n, _)| (1..=6).contains(n)) else {
            // A Value with no kind: printed as null, as protobuf does.
            self.out.extend_from_slice(b"null");
            return Ok(());
        };
        match (n, raw) {
            (1, _) => self.out.extend_from_slice(b"null"),
            (2, Raw::Fixed64(v)) => {
                let x = f64::from_bits(v);
                if !x.is_finite() {
                    return Err(malformed(
                        "a Value's number is NaN or infinite, which JSON cannot hold",
                    ));
                }
                self.out
                    .extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
            }
            (3, Raw::Len(s, e)) => {
                let text = std::str::from_utf8(&bytes[s..e])
                    .map_err(|_| malformed("a Value's string is not UTF-8"))?;
                encode_string(text, self.out);
            }
            (4, Raw::Varint(v)) => {
                self.out
                    .extend_from_slice(if v != 0 { b"true" } else { b"false" })
            }
            (5, Raw::Len(s, e)) => self.structure(&bytes[s..e], depth)?,
            (6, Raw::Len(s, e)) => self.list_value(&bytes[s..e], depth)?,
            _ => return Err(malformed("a Value's kind has the wrong wire type")),
        }
        Ok(())
    }

    /// `Any`: `@type`, then the message's fields (or its well-known JSON
    /// under `value`).
    pub(super) fn any(
        &mut self,
        desc: &MessageDescriptor,
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let (mut url, mut value) = ("", (0, 0));
        for (n, raw) in fields(bytes)? {
            match (n, raw) {
                (1, Raw::Len(s, e)) => {
                    url = std::str::from_utf8(&bytes[s..e])
                        .map_err(|_| malformed("an Any's type URL is not UTF-8"))?
                }
                (2, Raw::Len(s, e)) => value = (s, e),
                _ => {}
            }
        }
        if url.is_empty() {
            self.out.extend_from_slice(b"{}");
            return Ok(());
        }
        let name = url.rsplit('/').next().unwrap_or(url);
        let inner = desc
            .parent_pool()
            .get_message_by_name(name)
            .ok_or_else(|| {
                malformed(format!(
                    "an Any holds '{url}', a message the descriptors do not have"
                ))
            })?;
        let content = &bytes[value.0..value.1];
        self.out.extend_from_slice(b"{\"@type\":");
        encode_string(url, self.out);
        let special = wkt(&inner) != Wkt::Plain;
        if special {
            self.out.extend_from_slice(b",\"value\":");
            self.message(&inner, content, depth + 1)?;
        } else {
            self.out.push(b',');
            let mark = self.out.len();
            if !self.fields(&inner, content, depth + 1)? {
                self.out.truncate(mark - 1);
            }
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
