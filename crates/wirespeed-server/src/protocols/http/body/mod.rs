//! Reading an infer request body: hyper's frames go to the incremental
//! decoder as they arrive, so the body is never held whole and decoding
//! overlaps the network.
//!
//! Small bodies decode on the async worker that reads them. Past
//! [`OFFLOAD_BYTES`] (or at once, when `Content-Length` says the body will
//! be that large), decoding moves to the server's CPU pool, so a large
//! decode never stalls other connections on the worker: the decoder goes
//! to the pool with the frames that have arrived, and comes back when it
//! has fed them, while the worker keeps reading the next ones. No pool
//! thread ever waits for the network. Frames that pile up while the decoder
//! works are joined into spans of up to [`SPAN_BYTES`] for its next trip: a
//! body arriving faster than one core decodes builds such a backlog, whose
//! spans (and frames of [`PARALLEL_MIN_BYTES`] or more, as they are) the
//! decoder splits over the pool's threads; a trickle is decoded frame by
//! frame, so little is left to do when its last byte arrives.

mod offload;
mod raw;

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderMap, CONTENT_LENGTH};
use tokio::sync::oneshot;
use wirespeed_core::raw::{RawError, RawFiller};
use wirespeed_core::{
    element_count, CpuPool, Error, ErrorKind, InferRequest, ModelMetadata, Tensor, TensorBudget,
    TensorSpec,
};
use wirespeed_http::RequestBody;

use crate::protocols::Front;
use crate::protocols::MessageLimits as Limits;
use offload::{Decoding, Offloaded};
use raw::{read_binary, read_raw};
use wirespeed_engine::timing::{timed, Stages};
use wirespeed_http::{request_coding, too_large, BodyReader};
use wirespeed_json::{
    Category, DecodeError, DecodeOptions, Format, RequestDecoder, PARALLEL_MIN_BYTES,
};

/// Decoding more than this inline would hold an async worker for more than
/// about 100 µs (the decoder runs at roughly 500 MB/s).
pub(crate) const OFFLOAD_BYTES: u64 = 64 * 1024;

/// Frames read ahead while an offloaded decoder works. hyper's frames grow
/// with its read buffer (up to a few hundred KiB), so this bounds the
/// backlog, and with it memory, to a few MiB beyond the tensors.
const BACKLOG_FRAMES: usize = 4;

/// The most bytes of waiting frames joined into one span for the decoder.
const SPAN_BYTES: usize = 1 << 20;

/// Triton's binary tensor data extension: the length of the JSON header
/// that starts the body; raw tensor bytes follow it.
pub(crate) const BINARY_HEADER_LENGTH: &str = "inference-header-content-length";

/// Maps a decoder error to the server's error taxonomy.
pub(crate) fn decode_error(e: DecodeError) -> Error {
    let kind = match e.category() {
        Category::Syntax | Category::Schema => ErrorKind::MalformedRequest,
        Category::Type | Category::Range | Category::Shape => ErrorKind::InvalidInput,
        Category::Limit => ErrorKind::LimitExceeded,
        _ => ErrorKind::MalformedRequest,
    };
    Error::new(kind, e.to_string())
}

/// How the body is laid out, from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// All JSON.
    Json,
    /// A JSON header of this many bytes, then raw tensor bytes.
    Binary(u64),
    /// `Inference-Header-Content-Length: 0`: the whole body is the raw
    /// bytes of a single-input model's input.
    Raw,
}

/// Reads the body's layout and declared length from the headers, refusing
/// what the server cannot read.
fn layout(headers: &HeaderMap, declared: Option<u64>) -> Result<Layout, Error> {
    request_coding(headers)?;
    let Some(value) = headers.get(BINARY_HEADER_LENGTH) else {
        return Ok(Layout::Json);
    };
    let header = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            Error::malformed(format!(
                "Inference-Header-Content-Length must be a byte count, found {value:?}"
            ))
        })?;
    if let Some(total) = declared {
        if header > total {
            return Err(Error::malformed(format!(
                "Inference-Header-Content-Length ({header}) is larger than the whole body \
                 (Content-Length {total})"
            )));
        }
    }
    Ok(if header == 0 {
        Layout::Raw
    } else {
        Layout::Binary(header)
    })
}

