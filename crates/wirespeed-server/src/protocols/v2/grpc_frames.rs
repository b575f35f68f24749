//! `ModelInfer` read from its HTTP/2 frames and answered in them, without
//! tonic's message buffers.
//!
//! tonic gathers a call's message into one contiguous buffer before it
//! decodes it, and encodes its answer into another before it sends it: for
//! a 1 MB tensor, two copies of a megabyte on the connection's I/O thread,
//! besides the one into the typed tensor. Here the message is kept as the
//! frames it arrived in (a [`Pieces`] buffer); prost decodes every field
//! from them but `raw_input_contents` (field 7), whose entries are kept as
//! slices of the frames and copied once, into the typed tensor
//! (`convert.rs`). The answer is encoded without `raw_output_contents`
//! (field 6, the message's last), and each raw output goes out after it as
//! its own body frame, the tensor's bytes as they are (`into_raw`). The
//! bytes on the wire are those prost would write.
//!
//! Only uncompressed calls come here (`takes`); compressed ones, and every
//! other RPC, go through tonic. What tonic answers on the way (a message
//! over the limit, a compressed flag without `grpc-encoding`, a message
//! cut short or that does not decode) is answered here with tonic's
//! codes and words, so a client cannot tell the two paths apart; the
//! codes are Triton's too but for a compressed flag with no
//! `grpc-encoding`, which Triton reads as uncompressed and gRPC's spec
//! says MUST fail (`tests/test_triton_peer_grpc_framing.py`).

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::encoding::{self, DecodeContext, WireType};
use prost::Message;
use tonic::Status;
use wirespeed_proto::inference as pb;

use super::convert::Received;
use crate::protocols::Front;

/// The RPC read here.
const PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// Raw outputs below this are copied into the frame before them rather
/// than sent as frames of their own.
const OWN_FRAME: usize = 16 * 1024;

/// Whether `request` is a `ModelInfer` call this module reads: uncompressed
/// gRPC over POST.
pub(crate) fn takes<B>(request: &hyper::Request<B>) -> bool {
    let headers = request.headers();
    request.uri().path() == PATH
        && request.method() == hyper::Method::POST
        && headers.get(hyper::header::CONTENT_TYPE).is_some_and(|t| {
            matches!(
                t.as_bytes(),
                b"application/grpc" | b"application/grpc+proto"
            )
        })
        && headers
            .get("grpc-encoding")
            .is_none_or(|coding| coding.as_bytes() == b"identity")
}

/// Answers one `ModelInfer` call that [`takes`] accepted.
pub(crate) async fn model_infer(
    front: &Front,
    request: hyper::Request<wirespeed_http::RequestBody>,
) -> hyper::Response<tonic::body::Body> {
    let (parts, body) = request.into_parts();
    let (received, trailers) = match read(body, front.limits.max_grpc_message_bytes).await {
        Ok(read) => read,
        Err(status) => return status.into_http(),
    };
    let mut headers = parts.headers;
    headers.extend(trailers.unwrap_or_default());
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    match super::grpc_infer::model_infer(front, received, metadata).await {
        Ok(response) => answer(response),
        Err(status) => status.into_http(),
    }
}

/// Bytes that arrived in pieces: each piece one frame's data, or what is
/// left of it. Taking a run of bytes that lies within one piece
/// (`copy_to_bytes`) slices it; only a run across pieces is copied.
#[derive(Default)]
pub(crate) struct Pieces {
    pieces: VecDeque<Bytes>,
    remaining: usize,
}

impl Pieces {
    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.remaining += piece.len();
            self.pieces.push_back(piece);
        }
    }

    /// The first `len` bytes, as they lie, and the rest kept.
    fn split_to(&mut self, mut len: usize) -> Pieces {
        let mut front = Pieces::default();
        while len > 0 {
            let piece = self.pieces.front_mut().expect("len is at most remaining");
            let taken = if piece.len() <= len {
                self.pieces.pop_front().expect("a front piece")
            } else {
                piece.split_to(len)
            };
            len -= taken.len();
            self.remaining -= taken.len();
            front.push(taken);
        }
        front
    }
}

