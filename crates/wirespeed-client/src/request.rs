//! An infer request as the client writes it: the JSON header, with each
//! input's data in it or after it as raw bytes (Triton's binary tensor data
//! extension), input by input as the caller chose.

use std::sync::Arc;

use wirespeed_core::{DataType, ParameterValue, Parameters, TensorData};
use wirespeed_json::{encode_parameters, encode_string, encode_tensor_data};

/// Where an input's data goes.
#[derive(Debug, Clone, PartialEq)]
pub enum InputData {
    /// In the JSON, as `data`.
    Json(TensorData),
    /// After the JSON, as these raw bytes (`binary_data_size`); over gRPC,
    /// as `raw_input_contents`, sent from this buffer.
    Raw(bytes::Bytes),
    /// In a shared-memory region the server has registered.
    Shared {
        /// The region's name.
        region: String,
        /// Bytes the tensor takes.
        byte_size: usize,
        /// Where in the region it starts.
        offset: usize,
    },
}

/// One input of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct InferInput {
    /// The model input's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its datatype.
    pub datatype: DataType,
    /// Its data.
    pub data: InputData,
    /// Its own parameters, besides those the data's placement writes.
    pub parameters: Parameters,
}

impl InferInput {
    /// Its parameters as sent, with those its data's placement writes:
    /// `binary_data_size` (over HTTP; `binary` says whether raw bytes are
    /// written after the JSON) or the shared-memory ones.
    pub(crate) fn wire_parameters(&self, binary: bool) -> Parameters {
        let mut parameters = self.parameters.clone();
        match &self.data {
            InputData::Json(_) => {}
            InputData::Raw(bytes) => {
                if binary {
                    parameters.push(("binary_data_size".into(), int(bytes.len())));
                }
            }
            InputData::Shared {
                region,
                byte_size,
                offset,
            } => parameters.extend(shared_parameters(region, *byte_size, *offset)),
        }
        parameters
    }

    /// An input whose data is sent in the JSON.
    pub fn json(name: impl Into<String>, shape: Vec<usize>, data: TensorData) -> InferInput {
        InferInput {
            name: name.into(),
            shape,
            datatype: data.datatype(),
            data: InputData::Json(data),
            parameters: Vec::new(),
        }
    }

    /// An input whose data is sent as raw bytes after the JSON: the
    /// tensor's own buffer where its memory is its raw form.
    pub fn binary(name: impl Into<String>, shape: Vec<usize>, data: TensorData) -> InferInput {
        InferInput {
            name: name.into(),
            shape,
            datatype: data.datatype(),
            data: InputData::Raw(wirespeed_core::raw::into_raw(data)),
            parameters: Vec::new(),
        }
    }
}

/// An output the request asks for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestedOutput {
    /// The output's name.
    pub name: String,
    /// Asks for its data as raw bytes after the JSON.
    pub binary: bool,
    /// Asks for the top classes instead (Triton's classification extension).
    pub class_count: u32,
    /// Asks for it in a registered shared-memory region: name, size, offset.
    pub shared: Option<(String, usize, usize)>,
}

impl RequestedOutput {
    /// Its parameters as sent: `classification`, and where its data goes
    /// (a shared-memory region, or over HTTP `binary_data` when `http`).
    pub(crate) fn wire_parameters(&self, http: bool) -> Parameters {
        let mut parameters = Vec::new();
        if self.class_count > 0 {
            parameters.push(("classification".into(), int(self.class_count as usize)));
        }
        if let Some((region, size, offset)) = &self.shared {
            parameters.extend(shared_parameters(region, *size, *offset));
        } else if http && self.binary {
            parameters.push(("binary_data".into(), ParameterValue::Bool(true)));
        }
        parameters
    }
}

/// Triton's parameters of a tensor in a registered shared-memory region.
fn shared_parameters(region: &str, byte_size: usize, offset: usize) -> Parameters {
    let mut parameters = vec![
        (
            "shared_memory_region".into(),
            ParameterValue::String(region.to_owned()),
        ),
        ("shared_memory_byte_size".into(), int(byte_size)),
    ];
    if offset > 0 {
        parameters.push(("shared_memory_offset".into(), int(offset)));
    }
    parameters
}