/// A decoded infer request body.
pub(crate) struct DecodedBody {
    pub(crate) request: InferRequest,
    /// The body was a raw tensor (`Inference-Header-Content-Length: 0`):
    /// every output goes back as binary.
    pub(crate) raw: bool,
    /// The time spent decoding it.
    pub(crate) decode: Duration,
    /// The body's bytes, decompressed.
    pub(crate) bytes: u64,
}

/// Reads and decodes the body of an infer request for `model`, enforcing
/// `limit` bytes while it streams. The body is read to its end before an
/// error is returned (except past the limit), so the connection stays usable.
pub(crate) async fn decode_body(
    headers: &HeaderMap,
    body: RequestBody,
    limits: &Limits,
    options: &DecodeOptions,
    pool: &CpuPool,
    model: &ModelMetadata,
) -> Result<DecodedBody, Error> {
    let (mut reader, declared) = begin(headers, body, limits)?;
    let result = read(&mut reader, headers, declared, options, pool, model).await;
    let mut decoded = settle(&mut reader, result).await?;
    decoded.decode = reader.decode;
    decoded.bytes = reader.received();
    Ok(decoded)
}

/// The reader of a body and its declared length; a declared length over
/// the limit is refused before a byte is read.
fn begin(
    headers: &HeaderMap,
    body: RequestBody,
    limits: &Limits,
) -> Result<(BodyReader, Option<u64>), Error> {
    let limit = limits.max_body_bytes as u64;
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    // An unsupported coding is refused by `layout`, once the reader exists
    // to drop the body.
    let coding = request_coding(headers).ok().flatten();
    let reader = BodyReader::decoding(body, coding, &limits.body());
    // A compressed body's Content-Length says nothing of what it holds.
    Ok((reader, if coding.is_some() { None } else { declared }))
}

/// Before an error is answered, reads and drops the rest of the body
/// (unless it is too large or too slow to wait for), so the connection
/// stays usable.
async fn settle<T>(reader: &mut BodyReader, result: Result<T, Error>) -> Result<T, Error> {
    if let Err(e) = &result {
        if !matches!(e.kind(), ErrorKind::PayloadTooLarge | ErrorKind::Timeout) {
            reader.discard().await;
        }
    }
    result
}

async fn read(
    reader: &mut BodyReader,
    headers: &HeaderMap,
    declared: Option<u64>,
    options: &DecodeOptions,
    pool: &CpuPool,
    model: &ModelMetadata,
) -> Result<DecodedBody, Error> {
    let layout = layout(headers, declared)?;
    let json_len = match layout {
        Layout::Raw => {
            let request = read_raw(reader, declared, model, options).await?;
            return Ok(DecodedBody {
                request,
                raw: true,
                decode: Duration::ZERO,
                bytes: 0,
            });
        }
        Layout::Binary(n) => Some(n),
        Layout::Json => None,
    };
    let mut decoder = RequestDecoder::new(options.clone());
    if let Some(len) = json_len.or(declared) {
        decoder = decoder.with_body_len(len);
    }
    if json_len.is_some() {
        decoder = decoder.with_binary_data();
    }
    let decoder = Box::new(decoder);
    let offload = json_len.or(declared).is_some_and(|n| n > OFFLOAD_BYTES);
    let (mut request, _, leftover) = decode_json(reader, decoder, offload, json_len, pool).await?;
    if let Some(n) = json_len {
        let after_header = declared.map(|total| total - n);
        read_binary(
            reader,
            &mut request,
            leftover,
            after_header,
            options.limits.max_string_bytes,
        )
        .await?;
    }
    Ok(DecodedBody {
        request,
        raw: false,
        decode: Duration::ZERO,
        bytes: 0,
    })
}

/// Reads and decodes a whole-JSON body (TF Serving, Clipper) with
/// `decoder`, as it arrives, enforcing `limit` bytes. Like
/// [`decode_body`], it reads the body to its end before returning an error.
/// Also returns the time spent decoding and the body's length.
pub(crate) async fn decode_json_body(
    headers: &HeaderMap,
    body: RequestBody,
    limits: &Limits,
    mut decoder: Box<RequestDecoder>,
    pool: &CpuPool,
) -> Result<(InferRequest, Format, Duration, u64), Error> {
    let (mut reader, declared) = begin(headers, body, limits)?;
    let result = async {
        if layout(headers, declared)? != Layout::Json {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the binary tensor data extension (Inference-Header-Content-Length) belongs to \
                 the V2 API; this endpoint takes JSON",
            ));
        }
        if let Some(len) = declared {
            decoder.set_body_len(len);
        }
        let offload = declared.is_some_and(|n| n > OFFLOAD_BYTES);
        let (request, format, _) = decode_json(&mut reader, decoder, offload, None, pool).await?;
        Ok((request, format))
    }
    .await;
    let (request, format) = settle(&mut reader, result).await?;
    Ok((request, format, reader.decode, reader.received()))
}