impl Buf for Pieces {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.pieces.front().map_or(&[], |piece| &piece[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end");
        self.remaining -= cnt;
        while cnt > 0 {
            let piece = self.pieces.front_mut().expect("cnt is at most remaining");
            if piece.len() <= cnt {
                cnt -= piece.len();
                self.pieces.pop_front();
            } else {
                piece.advance(cnt);
                cnt = 0;
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self.pieces.front_mut() {
            Some(piece) if piece.len() >= len => {
                let taken = piece.split_to(len);
                if piece.is_empty() {
                    self.pieces.pop_front();
                }
                self.remaining -= len;
                taken
            }
            _ => {
                assert!(len <= self.remaining, "copy_to_bytes past the end");
                let mut joined = BytesMut::with_capacity(len);
                joined.put(self.take(len));
                joined.freeze()
            }
        }
    }
}

/// Reads the call's message from `body`: a 5-byte prefix (no
/// compression; at most `limit` bytes), then that many bytes. The body is
/// then read to its end, and what follows the message is dropped as it
/// arrives, as Triton does (a second message, whole or cut short, is not
/// read; tested against Triton 2.51); trailers, if any, are kept for the
/// metadata, as tonic keeps them.
async fn read(
    mut body: wirespeed_http::RequestBody,
    limit: usize,
) -> Result<(Received, Option<hyper::HeaderMap>), Status> {
    let mut pending = Pieces::default();
    let mut length = None;
    let mut message = None;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Status::from_error(Box::new(e)))?;
        match frame.into_data() {
            Ok(data) if message.is_none() => {
                pending.push(data);
                message = whole_message(&mut pending, &mut length, limit)?;
            }
            Ok(_) => {}
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    match message {
        Some(received) => Ok((received, trailers)),
        None if length.is_none() && pending.remaining() == 0 => {
            Err(Status::internal("Missing request message."))
        }
        None => Err(Status::internal("Unexpected EOF decoding stream.")),
    }
}

/// The message, decoded, once its prefix and all its bytes are in
/// `pending`; the bytes after it are dropped.
fn whole_message(
    pending: &mut Pieces,
    length: &mut Option<usize>,
    limit: usize,
) -> Result<Option<Received>, Status> {
    if length.is_none() && pending.remaining() >= 5 {
        *length = Some(prefix(pending, limit)?);
    }
    match *length {
        Some(whole) if pending.remaining() >= whole => {
            let message = decode(pending.split_to(whole))?;
            *pending = Pieces::default();
            Ok(Some(message))
        }
        _ => Ok(None),
    }
}

/// The message's length, from its prefix, with tonic's answers to a
/// compressed flag (none was announced: only uncompressed calls come here)
/// and to a message over the limit (RESOURCE_EXHAUSTED, as gRPC's table
/// and Triton say).
fn prefix(received: &mut Pieces, limit: usize) -> Result<usize, Status> {
    match received.get_u8() {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was \
                 specified",
            ))
        }
        flag => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {flag} (valid \
                 flags are 0 and 1), while sending request"
            )))
        }
    }
    let length = received.get_u32() as usize;
    if length > limit {
        return Err(Status::resource_exhausted(format!(
            "Error, decoded message length too large: found {length} bytes, the limit is: \
             {limit} bytes"
        )));
    }
    Ok(length)
}

/// The message, decoded from its pieces.
fn decode(mut message: Pieces) -> Result<Received, Status> {
    let mut received = FromPieces {
        received: Received {
            message: pb::ModelInferRequest::default(),
            raw: Vec::new(),
        },
    };
    received
        .merge(&mut message)
        .map_err(|e| Status::internal(e.to_string()))?;
    Ok(received.received)
}

/// `ModelInferRequest` as prost decodes it, but for `raw_input_contents`,
/// whose entries are kept as the slices they lie in.
struct FromPieces {
    received: Received,
}

impl std::fmt::Debug for FromPieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromPieces").finish_non_exhaustive()
    }
}

impl Message for FromPieces {
    fn encode_raw(&self, _: &mut impl BufMut) {
        unreachable!("a received request is never encoded")
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag != 7 {
            return self.received.message.merge_field(tag, wire_type, buf, ctx);
        }
        encoding::check_wire_type(WireType::LengthDelimited, wire_type)?;
        let len = encoding::decode_varint(buf)?;
        let Some(mut len) = usize::try_from(len)
            .ok()
            .filter(|&len| len <= buf.remaining())
        else {
            // prost's own words for a field longer than the bytes left.
            #[allow(deprecated)]
            return Err(prost::DecodeError::new("buffer underflow"));
        };
        let mut entry = Vec::new();
        while len > 0 {
            let piece = buf.chunk().len().min(len);
            entry.push(buf.copy_to_bytes(piece));
            len -= piece;
        }
        self.received.raw.push(entry);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.received.encoded_len()
    }

    fn clear(&mut self) {
        self.received.message.clear();
        self.received.raw.clear();
    }
}

