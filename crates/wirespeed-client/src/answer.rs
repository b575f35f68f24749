//! Reading an infer answer as it arrives: the JSON (all of the body, or the
//! first `Inference-Header-Content-Length` bytes of it) goes through the
//! response decoder chunk by chunk; the raw bytes after it fill the binary
//! outputs in order, straight from the socket's buffer.

use wirespeed_core::raw::RawFiller;
use wirespeed_core::{element_count, BinaryInput, InferResponse, RequestLimits};
use wirespeed_json::{DecodeOptions, ResponseDecoder};

use crate::ClientError;

/// A decoded infer answer: every output's data is in its tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The response.
    pub response: InferResponse,
    /// The outputs that came as raw bytes (by index in `response.outputs`).
    pub binary_outputs: Vec<usize>,
    /// The answer's JSON as the server wrote it (the header of a binary
    /// answer), for callers that want every field as sent.
    pub json: Vec<u8>,
}

/// Decodes a whole infer answer's body, whose JSON is its first
/// `header_length` bytes (Triton's binary extension) or all of it: for
/// callers that did the HTTP themselves.
pub fn decode_answer(body: &[u8], header_length: Option<u64>) -> Result<Answer, ClientError> {
    let mut reader = AnswerReader::new(Some(body.len() as u64), header_length, body.len() as u64);
    reader.feed(body)?;
    reader.finish()
}

/// Takes an infer answer's body chunk by chunk.
pub(crate) struct AnswerReader {
    /// JSON bytes still to come; None: all of the body.
    json_left: Option<u64>,
    /// The body's bytes after the JSON, when the body's length is known.
    after_json: Option<u64>,
    /// The largest body accepted.
    max_body: u64,
    /// The JSON so far.
    json: Vec<u8>,
    decoder: Option<ResponseDecoder>,
    response: Option<InferResponse>,
    binaries: Vec<BinaryInput>,
    /// The binary output being filled, by index in `binaries`.
    next: usize,
    filler: Option<RawFiller>,
}

impl AnswerReader {
    /// A reader of a body of `body_len` bytes (when known) whose JSON is
    /// its first `header_length` bytes (or all of it).
    pub(crate) fn new(body_len: Option<u64>, header_length: Option<u64>, max_body: u64) -> Self {
        let json_len = header_length.or(body_len);
        let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
        let options = DecodeOptions {
            limits: RequestLimits {
                max_elements: limit,
                max_tensor_bytes: limit.saturating_mul(8),
                max_string_bytes: limit,
                max_inputs: 1 << 20,
                ..RequestLimits::default()
            },
            strict: false,
            pool: None,
            bytes_length_dimension: false,
        };
        let mut decoder = ResponseDecoder::new(options);
        if let Some(len) = json_len {
            decoder = decoder.with_body_len(len);
        }
        let reserve = json_len.map_or(0, |n| usize::try_from(n).unwrap_or(0).min(1 << 20));
        AnswerReader {
            json_left: json_len,
            after_json: body_len
                .zip(header_length)
                .map(|(b, h)| b.saturating_sub(h)),
            max_body,
            json: Vec::with_capacity(reserve),
            decoder: Some(decoder),
            response: None,
            binaries: Vec::new(),
            next: 0,
            filler: None,
        }
    }

    pub(crate) fn feed(&mut self, mut chunk: &[u8]) -> Result<(), ClientError> {
        if let Some(decoder) = self.decoder.as_mut() {
            let n = match self.json_left {
                Some(left) => usize::try_from(left).unwrap_or(usize::MAX).min(chunk.len()),
                None => chunk.len(),
            };
            decoder.feed(&chunk[..n]).map_err(answer_error)?;
            self.json.extend_from_slice(&chunk[..n]);
            chunk = &chunk[n..];
            if let Some(left) = self.json_left.as_mut() {
                *left -= n as u64;
                if *left == 0 {
                    self.end_json()?;
                }
            }
        }
        while !chunk.is_empty() {
            let Some(filler) = self.filler.as_mut() else {
                return Err(ClientError::Protocol(format!(
                    "the answer has {} bytes after the data its outputs' binary_data_size \
                     values account for",
                    chunk.len()
                )));
            };
            let n = filler.remaining().min(chunk.len());
            filler
                .push(&chunk[..n])
                .map_err(|e| ClientError::Protocol(format!("binary output: {}", raw_message(e))))?;
            chunk = &chunk[n..];
            if filler.remaining() == 0 {
                self.finish_output()?;
            }
        }
        Ok(())
    }

    fn end_json(&mut self) -> Result<(), ClientError> {
        let decoder = self.decoder.take().expect("the JSON ends once");
        let decoded = decoder.finish().map_err(answer_error)?;
        // Checked before any output is allocated: sizes the body cannot
        // hold are refused, not reserved.
        let declared = decoded
            .binary_outputs
            .iter()
            .try_fold(0u64, |sum, b| sum.checked_add(b.size as u64));
        if declared.is_none_or(|d| d > self.max_body) {
            return Err(ClientError::Protocol(format!(
                "the answer's binary outputs declare more than the client's limit of {} bytes",
                self.max_body
            )));
        }
        if let Some(after) = self.after_json {
            if declared != Some(after) {
                return Err(ClientError::Protocol(format!(
                    "the answer's binary outputs declare {} bytes, but {after} follow its JSON",
                    declared.map_or("more than 2^64".to_owned(), |d| d.to_string())
                )));
            }
        }
        self.response = Some(decoded.response);
        self.binaries = decoded.binary_outputs;
        self.start_output()
    }

