//! Wire codecs: request bodies to [`InferRequest`]s and [`InferResponse`]s
//! to bodies.
//!
//! [`InferRequest`]: wirespeed_core::InferRequest
//! [`InferResponse`]: wirespeed_core::InferResponse

mod v2_json;

pub use v2_json::{decode_infer_request, encode_infer_response};
