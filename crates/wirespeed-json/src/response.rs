//! The push decoder for V2 infer responses: what a client reads back.
//!
//! A response's `outputs` are tensor objects like a request's `inputs`, so
//! the request decoder's state machine decodes them, in a mode where the
//! root object's keys are a response's. Chunks are decoded as they arrive,
//! so a large response is decoded while it downloads.

use wirespeed_core::{BinaryInput, InferResponse};

use crate::{DecodeError, DecodeOptions, RequestDecoder};

/// Decodes one V2 JSON infer response (or the JSON header of one in
/// Triton's binary tensor data extension) from byte chunks.
///
/// ```
/// use wirespeed_core::TensorData;
/// use wirespeed_json::{DecodeOptions, ResponseDecoder};
///
/// let body = br#"{"model_name":"m","model_version":"1","outputs":
///     [{"name":"y","datatype":"FP64","shape":[2],"data":[0.5,-1e300]}]}"#;
/// let mut decoder = ResponseDecoder::new(DecodeOptions::default());
/// for chunk in body.chunks(5) {
///     decoder.feed(chunk).unwrap();
/// }
/// let decoded = decoder.finish().unwrap();
/// assert_eq!(decoded.response.model_name, "m");
/// assert_eq!(decoded.response.outputs[0].data, TensorData::Fp64(vec![0.5, -1e300]));
/// ```
pub struct ResponseDecoder {
    inner: RequestDecoder,
}

/// A decoded infer response.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedResponse {
    /// The response; outputs listed in `binary_outputs` are empty tensors
    /// until their raw bytes are read.
    pub response: InferResponse,
    /// Outputs whose data follows the JSON as raw bytes, in body order
    /// (their `binary_data_size` parameter).
    pub binary_outputs: Vec<BinaryInput>,
}

impl ResponseDecoder {
    /// A decoder for one response body, within `options`' limits.
    pub fn new(options: DecodeOptions) -> ResponseDecoder {
        ResponseDecoder {
            inner: RequestDecoder::for_response(options),
        }
    }

    /// Tells the decoder the JSON's length, so that outputs are allocated
    /// whole once their shape is known, never larger than the body allows.
    pub fn with_body_len(self, len: u64) -> ResponseDecoder {
        ResponseDecoder {
            inner: self.inner.with_body_len(len),
        }
    }

    /// Decodes the next chunk of the JSON.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        self.inner.feed(chunk)
    }

    /// Completes the response after the JSON's last chunk.
    pub fn finish(self) -> Result<DecodedResponse, DecodeError> {
        let (response, binary_outputs) = self.inner.finish_response()?;
        Ok(DecodedResponse {
            response,
            binary_outputs,
        })
    }
}
