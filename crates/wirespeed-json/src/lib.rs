//! The incremental JSON <-> tensor codec of wirespeed.
//!
//! [`RequestDecoder`] decodes a V2 (Open Inference Protocol) JSON infer
//! request from byte chunks of any size, as they arrive, straight into typed
//! tensor buffers: no DOM, no copy of the body. Floats are converted from
//! decimal to their datatype exactly once, correctly rounded. Every error
//! carries a [`Category`], a byte offset and the input's name.
//!
//! ```
//! use wirespeed_core::TensorData;
//! use wirespeed_json::{DecodeOptions, RequestDecoder};
//!
//! let body = br#"{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [0.1, NaN]}]}"#;
//! let mut decoder = RequestDecoder::new(DecodeOptions::default());
//! for chunk in body.chunks(7) {
//!     decoder.feed(chunk).unwrap();
//! }
//! let request = decoder.finish().unwrap();
//! let TensorData::Fp32(x) = &request.inputs[0].data else { unreachable!() };
//! assert_eq!(x[0], 0.1f32);
//! assert!(x[1].is_nan());
//! ```
//!
//! The parser is written here rather than taken from a crate because none
//! does what this needs at once: push decoding of chunks split anywhere,
//! values landing in typed buffers chosen by sibling keys that may come
//! later, single rounding to f32/f16/bf16, and errors with offsets and
//! categories. fast-float2 converts every float the hot path cannot prove
//! exact; `number.rs` says why the common ones are converted by hand.
//!
//! [`ResponseDecoder`] decodes an infer response the same way, for clients.
//!
//! [`push::Tokenizer`] walks any JSON document the same way, handing each
//! token to a [`push::Sink`]: for formats other than tensors (the gRPC
//! transcoder's protobuf encoder).
//!
//! With a [`DecodeOptions::pool`], a run of numbers of
//! [`PARALLEL_MIN_BYTES`] or more within one chunk is decoded together with
//! the pool's threads, bit-identical to one thread.

mod builder;
mod decoder;
mod encode;
mod error;
mod number;
mod options;
mod parallel;
pub mod push;
mod response;
mod run;
mod string;

pub use decoder::{Format, RequestDecoder};
pub use encode::{
    encode_clipper_response, encode_infer_request, encode_infer_response,
    encode_infer_response_header, encode_parameters, encode_string, encode_tensor_data,
    encode_tensor_range, encode_tf_response, non_utf8_element,
};
pub use error::{Category, DecodeError};
pub use number::{f32_prefix, f64_prefix, number_to_f32, number_to_f64};
pub use options::DecodeOptions;
pub use parallel::MIN_REGION_BYTES as PARALLEL_MIN_BYTES;
pub use response::{DecodedResponse, ResponseDecoder};

/// Decodes a whole body at once.
pub fn decode_infer_request(
    body: &[u8],
    options: &DecodeOptions,
) -> Result<wirespeed_core::InferRequest, DecodeError> {
    let mut decoder = RequestDecoder::new(options.clone()).with_body_len(body.len() as u64);
    decoder.feed(body)?;
    decoder.finish()
}