/// The HTTP response of a successful call: the message with its raw
/// outputs as frames of their own, then `grpc-status: 0`.
fn answer(response: tonic::Response<pb::ModelInferResponse>) -> hyper::Response<tonic::body::Body> {
    let (metadata, mut message, extensions) = response.into_parts();
    let raw = std::mem::take(&mut message.raw_output_contents);
    let head_length = message.encoded_len();
    let length = head_length
        + raw
            .iter()
            .map(|entry| encoding::bytes::encoded_len(6, entry))
            .sum::<usize>();
    let Ok(length32) = u32::try_from(length) else {
        return Status::resource_exhausted(format!(
            "Error, encoded message length too large: found {length} bytes, the limit is: {} \
             bytes",
            u32::MAX
        ))
        .into_http();
    };
    let mut frames = Vec::with_capacity(1 + 2 * raw.len());
    let mut head = BytesMut::with_capacity(5 + head_length + 16 * raw.len());
    head.put_u8(0);
    head.put_u32(length32);
    message.encode_raw(&mut head);
    for entry in raw {
        encoding::encode_key(6, WireType::LengthDelimited, &mut head);
        encoding::encode_varint(entry.len() as u64, &mut head);
        if entry.len() < OWN_FRAME {
            head.put_slice(&entry);
        } else {
            frames.push(head.split().freeze());
            frames.push(entry);
        }
    }
    if !head.is_empty() {
        frames.push(head.freeze());
    }
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
    let body = wirespeed_http::Chunks::new(frames).with_trailers(trailers);
    let mut http = hyper::Response::new(tonic::body::Body::new(body));
    *http.headers_mut() = metadata.into_headers();
    http.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/grpc"),
    );
    *http.extensions_mut() = extensions;
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as tritonclient writes it, cut into pieces at every
    /// `every` bytes.
    fn pieces(bytes: &[u8], every: usize) -> Pieces {
        let mut pieces = Pieces::default();
        for chunk in bytes.chunks(every) {
            pieces.push(Bytes::copy_from_slice(chunk));
        }
        pieces
    }

    fn request() -> pb::ModelInferRequest {
        pb::ModelInferRequest {
            model_name: "m".into(),
            id: "7".into(),
            inputs: vec![
                pb::model_infer_request::InferInputTensor {
                    name: "a".into(),
                    datatype: "FP32".into(),
                    shape: vec![3],
                    ..Default::default()
                };
                2
            ],
            raw_input_contents: vec![
                Bytes::from((0u8..12).collect::<Vec<u8>>()),
                Bytes::from((100u8..112).collect::<Vec<u8>>()),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_message_in_any_pieces_decodes_as_prost_decodes_it_whole() {
        let sent = request();
        let bytes = sent.encode_to_vec();
        for every in [1, 2, 5, 13, bytes.len()] {
            let received = decode(pieces(&bytes, every)).expect("decodes");
            let mut whole = pb::ModelInferRequest::decode(&bytes[..]).expect("prost decodes");
            let raw = std::mem::take(&mut whole.raw_input_contents);
            assert_eq!(received.message, whole, "every {every}");
            let joined: Vec<Vec<u8>> = received.raw.iter().map(|p| p.concat()).collect();
            assert_eq!(joined, raw.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
            assert_eq!(received.encoded_len(), bytes.len());
        }
    }

    #[test]
    fn a_raw_entry_within_one_piece_is_a_slice_of_it() {
        let bytes = request().encode_to_vec();
        let whole = Bytes::from(bytes.clone());
        let mut one = Pieces::default();
        one.push(whole.clone());
        let received = decode(one).expect("decodes");
        let entry = &received.raw[0];
        assert_eq!(entry.len(), 1);
        let start = whole.as_ptr() as usize;
        let at = entry[0].as_ptr() as usize;
        assert!(
            at >= start && at < start + whole.len(),
            "the entry points into the frame"
        );
    }

    #[test]
    fn a_cut_or_overlong_entry_is_an_error_not_a_panic() {
        let bytes = request().encode_to_vec();
        for cut in 1..bytes.len() {
            // Whatever prost says of the same bytes, ours says too.
            let ours = decode(pieces(&bytes[..cut], 3)).map(|_| ());
            let prost = pb::ModelInferRequest::decode(&bytes[..cut]).map(|_| ());
            assert_eq!(ours.is_ok(), prost.is_ok(), "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn the_answer_is_the_bytes_prost_writes() {
        let message = pb::ModelInferResponse {
            model_name: "m".into(),
            outputs: vec![pb::model_infer_response::InferOutputTensor {
                name: "o".into(),
                datatype: "FP32".into(),
                shape: vec![2],
                ..Default::default()
            }],
            raw_output_contents: vec![
                Bytes::from(vec![1u8; 8]),
                Bytes::from(vec![2u8; OWN_FRAME + 3]),
                Bytes::from(vec![3u8; 5]),
            ],
            ..Default::default()
        };
        let expected = message.encode_to_vec();
        let http = answer(tonic::Response::new(message));
        assert_eq!(http.headers()["content-type"], "application/grpc");
        let body = http.into_body().collect().await.expect("a body");
        assert_eq!(body.trailers().expect("trailers")["grpc-status"], "0");
        let bytes = body.to_bytes();
        assert_eq!(bytes[0], 0);
        assert_eq!(
            u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize,
            expected.len()
        );
        assert_eq!(&bytes[5..], &expected[..]);
    }
}
