//! HTTP compression, as tritonclient's `request_compression_algorithm` and
//! `response_compression_algorithm` use it: request bodies sent with
//! `Content-Encoding: gzip` or `deflate` are decompressed as they stream,
//! and answers are compressed when `Accept-Encoding` asks.
//!
//! A compressed body goes through async-compression's streaming decoders,
//! read [`INFLATE_CHUNK`] bytes at a time, so what the decoder sees, and the
//! body limit counts, is the decompressed bytes, as they come: a small body
//! that expands past the limit (a zip bomb) is refused with 413 when the
//! limit is crossed, having held no more than a chunk. `deflate` is the
//! zlib format, as HTTP defines it and as Python's `zlib.compress` writes
//! it. Answers are compressed with flate2 at its fast level (a tensor
//! answer is compressed once per request, so speed matters more than the
//! last few percent of size), on the CPU pool when large.

use std::pin::Pin;

use crate::incoming::RequestBody;
use async_compression::tokio::bufread::{GzipDecoder, ZlibDecoder};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyDataStream;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, VARY};
use hyper::Response;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::oneshot;
use tokio_stream::StreamExt;
use tokio_util::io::StreamReader;
use wirespeed_core::{CpuPool, Error, ErrorKind};

use crate::body::Body;

/// Decompressed bytes handed on at a time.
const INFLATE_CHUNK: usize = 64 * 1024;

/// Answers smaller than this go back uncompressed: the headers would eat
/// the saving.
const MIN_COMPRESS_BYTES: usize = 1024;

/// Answers larger than this are compressed on the CPU pool, not on the
/// connection's I/O thread.
const OFFLOAD_COMPRESS_BYTES: usize = 64 * 1024;

/// A content coding wirespeed reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// gzip.
    Gzip,
    /// The zlib format, which HTTP's `deflate` names.
    Deflate,
}

impl Coding {
    fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }

    fn parse(token: &str) -> Option<Coding> {
        match token.trim().to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Some(Coding::Gzip),
            "deflate" => Some(Coding::Deflate),
            _ => None,
        }
    }
}

/// The coding of a request body, from `Content-Encoding`: `None` for none
/// (or `identity`), an error naming what is not supported.
pub fn request_coding(headers: &HeaderMap) -> Result<Option<Coding>, Error> {
    let Some(value) = headers.get(CONTENT_ENCODING) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text.eq_ignore_ascii_case("identity") {
        return Ok(None);
    }
    Coding::parse(text).map(Some).ok_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "Content-Encoding {value:?} is not supported; send the body as gzip, deflate or \
                 uncompressed"
            ),
        )
    })
}

/// The coding to answer in, from `Accept-Encoding`: gzip if it is
/// accepted, else deflate, else none. A coding with `q=0` is refused.
pub fn response_coding(headers: &HeaderMap) -> Option<Coding> {
    let mut best = None;
    for value in headers.get_all(ACCEPT_ENCODING) {
        for item in value.to_str().unwrap_or("").split(',') {
            let mut parts = item.split(';');
            let Some(coding) = parts.next().and_then(Coding::parse) else {
                continue;
            };
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if refused {
                continue;
            }
            if coding == Coding::Gzip || best.is_none() {
                best = Some(coding);
            }
        }
    }
    best
}

/// A request body being decompressed as it arrives.
pub struct Inflater {
    decoder: Pin<Box<dyn AsyncRead + Send>>,
    coding: Coding,
    /// The chunk being filled; kept here, not in the future, so a
    /// cancelled read loses nothing.
    chunk: BytesMut,
    /// Decompressed bytes handed on so far, for the error text.
    out: u64,
}

impl Inflater {
    /// Decompresses `body`, sent in `coding`.
    pub fn new(body: RequestBody, coding: Coding) -> Inflater {
        let frames = BodyDataStream::new(body).map(|frame| frame.map_err(std::io::Error::other));
        let reader = StreamReader::new(frames);
        let decoder: Pin<Box<dyn AsyncRead + Send>> = match coding {
            Coding::Gzip => Box::pin(GzipDecoder::new(reader)),
            Coding::Deflate => Box::pin(ZlibDecoder::new(reader)),
        };
        Inflater {
            decoder,
            coding,
            chunk: BytesMut::new(),
            out: 0,
        }
    }

