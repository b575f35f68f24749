//! Reading an infer request body: hyper's frames go to the incremental
//! decoder as they arrive, so the body is never held whole and decoding
//! overlaps the network.
//!
//! Small bodies decode on the async worker that reads them. Past
//! [`OFFLOAD_BYTES`] (or at once, when `Content-Length` says the body will
//! be that large), the decoder moves to tokio's blocking pool and receives
//! the remaining frames over a bounded channel, so a large decode never
//! stalls other connections on the worker. There, frames that are already
//! waiting are joined into one span of up to [`SPAN_BYTES`]: a body arriving
//! faster than one core decodes builds a backlog, whose spans the decoder
//! splits over several cores; a trickle is decoded frame by frame, so little
//! is left to do when its last byte arrives.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, CONTENT_ENCODING, CONTENT_LENGTH};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wirespeed_core::{Error, ErrorKind, InferRequest};
use wirespeed_json::{Category, DecodeError, DecodeOptions, RequestDecoder};

/// Decoding more than this inline would hold an async worker for more than
/// about 100 µs (the decoder runs at roughly 500 MB/s).
pub(crate) const OFFLOAD_BYTES: u64 = 64 * 1024;

/// Frames in flight between the reader and an offloaded decoder. hyper's
/// frames grow with its read buffer (up to a few hundred KiB), so this bounds
/// the backlog, and with it memory, to a few MiB beyond the tensors.
const CHANNEL_FRAMES: usize = 8;

/// The most bytes of waiting frames joined into one span for the decoder.
const SPAN_BYTES: usize = 1 << 20;

/// The Triton binary tensor extension's header; its presence means the body
/// is not plain JSON.
const BINARY_HEADER_LENGTH: &str = "inference-header-content-length";

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

fn too_large(limit: u64) -> Error {
    Error::new(
        ErrorKind::PayloadTooLarge,
        format!("request body is larger than the {limit}-byte limit"),
    )
}

/// Refuses bodies the JSON path cannot read, by their headers.
fn check_headers(headers: &HeaderMap) -> Result<(), Error> {
    if headers.contains_key(BINARY_HEADER_LENGTH) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "this server does not support the binary tensor data extension yet \
             (Inference-Header-Content-Length); send inputs as JSON 'data' \
             (tritonclient: set_data_from_numpy(..., binary_data=False))",
        ));
    }
    if let Some(encoding) = headers.get(CONTENT_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "Content-Encoding {encoding:?} is not supported; send the body uncompressed"
                ),
            ));
        }
    }
    Ok(())
}

/// Where the decoder runs.
// One local per request: boxing the large variant would cost every request
// an allocation to save stack space nobody needs.
#[allow(clippy::large_enum_variant)]
enum Decoding {
    Inline(RequestDecoder),
    Offloaded {
        frames: mpsc::Sender<Bytes>,
        task: JoinHandle<Result<InferRequest, DecodeError>>,
    },
}

impl Decoding {
    fn offload(decoder: RequestDecoder) -> Decoding {
        let (frames, mut incoming) = mpsc::channel::<Bytes>(CHANNEL_FRAMES);
        let task = tokio::task::spawn_blocking(move || {
            let mut decoder = decoder;
            let mut span = Vec::new();
            while let Some(frame) = incoming.blocking_recv() {
                if incoming.is_empty() {
                    decoder.feed(&frame)?;
                    continue;
                }
                span.clear();
                span.extend_from_slice(&frame);
                while span.len() < SPAN_BYTES {
                    match incoming.try_recv() {
                        Ok(next) => span.extend_from_slice(&next),
                        Err(_) => break,
                    }
                }
                decoder.feed(&span)?;
            }
            decoder.finish()
        });
        Decoding::Offloaded { frames, task }
    }
}

/// Reads and decodes the body of an infer request, enforcing `limit` bytes
/// while it streams.
pub(crate) async fn decode_body(
    headers: &HeaderMap,
    mut body: Incoming,
    limit: u64,
    options: &DecodeOptions,
) -> Result<InferRequest, Error> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    if let Err(e) = check_headers(headers) {
        discard_body(&mut body, limit).await;
        return Err(e);
    }

    let mut decoder = RequestDecoder::new(options.clone());
    if let Some(len) = declared {
        decoder = decoder.with_body_len(len);
    }
    let mut decoding = if declared.is_some_and(|n| n > OFFLOAD_BYTES) {
        Decoding::offload(decoder)
    } else {
        Decoding::Inline(decoder)
    };
    let mut received = 0u64;
    let mut failure = None;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| Error::malformed(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received += data.len() as u64;
        if received > limit {
            return Err(too_large(limit));
        }
        match &mut decoding {
            Decoding::Inline(decoder) => {
                if let Err(e) = decoder.feed(&data) {
                    failure = Some(decode_error(e));
                    break;
                }
                if received > OFFLOAD_BYTES {
                    let Decoding::Inline(decoder) = std::mem::replace(
                        &mut decoding,
                        Decoding::Inline(RequestDecoder::new(options.clone())),
                    ) else {
                        unreachable!()
                    };
                    decoding = Decoding::offload(decoder);
                }
            }
            Decoding::Offloaded { frames, .. } => {
                // A closed channel means the decoder stopped on an error,
                // which the task's result carries.
                if frames.send(data).await.is_err() {
                    break;
                }
            }
        }
    }
    let result = match decoding {
        Decoding::Inline(decoder) => match failure {
            Some(e) => Err(e),
            None => decoder.finish().map_err(decode_error),
        },
        Decoding::Offloaded { frames, task } => {
            drop(frames);
            task.await
                .map_err(|e| Error::internal(format!("decoder task failed: {e}")))?
                .map_err(decode_error)
        }
    };
    if result.is_err() {
        discard_body(&mut body, limit.saturating_sub(received)).await;
    }
    result
}

/// Reads and drops the rest of the body, up to `budget` bytes (what the body
/// limit still allows), before an error is answered. A client that sends its
/// whole body before reading the answer (most do) then gets the error rather
/// than a broken pipe, and the connection stays usable. It costs no more
/// than accepting the body would have: the bytes are read, not decoded.
pub(crate) async fn discard_body(body: &mut Incoming, budget: u64) {
    let mut left = budget;
    while let Some(Ok(frame)) = body.frame().await {
        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
        if n >= left {
            return;
        }
        left -= n;
    }
}