    /// Starts filling the next binary output, skipping empty ones.
    fn start_output(&mut self) -> Result<(), ClientError> {
        while let Some(binary) = self.binaries.get(self.next) {
            let response = self.response.as_ref().expect("decoded");
            let tensor = &response.outputs[binary.input];
            let count = element_count(&tensor.shape).unwrap_or(usize::MAX);
            let filler = RawFiller::new(tensor.datatype(), count, binary.size, binary.size)
                .map_err(|e| {
                    ClientError::Protocol(format!("output '{}': {}", tensor.name, raw_message(e)))
                })?;
            self.filler = Some(filler);
            if binary.size > 0 {
                return Ok(());
            }
            self.finish_output()?;
        }
        Ok(())
    }

    fn finish_output(&mut self) -> Result<(), ClientError> {
        let filler = self.filler.take().expect("an output is being filled");
        let index = self.binaries[self.next].input;
        let response = self.response.as_mut().expect("decoded");
        let tensor = &mut response.outputs[index];
        tensor.data = filler.finish().map_err(|e| {
            ClientError::Protocol(format!("output '{}': {}", tensor.name, raw_message(e)))
        })?;
        self.next += 1;
        self.start_output()
    }

    /// The answer, once the body has ended.
    pub(crate) fn finish(mut self) -> Result<Answer, ClientError> {
        if self.decoder.is_some() {
            if let Some(left) = self.json_left.filter(|&left| left > 0) {
                return Err(ClientError::Protocol(format!(
                    "the answer ended {left} bytes before the end of its JSON"
                )));
            }
            self.end_json()?;
        }
        if let Some(binary) = self.binaries.get(self.next) {
            let response = self.response.as_ref().expect("decoded");
            return Err(ClientError::Protocol(format!(
                "the answer ended inside the {} bytes of binary data of output '{}'",
                binary.size, response.outputs[binary.input].name
            )));
        }
        Ok(Answer {
            response: self.response.expect("decoded"),
            binary_outputs: self.binaries.iter().map(|b| b.input).collect(),
            json: self.json,
        })
    }
}

fn answer_error(e: wirespeed_json::DecodeError) -> ClientError {
    ClientError::Protocol(format!("the infer answer is not a V2 infer response: {e}"))
}

/// What is wrong with raw bytes, without naming an input: the caller
/// names the output.
pub(crate) fn raw_message(e: wirespeed_core::raw::RawError) -> String {
    match e {
        wirespeed_core::raw::RawError::Invalid(m) => m,
        wirespeed_core::raw::RawError::Limit(e) => e.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_core::TensorData;

    fn read(body: &[u8], header: Option<u64>, chunk: usize) -> Result<Answer, ClientError> {
        read_of(body, Some(body.len() as u64), header, chunk)
    }

    /// `body` fed whole, where the answer's head said `length`.
    fn read_of(
        body: &[u8],
        length: Option<u64>,
        header: Option<u64>,
        chunk: usize,
    ) -> Result<Answer, ClientError> {
        let mut reader = AnswerReader::new(length, header, 1 << 30);
        for part in body.chunks(chunk) {
            reader.feed(part)?;
        }
        reader.finish()
    }

    #[test]
    fn binary_outputs_are_filled_at_every_split() {
        let json = br#"{"model_name":"m","outputs":[
            {"name":"a","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},
            {"name":"e","datatype":"INT8","shape":[0],"parameters":{"binary_data_size":0}},
            {"name":"j","datatype":"INT32","shape":[1],"data":[5]},
            {"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]}"#;
        let mut body = json.to_vec();
        body.extend(1.5f32.to_le_bytes());
        body.extend((-2.0f32).to_le_bytes());
        body.extend(3u32.to_le_bytes());
        body.extend(b"abc");
        body.extend(0u32.to_le_bytes());
        for chunk in 1..body.len() {
            let answer = read(&body, Some(json.len() as u64), chunk).unwrap();
            let out = &answer.response.outputs;
            assert_eq!(out[0].data, TensorData::Fp32(vec![1.5, -2.0]));
            assert_eq!(out[1].data, TensorData::Int8(vec![]));
            assert_eq!(out[2].data, TensorData::Int32(vec![5]));
            assert_eq!(
                out[3].data,
                TensorData::Bytes(vec![b"abc".to_vec(), vec![]])
            );
            assert_eq!(answer.binary_outputs, [0, 1, 3]);
        }
        // The connection ends early: the last output is cut.
        let header = Some(json.len() as u64);
        let cut = &body[..body.len() - 1];
        let err = read_of(cut, Some(body.len() as u64), header, 9).unwrap_err();
        assert!(err.to_string().contains("output 's'"), "{err}");
        // No length (chunked): one byte more than declared.
        let mut extra = body.clone();
        extra.push(0);
        let err = read_of(&extra, None, header, 9).unwrap_err();
        assert!(err.to_string().contains("1 bytes after"), "{err}");
        // A length that disagrees with the declared sizes.
        let err = read(&extra, header, 9).unwrap_err();
        assert!(
            err.to_string().contains("declare 19 bytes, but 20"),
            "{err}"
        );
    }
}