/// Reads a whole JSON body (TF Serving's `:classify` and `:regress`),
/// decompressed and within `--max-body-bytes`. Like [`decode_body`], it
/// reads the body to its end before returning an error. Also returns the
/// body's length.
pub(crate) async fn read_json_body(
    headers: &HeaderMap,
    body: RequestBody,
    limits: &Limits,
) -> Result<(Vec<u8>, u64), Error> {
    let (mut reader, declared) = begin(headers, body, limits)?;
    let result = async {
        if layout(headers, declared)? != Layout::Json {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the binary tensor data extension (Inference-Header-Content-Length) belongs to \
                 the V2 API; this endpoint takes JSON",
            ));
        }
        let mut all = Vec::with_capacity(declared.unwrap_or(0) as usize);
        while let Some(frame) = reader.next().await? {
            all.extend_from_slice(&frame);
        }
        Ok(all)
    }
    .await;
    let all = settle(&mut reader, result).await?;
    Ok((all, reader.received()))
}

/// Feeds the JSON part of the body (all of it, or its first `json_len`
/// bytes) to the decoder, inline or on the pool. Returns the request and
/// the bytes of the last frame that came after the JSON.
async fn decode_json(
    reader: &mut BodyReader,
    decoder: Box<RequestDecoder>,
    offload: bool,
    json_len: Option<u64>,
    pool: &CpuPool,
) -> Result<(InferRequest, Format, Bytes), Error> {
    let mut decoding = if offload {
        Decoding::Offloaded(Offloaded::new(decoder, pool))
    } else {
        Decoding::Inline(decoder)
    };
    let mut fed = 0u64;
    let mut leftover = Bytes::new();
    let mut failure = None;
    let mut ended = false;
    // Time the decoder spent on the pool.
    let mut away = Duration::ZERO;
    loop {
        let more = !ended && json_len.is_none_or(|n| fed < n);
        match &mut decoding {
            Decoding::Inline(decoder) => {
                if !more {
                    break;
                }
                let Some(data) = next_json(reader, json_len, &mut fed, &mut leftover).await? else {
                    ended = true;
                    continue;
                };
                if let Err(e) = timed(&mut reader.decode, || decoder.feed(&data)) {
                    failure = Some(decode_error(e));
                    break;
                }
                if fed > OFFLOAD_BYTES {
                    let Decoding::Inline(decoder) = std::mem::replace(
                        &mut decoding,
                        Decoding::Inline(Box::new(RequestDecoder::new(DecodeOptions::default()))),
                    ) else {
                        unreachable!()
                    };
                    decoding = Decoding::Offloaded(Offloaded::new(decoder, pool));
                }
            }
            Decoding::Offloaded(offloaded) => {
                if offloaded.failed.is_some() {
                    break;
                }
                let reading = more && offloaded.backlog.len() < BACKLOG_FRAMES;
                let on_trip = offloaded.trip.is_some();
                if !reading && !on_trip {
                    if offloaded.backlog.is_empty() {
                        break;
                    }
                    offloaded.depart();
                    continue;
                }
                // Read the next frame while the decoder is away, or take
                // the decoder back, whichever comes first.
                let frame = tokio::select! {
                    next = next_json(reader, json_len, &mut fed, &mut leftover), if reading => Some(next?),
                    back = offloaded.arrive(&mut away), if on_trip => { back?; None }
                };
                match frame {
                    Some(Some(data)) => offloaded.backlog.push(data),
                    Some(None) => ended = true,
                    None => {}
                }
                offloaded.depart();
            }
        }
    }
    let failed = failure.is_some();
    let result = match decoding {
        Decoding::Inline(decoder) => match failure {
            Some(e) => Err(e),
            None => {
                timed(&mut reader.decode, || decoder.finish_with_format()).map_err(decode_error)
            }
        },
        Decoding::Offloaded(mut offloaded) => {
            // Whatever is still away or waiting is fed before the end.
            offloaded.arrive(&mut away).await?;
            offloaded.depart();
            offloaded.arrive(&mut away).await?;
            reader.decode += away;
            match (offloaded.failed, offloaded.idle) {
                (Some(e), _) => Err(decode_error(e)),
                (None, Some(decoder)) => {
                    timed(&mut reader.decode, || decoder.finish_with_format()).map_err(decode_error)
                }
                (None, None) => Err(Error::internal("the decoder did not come back")),
            }
        }
    };
    match json_len {
        // A short header is reported as such, not as the JSON error it causes.
        Some(n) if fed < n && !failed => Err(Error::malformed(format!(
            "the body ended after {fed} bytes, inside the {n}-byte JSON header that \
             Inference-Header-Content-Length announces"
        ))),
        _ => result.map(|(request, format)| (request, format, leftover)),
    }
}

