//! `ModelStreamInferResponse`, the one message written by hand: the
//! answers of a `ModelStreamInfer` stream, which two servers spell
//! differently on the same RPC. Triton wraps each answer
//! (`error_message`, `infer_response`), as tritonclient reads it; MLServer
//! sends each `ModelInferResponse` itself, as its stream clients read it.
//! The generated code of prost cannot send one type as either, so this
//! message encodes itself as the wrapper, or, `plain`, as the infer
//! response it holds; it always decodes as the wrapper (what a client of
//! Triton's reads).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use crate::inference::ModelInferResponse;

/// One answer of a `ModelStreamInfer` stream.
#[derive(Clone, PartialEq, Default, Debug)]
pub struct ModelStreamInferResponse {
    /// Set when the request failed; then `infer_response` is absent (but
    /// for its id).
    pub error_message: String,
    /// The answer.
    pub infer_response: Option<ModelInferResponse>,
    /// Sent as MLServer sends a stream's answers: the infer response
    /// itself, unwrapped (never on the wire; an error is not sent this
    /// way, it ends the stream).
    pub plain: bool,
}

impl prost::Message for ModelStreamInferResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.plain {
            if let Some(response) = &self.infer_response {
                response.encode_raw(buf);
            }
            return;
        }
        if !self.error_message.is_empty() {
            encoding::string::encode(1, &self.error_message, buf);
        }
        if let Some(response) = &self.infer_response {
            encoding::message::encode(2, response, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.error_message, buf, ctx),
            2 => encoding::message::merge(
                wire_type,
                self.infer_response.get_or_insert_with(Default::default),
                buf,
                ctx,
            ),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        if self.plain {
            return self
                .infer_response
                .as_ref()
                .map_or(0, prost::Message::encoded_len);
        }
        let error = if self.error_message.is_empty() {
            0
        } else {
            encoding::string::encoded_len(1, &self.error_message)
        };
        error
            + self
                .infer_response
                .as_ref()
                .map_or(0, |r| encoding::message::encoded_len(2, r))
    }

    fn clear(&mut self) {
        *self = ModelStreamInferResponse::default();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn answer() -> ModelInferResponse {
        ModelInferResponse {
            model_name: "text-model".into(),
            id: "7".into(),
            raw_output_contents: vec![vec![5, 0, 0, 0, b'h', b'e', b'l', b'l', b'o'].into()],
            ..Default::default()
        }
    }

    #[test]
    fn wrapped_it_is_tritons_message_and_plain_the_answer_itself() {
        let wrapped = ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(answer()),
            plain: false,
        };
        let bytes = wrapped.encode_to_vec();
        assert_eq!(bytes.len(), wrapped.encoded_len());
        let read = ModelStreamInferResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(read, wrapped);
        let failed = ModelStreamInferResponse {
            error_message: "bad".into(),
            ..wrapped.clone()
        };
        assert_eq!(
            ModelStreamInferResponse::decode(failed.encode_to_vec().as_slice()).unwrap(),
            failed
        );
        let plain = ModelStreamInferResponse {
            plain: true,
            ..wrapped
        };
        let bytes = plain.encode_to_vec();
        assert_eq!(bytes, answer().encode_to_vec());
        assert_eq!(bytes.len(), plain.encoded_len());
        assert_eq!(
            ModelInferResponse::decode(bytes.as_slice()).unwrap(),
            answer()
        );
    }
}