/// An infer request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InferRequest {
    /// The request's id, echoed in the answer.
    pub id: Option<String>,
    /// Its inputs, shared so that one input can be sent by many requests.
    pub inputs: Vec<Arc<InferInput>>,
    /// The outputs asked for; none asks for all.
    pub outputs: Vec<RequestedOutput>,
    /// Request-level parameters.
    pub parameters: Parameters,
}

impl InferRequest {
    /// A request of `inputs` asking for every output.
    pub fn new(inputs: Vec<InferInput>) -> InferRequest {
        InferRequest {
            inputs: inputs.into_iter().map(Arc::new).collect(),
            ..InferRequest::default()
        }
    }

    /// Appends the JSON header to `out`; returns whether raw bytes follow it.
    pub(crate) fn write_header(&self, out: &mut Vec<u8>) -> bool {
        let mut ints = itoa::Buffer::new();
        let mut raw = false;
        out.push(b'{');
        if let Some(id) = &self.id {
            out.extend_from_slice(b"\"id\":");
            encode_string(id, out);
            out.push(b',');
        }
        out.extend_from_slice(b"\"inputs\":[");
        for (i, input) in self.inputs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            encode_string(&input.name, out);
            out.extend_from_slice(b",\"shape\":[");
            for (k, d) in input.shape.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(ints.format(*d).as_bytes());
            }
            out.extend_from_slice(b"],\"datatype\":\"");
            out.extend_from_slice(input.datatype.as_str().as_bytes());
            out.push(b'"');
            raw |= matches!(input.data, InputData::Raw(_));
            let parameters = input.wire_parameters(true);
            encode_parameters(&parameters, out);
            if let InputData::Json(data) = &input.data {
                out.extend_from_slice(b",\"data\":[");
                encode_tensor_data(data, out);
                out.push(b']');
            }
            out.push(b'}');
        }
        out.push(b']');
        if !self.outputs.is_empty() {
            out.extend_from_slice(b",\"outputs\":[");
            for (i, output) in self.outputs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"name\":");
                encode_string(&output.name, out);
                let parameters = output.wire_parameters(true);
                encode_parameters(&parameters, out);
                out.push(b'}');
            }
            out.push(b']');
        }
        encode_parameters(&self.parameters, out);
        out.push(b'}');
        raw
    }

    /// The raw bytes that follow the header, in order.
    pub(crate) fn raw_parts(&self) -> impl Iterator<Item = &[u8]> {
        self.inputs.iter().filter_map(|i| match &i.data {
            InputData::Raw(bytes) => Some(&bytes[..]),
            _ => None,
        })
    }
}

fn int(n: usize) -> ParameterValue {
    ParameterValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_the_protocol_json() {
        let request = InferRequest {
            id: Some("7".into()),
            inputs: vec![
                Arc::new(InferInput::json(
                    "a",
                    vec![2],
                    TensorData::Fp32(vec![0.1, f32::NAN]),
                )),
                Arc::new(InferInput::binary(
                    "b",
                    vec![1, 2],
                    TensorData::Int64(vec![1, -2]),
                )),
            ],
            outputs: vec![RequestedOutput {
                name: "y".into(),
                binary: true,
                ..Default::default()
            }],
            parameters: vec![("priority".into(), ParameterValue::Int(1))],
        };
        let mut out = Vec::new();
        assert!(request.write_header(&mut out));
        let json: serde_json::Value =
            serde_json::from_str(&String::from_utf8(out).unwrap().replace("NaN", "null")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": "7",
                "inputs": [
                    {"name": "a", "shape": [2], "datatype": "FP32", "data": [0.1, null]},
                    {"name": "b", "shape": [1, 2], "datatype": "INT64",
                     "parameters": {"binary_data_size": 16}},
                ],
                "outputs": [{"name": "y", "parameters": {"binary_data": true}}],
                "parameters": {"priority": 1},
            })
        );
        let raw: Vec<u8> = request.raw_parts().flatten().copied().collect();
        assert_eq!(
            raw,
            [1i64, -2]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }
}