/// The next frame of the JSON part of the body: up to `json_len` bytes in
/// all, the rest of a frame that crosses it going to `leftover`.
async fn next_json(
    reader: &mut BodyReader,
    json_len: Option<u64>,
    fed: &mut u64,
    leftover: &mut Bytes,
) -> Result<Option<Bytes>, Error> {
    let Some(mut data) = reader.next().await? else {
        return Ok(None);
    };
    if let Some(n) = json_len {
        let want = n - *fed;
        if data.len() as u64 > want {
            *leftover = data.split_off(want as usize);
        }
    }
    *fed += data.len() as u64;
    Ok(Some(data))
}

/// Answers `error` for a request whose body will not be used: the body is
/// read and dropped first (within the limits; see [`BodyReader::discard`]),
/// not decoded, so the client gets the error and the connection stays usable.
pub(crate) async fn refuse(body: RequestBody, limits: &Limits, error: Error) -> Error {
    BodyReader::new(body, &limits.body()).discard().await;
    error
}

/// A REST infer request's headers and body, held by its codec until the
/// body is decoded or refused.
pub(crate) struct RestRequest<'a> {
    pub(crate) front: &'a Front,
    pub(crate) headers: HeaderMap,
    body: Option<RequestBody>,
}

impl<'a> RestRequest<'a> {
    pub(crate) fn new(front: &'a Front, request: hyper::Request<RequestBody>) -> RestRequest<'a> {
        let (parts, body) = request.into_parts();
        RestRequest {
            front,
            headers: parts.headers,
            body: Some(body),
        }
    }

    /// The body, once.
    pub(crate) fn take_body(&mut self) -> RequestBody {
        self.body.take().expect("a body is decoded once")
    }

    /// The value of header `name`, when it is text.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Reads and drops the body, if it is still here, and returns `error`.
    pub(crate) async fn refuse(&mut self, error: Error) -> Error {
        match self.body.take() {
            Some(body) => refuse(body, &self.front.limits, error).await,
            None => error,
        }
    }

    /// Reads and decodes a whole-JSON body with `decoder` (TF Serving,
    /// Clipper), recording the read and decode times.
    pub(crate) async fn decode_json(
        &mut self,
        decoder: Box<RequestDecoder>,
        stages: &mut Stages,
    ) -> Result<(InferRequest, Format), Error> {
        let body = self.take_body();
        let (request, format, decode, bytes) = decode_json_body(
            &self.headers,
            body,
            &self.front.limits,
            decoder,
            &self.front.engine.pool,
        )
        .await?;
        stages.body_read(decode, bytes);
        Ok((request, format))
    }

    /// Reads a whole JSON body, recording the read (the decode is the
    /// caller's to time).
    pub(crate) async fn read_json(&mut self, stages: &mut Stages) -> Result<Vec<u8>, Error> {
        let body = self.take_body();
        let (all, bytes) = read_json_body(&self.headers, body, &self.front.limits).await?;
        stages.body_read(Duration::ZERO, bytes);
        Ok(all)
    }
}

/// A small request body (an API call's, not a tensor's), whole, up to
/// `max` bytes (and `--max-body-bytes`).
pub(crate) async fn read_small(
    front: &Front,
    body: RequestBody,
    max: usize,
) -> Result<Vec<u8>, Error> {
    let mut limits = front.limits.clone();
    limits.max_body_bytes = limits.max_body_bytes.min(max);
    let mut reader = BodyReader::new(body, &limits.body());
    let mut all = Vec::new();
    while let Some(frame) = reader.next().await? {
        all.extend_from_slice(&frame);
    }
    Ok(all)
}
