//! Decoding HPACK header blocks (RFC 7541), for `authority.rs`, which reads
//! the header blocks gRPC clients send over a Unix socket.
//!
//! Written here because no crate did it well enough for bytes from any
//! client: `h2` keeps its decoder private; `loona-hpack` (the maintained
//! fork of `hpack`) builds a hash map of the Huffman code for every string
//! it decodes (30 µs a request, measured); `httlib-hpack` indexes past the
//! end of a truncated integer or string and panics (found by a
//! random-input test). This decoder checks every length against the block
//! before reading it, bounds integers, and keeps the dynamic table within
//! its size; `random_blocks_never_panic` feeds it random blocks.
//! Huffman-coded strings are decoded by `httlib-huffman`, whose decoder
//! walks precomputed tables and reports a bad code as an error.

use std::borrow::Cow;
use std::collections::VecDeque;

use httlib_huffman::DecoderSpeed;

/// A header block that cannot be decoded: what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HpackError(pub(crate) &'static str);

/// The static table (RFC 7541, Appendix A): index 1 is the first entry.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Every entry's size counts 32 bytes over its name and value.
const ENTRY_OVERHEAD: usize = 32;

/// The largest integer accepted: far above any length or index a header
/// block can hold, and small enough never to overflow.
const MAX_INTEGER: usize = 1 << 24;

/// One side's HPACK decoding context: the dynamic table.
pub(crate) struct Decoder {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    /// The table's current maximum size, as the encoder last set it.
    max: usize,
    /// The most the encoder may set it to: SETTINGS_HEADER_TABLE_SIZE.
    limit: usize,
}

impl Decoder {
    /// A decoder whose table may grow to `limit` bytes.
    pub(crate) fn new(limit: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: limit,
            limit,
        }
    }

    /// Decodes `block`, handing each field to `field` in order.
    pub(crate) fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut fields = 0;
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let index = integer(&mut block, 7)?;
                let (name, value) = self.entry(index)?;
                field(name, value);
            } else if first & 0xe0 == 0x20 {
                if fields > 0 {
                    return Err(HpackError("a table size update after a header field"));
                }
                let size = integer(&mut block, 5)?;
                if size > self.limit {
                    return Err(HpackError("a table size update past the advertised size"));
                }
                self.max = size;
                self.evict(0);
                continue;
            } else {
                let (indexing, prefix) = match first & 0xf0 {
                    0x40..=0x70 => (true, 6),
                    _ => (false, 4),
                };
                let index = integer(&mut block, prefix)?;
                let name = if index == 0 {
                    string(&mut block)?
                } else {
                    Cow::Owned(self.entry(index)?.0.to_vec())
                };
                let value = string(&mut block)?;
                field(&name, &value);
                if indexing {
                    self.insert(name.into_owned(), value.into_owned());
                }
            }
            fields += 1;
        }
        Ok(())
    }

    /// The entry at `index`: static from 1 to 61, dynamic after.
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError("index 0")),
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((name.as_bytes(), value.as_bytes()))
            }
            _ => self
                .table
                .get(index - 62)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError("an index past the dynamic table")),
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.evict(size);
        if size <= self.max {
            self.size += size;
            self.table.push_front((name, value));
        }
    }

    /// Evicts the oldest entries until `room` more bytes fit (all of them
    /// when it never will).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((name, value)) = self.table.pop_back() else {
                break;
            };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

/// An integer with a `prefix`-bit prefix in the first byte (RFC 7541, 5.1),
/// taken off the front of `block`.
fn integer(block: &mut &[u8], prefix: u8) -> Result<usize, HpackError> {
    let short = HpackError("a header block cut short");
    let (&first, mut rest) = block.split_first().ok_or(short.clone())?;
    let mask = (1usize << prefix) - 1;
    let mut value = usize::from(first) & mask;
    if value == mask {
        let mut shift = 0;
        loop {
            let (&byte, tail) = rest.split_first().ok_or(short.clone())?;
            rest = tail;
            value += usize::from(byte & 0x7f) << shift;
            if value > MAX_INTEGER {
                return Err(HpackError("an integer too large"));
            }
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
    }
    *block = rest;
    Ok(value)
}

/// A string (RFC 7541, 5.2), Huffman-decoded if it is coded, taken off
/// the front of `block`.
fn string<'a>(block: &mut &'a [u8]) -> Result<Cow<'a, [u8]>, HpackError> {
    let huffman = block.first().is_some_and(|&b| b & 0x80 != 0);
    let len = integer(block, 7)?;
    if len > block.len() {
        return Err(HpackError("a string past the end of the header block"));
    }
    let (bytes, rest) = block.split_at(len);
    *block = rest;
    if !huffman {
        return Ok(Cow::Borrowed(bytes));
    }
    let mut decoded = Vec::with_capacity(len * 8 / 5 + 1);
    httlib_huffman::decode(bytes, &mut decoded, DecoderSpeed::FiveBits)
        .map_err(|_| HpackError("a bad Huffman code"))?;
    Ok(Cow::Owned(decoded))
}

/// A xorshift generator of random test inputs, the same every run.
#[cfg(test)]
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(decoder: &mut Decoder, block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut fields = Vec::new();
        decoder
            .decode(block, |n, v| fields.push((n.to_vec(), v.to_vec())))
            .unwrap();
        fields
    }

    /// RFC 7541 Appendix C.4: three requests with Huffman coding, and the
    /// dynamic table they build.
    #[test]
    fn the_rfc_examples_decode() {
        let hex = |s: &str| -> Vec<u8> {
            let s: String = s.split_whitespace().collect();
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut d = Decoder::new(4096);
        let first = decode_all(&mut d, &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"));
        let text = |f: &[(Vec<u8>, Vec<u8>)]| -> Vec<(String, String)> {
            f.iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8(n.clone()).unwrap(),
                        String::from_utf8(v.clone()).unwrap(),
                    )
                })
                .collect()
        };
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            text(&first),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.size, 57);
        let second = decode_all(&mut d, &hex("8286 84be 5886 a8eb 1064 9cbf"));
        assert_eq!(
            text(&second),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        let third = decode_all(
            &mut d,
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
        );
        assert_eq!(
            text(&third),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.size, 164);
    }

    #[test]
    fn bad_blocks_are_errors() {
        let mut d = Decoder::new(4096);
        for block in [
            &[0x80][..],                                 // index 0
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],       // an integer too large
            &[0xff],                                     // cut short
            &[0xbe],                                     // past the dynamic table
            &[0x40, 0x05, b'a'],                         // a string past the end
            &[0x3f, 0xe2, 0x1f],                         // a size update past the limit (4097)
            &[0x82, 0x20],                               // a size update after a field
            &[0x40, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00], // EOS in a Huffman string
        ] {
            assert!(d.decode(block, |_, _| {}).is_err(), "{block:?}");
        }
    }

    #[test]
    fn random_blocks_never_panic() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut d = Decoder::new(4096);
        for _ in 0..200_000 {
            let len = (next() % 48) as usize;
            let block: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = d.decode(&block, |_, _| {});
            assert!(d.size <= d.max);
        }
    }
}