    /// The next decompressed chunk, at most [`INFLATE_CHUNK`] bytes, or
    /// `None` at the end of the body. Cancel-safe.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Error> {
        if self.chunk.capacity() == 0 {
            self.chunk.reserve(INFLATE_CHUNK);
        }
        while self.chunk.len() < INFLATE_CHUNK {
            match self.decoder.read_buf(&mut self.chunk).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::malformed(format!(
                        "the {} request body could not be decompressed after {} bytes: {e}",
                        self.coding.name(),
                        self.out + self.chunk.len() as u64
                    )))
                }
            }
        }
        let chunk = std::mem::take(&mut self.chunk);
        self.out += chunk.len() as u64;
        Ok((!chunk.is_empty()).then(|| chunk.freeze()))
    }
}

/// `response` compressed in `coding`, if it is large enough to gain.
pub async fn compress(response: Response<Body>, coding: Coding, pool: &CpuPool) -> Response<Body> {
    if response.headers().contains_key(CONTENT_ENCODING) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // A stream goes as it comes.
    let bytes = match body.into_whole() {
        Ok(bytes) => bytes,
        Err(stream) => return Response::from_parts(parts, stream),
    };
    parts
        .headers
        .append(VARY, HeaderValue::from_static("accept-encoding"));
    if bytes.len() < MIN_COMPRESS_BYTES {
        return Response::from_parts(parts, Body::new(bytes));
    }
    let compressed = if bytes.len() > OFFLOAD_COMPRESS_BYTES {
        let (done, back) = oneshot::channel();
        let plain = bytes.clone();
        pool.spawn(move || {
            let _ = done.send(deflate(&plain, coding));
        });
        back.await.ok()
    } else {
        Some(deflate(&bytes, coding))
    };
    // The pool never drops a job; were it to, the answer goes uncompressed.
    let Some(compressed) = compressed else {
        return Response::from_parts(parts, Body::new(bytes));
    };
    parts
        .headers
        .insert(CONTENT_ENCODING, HeaderValue::from_static(coding.name()));
    Response::from_parts(parts, Body::new(compressed))
}

/// `bytes` compressed in `coding`.
fn deflate(bytes: &[u8], coding: Coding) -> Vec<u8> {
    use std::io::Write;
    let level = flate2::Compression::fast();
    let out = Vec::with_capacity(bytes.len() / 4 + 64);
    // Writing to a Vec cannot fail.
    match coding {
        Coding::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(out, level);
            let _ = encoder.write_all(bytes);
            encoder.finish().unwrap_or_default()
        }
        Coding::Deflate => {
            let mut encoder = flate2::write::ZlibEncoder::new(out, level);
            let _ = encoder.write_all(bytes);
            encoder.finish().unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(accept).unwrap());
        h
    }

    #[test]
    fn accept_encoding_prefers_gzip_and_honours_q_zero() {
        assert_eq!(response_coding(&headers("gzip")), Some(Coding::Gzip));
        assert_eq!(response_coding(&headers("deflate")), Some(Coding::Deflate));
        assert_eq!(
            response_coding(&headers("deflate, gzip;q=0.5, br")),
            Some(Coding::Gzip)
        );
        assert_eq!(
            response_coding(&headers("gzip;q=0, deflate")),
            Some(Coding::Deflate)
        );
        assert_eq!(response_coding(&headers("br, zstd")), None);
        assert_eq!(response_coding(&HeaderMap::new()), None);
    }

    #[test]
    fn content_encoding_is_read_or_refused_by_name() {
        let mut h = HeaderMap::new();
        assert_eq!(request_coding(&h).unwrap(), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert_eq!(request_coding(&h).unwrap(), Some(Coding::Gzip));
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("br"));
        let e = request_coding(&h).unwrap_err();
        assert!(e.message().contains("\"br\""), "{e}");
    }

    #[test]
    fn what_is_compressed_inflates_back() {
        use std::io::Read;
        let text = b"0.25,".repeat(1000);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&deflate(&text, Coding::Gzip)[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, text);
        back.clear();
        flate2::read::ZlibDecoder::new(&deflate(&text, Coding::Deflate)[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, text);
    }
}
