//! The V2 JSON infer response, written straight from the output tensors
//! into the body: no intermediate value tree. Floats are printed shortest
//! round-trip (ryu). Non-finite ones are spelled so that every JSON parser
//! reads them: on V2, NaN as `null` (as KServe and MLServer write it, and
//! as wirespeed reads it) and the infinities as the strings `"Infinity"`
//! and `"-Infinity"` (protobuf's JSON spelling, which numpy, and so
//! tritonclient's and kserve's `as_numpy`, read as floats, as does the
//! decoder); TF Serving's REST API and Clipper keep the bare `NaN`,
//! `Infinity` and `-Infinity` tokens TF Serving documents and writes.

use wirespeed_core::{Dialect, InferResponse, ParameterValue, Parameters, Tensor, TensorData};

mod tf;
mod values;

pub use tf::{encode_clipper_response, encode_tf_response};
use values::{write_range, write_string, Style};

/// Appends the JSON of `response` to `out`.
pub fn encode_infer_response(response: &InferResponse, out: &mut Vec<u8>) {
    encode(response, &[], out);
}

/// Appends the JSON header of `response` for Triton's binary tensor data
/// extension: each output `i` with `binary[i]` set carries
/// `"parameters": {"binary_data_size": N}` instead of `data`. The caller
/// appends those outputs' raw bytes (`wirespeed_core::raw::write_raw`), in
/// order, after the header.
pub fn encode_infer_response_header(response: &InferResponse, binary: &[bool], out: &mut Vec<u8>) {
    encode(response, binary, out);
}

fn encode(response: &InferResponse, binary: &[bool], out: &mut Vec<u8>) {
    let estimate: usize = response
        .outputs
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            !binary.get(*i).copied().unwrap_or(false) && response.shared_output(*i).is_none()
        })
        .map(|(_, t)| 64 + t.name.len() + t.data.len() * estimated_width(&t.data))
        .sum();
    out.reserve(96 + response.model_name.len() + estimate);
    out.extend_from_slice(b"{\"model_name\":");
    write_string(out, response.model_name.as_bytes());
    // A model without versions (MLServer's, whose settings name none)
    // answers none; KServe writes null.
    let dialect = response.dialect;
    if !response.model_version.is_empty() {
        out.extend_from_slice(b",\"model_version\":");
        write_string(out, response.model_version.as_bytes());
    } else if dialect == Dialect::Kserve {
        out.extend_from_slice(b",\"model_version\":null");
    }
    if let Some(id) = &response.id {
        out.extend_from_slice(b",\"id\":");
        write_string(out, id.as_bytes());
    }
    // Empty parameters: left out (Triton), `{}` (MLServer) or null (KServe).
    let visible = |p: &Parameters| p.iter().any(|(k, _)| !k.starts_with('$'));
    match (visible(&response.parameters), dialect) {
        (true, _) => write_parameters(out, &response.parameters),
        (false, Dialect::Mlserver) => out.extend_from_slice(b",\"parameters\":{}"),
        (false, Dialect::Kserve) => out.extend_from_slice(b",\"parameters\":null"),
        (false, Dialect::Triton) => {}
    }
    out.extend_from_slice(b",\"outputs\":[");
    for (i, tensor) in response.outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        write_string(out, tensor.name.as_bytes());
        out.extend_from_slice(b",\"datatype\":\"");
        out.extend_from_slice(tensor.datatype().as_str().as_bytes());
        out.extend_from_slice(b"\",\"shape\":[");
        // The shape as an MLServer runtime wrote it, when it counts bytes.
        match (!tensor.parameters.is_empty())
            .then(|| wirespeed_core::written_shape(&tensor.parameters))
            .flatten()
        {
            Some(written) => write_shape(out, &written),
            None => write_shape(out, &tensor.shape),
        }
        out.push(b']');
        let mut ints = itoa::Buffer::new();
        // The output's own parameters (a content type), then where its
        // data went when not in `data`.
        let shared = response.shared_output(i);
        let binary = binary.get(i).copied().unwrap_or(false);
        let visible = visible(&tensor.parameters);
        if !visible && shared.is_none() && !binary {
            if dialect == Dialect::Kserve {
                out.extend_from_slice(b",\"parameters\":null");
            }
            out.extend_from_slice(b",\"data\":[");
            write_data(out, &tensor.data);
            out.extend_from_slice(b"]}");
            continue;
        }
        out.extend_from_slice(b",\"parameters\":{");
        let own = write_entries(out, &tensor.parameters);
        if let Some(shared) = shared {
            if own {
                out.push(b',');
            }
            out.extend_from_slice(b"\"shared_memory_region\":");
            write_string(out, shared.at.region.as_bytes());
            out.extend_from_slice(b",\"shared_memory_byte_size\":");
            out.extend_from_slice(ints.format(shared.written).as_bytes());
            if shared.at.offset > 0 {
                out.extend_from_slice(b",\"shared_memory_offset\":");
                out.extend_from_slice(ints.format(shared.at.offset).as_bytes());
            }
            out.extend_from_slice(b"}}");
            continue;
        }
        if binary {
            if own {
                out.push(b',');
            }
            let size = wirespeed_core::raw::raw_len(&tensor.data);
            out.extend_from_slice(b"\"binary_data_size\":");
            out.extend_from_slice(ints.format(size).as_bytes());
            out.extend_from_slice(b"}}");
            continue;
        }
        out.push(b'}');
        out.extend_from_slice(b",\"data\":[");
        write_data(out, &tensor.data);
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
}

/// Appends a V2 infer request for `inputs` asking for `outputs` with
/// `parameters`: the request wirespeed sends a server that speaks only the
/// REST protocol. With `binary`, in Triton's binary tensor data extension:
/// each input carries `binary_data_size` instead of `data` (the caller
/// appends their raw bytes, in order, after this header), and each output
/// asks for `binary_data`.
pub fn encode_infer_request(
    inputs: &[Tensor],
    outputs: &[&str],
    parameters: &Parameters,
    binary: bool,
    out: &mut Vec<u8>,
) {
    if !binary {
        let estimate: usize = inputs
            .iter()
            .map(|t| 64 + t.name.len() + t.data.len() * estimated_width(&t.data))
            .sum();
        out.reserve(estimate);
    }
    let mut ints = itoa::Buffer::new();
    out.extend_from_slice(b"{\"inputs\":[");
    for (i, tensor) in inputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        write_string(out, tensor.name.as_bytes());
        out.extend_from_slice(b",\"datatype\":\"");
        out.extend_from_slice(tensor.datatype().as_str().as_bytes());
        out.extend_from_slice(b"\",\"shape\":[");
        write_shape(out, &tensor.shape);
        if binary {
            let size = wirespeed_core::raw::raw_len(&tensor.data);
            out.extend_from_slice(b"],\"parameters\":{\"binary_data_size\":");
            out.extend_from_slice(ints.format(size).as_bytes());
            out.extend_from_slice(b"}}");
        } else {
            out.extend_from_slice(b"],\"data\":[");
            write_data(out, &tensor.data);
            out.extend_from_slice(b"]}");
        }
    }
    out.extend_from_slice(b"],\"outputs\":[");
    for (i, name) in outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        write_string(out, name.as_bytes());
        if binary {
            out.extend_from_slice(b",\"parameters\":{\"binary_data\":true}");
        }
        out.push(b'}');
    }
    out.push(b']');
    write_parameters(out, parameters);
    out.push(b'}');
}

/// Appends the elements of `data` as the inside of a V2 JSON `data` array:
/// comma-separated, floats shortest round-trip, NaN as `null` and the
/// infinities as `"Infinity"` and `"-Infinity"`, BYTES as strings (lossy
/// when not UTF-8: see [`non_utf8_element`]).
pub fn encode_tensor_data(data: &TensorData, out: &mut Vec<u8>) {
    write_data(out, data);
}

/// Appends elements `range` of `data` as [`encode_tensor_data`] appends
/// them all: a slice of a tensor (one row of a batch) written from the
/// tensor itself.
pub fn encode_tensor_range(data: &TensorData, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
    write_range(out, data, range, Style::V2);
}

/// Appends `text` as a JSON string.
pub fn encode_string(text: &str, out: &mut Vec<u8>) {
    write_string(out, text.as_bytes());
}

/// Appends `"parameters":{...}` after a comma, when there are any.
pub fn encode_parameters(parameters: &Parameters, out: &mut Vec<u8>) {
    write_parameters(out, parameters);
}

/// Writes `,"parameters":{...}` when there are any.
fn write_parameters(out: &mut Vec<u8>, parameters: &Parameters) {
    if parameters.is_empty() {
        return;
    }
    out.extend_from_slice(b",\"parameters\":{");
    write_entries(out, parameters);
    out.push(b'}');
}

/// Writes `parameters`' entries, comma-separated, but for the server's
/// own (`$` keys); whether it wrote any.
fn write_entries(out: &mut Vec<u8>, parameters: &Parameters) -> bool {
    let mut ints = itoa::Buffer::new();
    let mut any = false;
    for (key, value) in parameters.iter().filter(|(k, _)| !k.starts_with('$')) {
        if any {
            out.push(b',');
        }
        any = true;
        write_string(out, key.as_bytes());
        out.push(b':');
        match value {
            ParameterValue::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            ParameterValue::Int(n) => out.extend_from_slice(ints.format(*n).as_bytes()),
            ParameterValue::Float(x) if x.is_finite() => {
                out.extend_from_slice(ryu::Buffer::new().format_finite(*x).as_bytes())
            }
            ParameterValue::Float(_) => out.extend_from_slice(b"null"),
            ParameterValue::String(text) => write_string(out, text.as_bytes()),
        }
    }
    any
}

/// Writes a shape's dimensions, comma-separated.
fn write_shape(out: &mut Vec<u8>, shape: &[usize]) {
    let mut ints = itoa::Buffer::new();
    for (k, &d) in shape.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        out.extend_from_slice(ints.format(d).as_bytes());
    }
}

fn estimated_width(data: &TensorData) -> usize {
    match data {
        TensorData::Fp32(_) | TensorData::Fp16(_) | TensorData::Bf16(_) => 12,
        TensorData::Fp64(_) => 20,
        TensorData::Bool(_) => 6,
        TensorData::Bytes(_) => 16,
        _ => 8,
    }
}

fn write_data(out: &mut Vec<u8>, data: &TensorData) {
    write_range(out, data, 0..data.len(), Style::V2);
}

/// The first BYTES element of `data` that is not UTF-8, which a V2 JSON
/// string cannot carry: the caller refuses to answer it in JSON rather
/// than change the client's data.
pub fn non_utf8_element(data: &TensorData) -> Option<usize> {
    let TensorData::Bytes(strings) = data else {
        return None;
    };
    strings.iter().position(|s| std::str::from_utf8(s).is_err())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;
    use half::{bf16, f16};
    use wirespeed_core::Tensor;

    fn response(outputs: Vec<Tensor>) -> InferResponse {
        InferResponse {
            model_name: "m\"1".into(),
            model_version: "1".into(),
            id: Some("a\nb\u{1}".into()),
            parameters: Vec::new(),
            outputs,
            shared_outputs: Vec::new(),
            dialect: Default::default(),
        }
    }

    #[test]
    fn tf_outputs_named_bytes_are_always_base64_as_tf_serving_writes_them() {
        let words = TensorData::Bytes(vec![b"hi".to_vec(), vec![0xff]]);
        let outputs = vec![
            Tensor {
                name: "text".into(),
                shape: vec![2],
                data: words.clone(),
                parameters: Vec::new(),
            },
            Tensor {
                name: "image_bytes".into(),
                shape: vec![2],
                data: words,
                parameters: Vec::new(),
            },
        ];
        let mut out = Vec::new();
        encode_tf_response(&outputs, Format::TfRows, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["predictions"],
            serde_json::json!([
                {"text": "hi", "image_bytes": {"b64": "aGk="}},
                {"text": {"b64": "/w=="}, "image_bytes": {"b64": "/w=="}},
            ])
        );
        // V2 keeps strings, replacing what is not UTF-8.
        let mut out = Vec::new();
        encode_tensor_data(&outputs[1].data, &mut out);
        assert_eq!(out, "\"hi\",\"\u{fffd}\"".as_bytes());
    }

    #[test]
    fn response_parameters_and_clipper_defaults_are_valid_json() {
        let mut r = response(vec![tensor("p", TensorData::Fp32(vec![0.5]))]);
        r.parameters = vec![
            ("default".into(), wirespeed_core::ParameterValue::Bool(true)),
            (
                "why".into(),
                wirespeed_core::ParameterValue::String("late \"x\"".into()),
            ),
        ];
        let mut out = Vec::new();
        encode_infer_response(&r, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["parameters"]["default"], true);
        assert_eq!(v["parameters"]["why"], "late \"x\"");
        assert_eq!(v["outputs"][0]["data"][0], 0.5);

        let out_tensor = Tensor {
            name: "p".into(),
            shape: vec![2],
            data: TensorData::Fp32(vec![0.5, 0.5]),
            parameters: Vec::new(),
        };
        let mut out = Vec::new();
        encode_clipper_response(
            &out_tensor,
            Format::ClipperBatch,
            7,
            Some("too late"),
            &mut out,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["batch_predictions"][1]["query_id"], 8);
        assert_eq!(v["batch_predictions"][1]["default"], true);
        assert_eq!(v["batch_predictions"][1]["default_explanation"], "too late");
        let mut out = Vec::new();
        encode_clipper_response(&out_tensor, Format::ClipperOne, 7, None, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["default"], false);
        assert!(v.get("default_explanation").is_none());
    }

    fn tensor(name: &str, data: TensorData) -> Tensor {
        Tensor {
            name: name.into(),
            shape: vec![data.len()],
            data,
            parameters: Vec::new(),
        }
    }

    #[test]
    fn outputs_answer_their_parameters_and_each_dialect_its_empty_fields() {
        use wirespeed_core::{Dialect, ParameterValue};
        let content_type = |t: &str| ("content_type".to_owned(), ParameterValue::String(t.into()));
        let mut text = tensor("text", TensorData::Bytes(vec![b"{}".to_vec()]));
        // An MLServer runtime's output: its content type, and its shape as
        // written (one element of 2 bytes, `[2]`), which is not a parameter.
        text.parameters = vec![
            content_type("str"),
            wirespeed_core::written_shape_parameter(&[2]),
        ];
        let mut numbers = tensor("numbers", TensorData::Fp32(vec![1.5]));
        numbers.parameters = vec![content_type("np")];
        let plain = tensor("plain", TensorData::Int32(vec![7]));
        let mut r = response(vec![text, numbers, plain]);
        let read = |r: &InferResponse, binary: &[bool]| {
            let mut out = Vec::new();
            encode_infer_response_header(r, binary, &mut out);
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        let v = read(&r, &[]);
        assert_eq!(
            v["outputs"][0]["parameters"],
            serde_json::json!({"content_type": "str"})
        );
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([2]));
        assert_eq!(v["outputs"][0]["data"], serde_json::json!(["{}"]));
        assert!(v["outputs"][2].get("parameters").is_none() && v.get("parameters").is_none());
        // Beside where the data went, binary or in shared memory.
        let v = read(&r, &[false, true, false]);
        assert_eq!(
            v["outputs"][1]["parameters"],
            serde_json::json!({"content_type": "np", "binary_data_size": 4})
        );
        // MLServer writes empty parameters as {}, KServe as null, and a
        // model without version as null.
        r.dialect = Dialect::Mlserver;
        assert_eq!(read(&r, &[])["parameters"], serde_json::json!({}));
        r.dialect = Dialect::Kserve;
        r.model_version.clear();
        let v = read(&r, &[]);
        assert!(v["parameters"].is_null() && v["outputs"][2]["parameters"].is_null());
        assert!(v
            .get("model_version")
            .is_some_and(serde_json::Value::is_null));
    }

    #[test]
    fn finite_outputs_are_json_that_serde_json_reads_back_exactly() {
        let f32s = vec![0.1f32, -1e-7, 3.4028235e38, 1.0, -0.0, 16777216.0];
        let f64s = vec![0.1f64, 1e300, -2.5e-300];
        let outputs = vec![
            tensor("f32", TensorData::Fp32(f32s.clone())),
            tensor("f64", TensorData::Fp64(f64s.clone())),
            tensor("i64", TensorData::Int64(vec![i64::MIN, 0, i64::MAX])),
            tensor("u8", TensorData::Uint8(vec![0, 255])),
            tensor("bool", TensorData::Bool(vec![true, false])),
            tensor(
                "bytes",
                TensorData::Bytes(vec![
                    b"q\"\\\x7f".to_vec(),
                    "é\u{2028}".as_bytes().to_vec(),
                    vec![0x1f],
                ]),
            ),
            tensor(
                "f16",
                TensorData::Fp16(vec![f16::from_f32(0.333), f16::MAX]),
            ),
            tensor("bf16", TensorData::Bf16(vec![bf16::from_f32(-1.5)])),
        ];
        let mut out = Vec::new();
        encode_infer_response(&response(outputs), &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model_name"], "m\"1");
        assert_eq!(v["id"], "a\nb\u{1}");
        let data = |i: usize| v["outputs"][i]["data"].clone();
        let back: Vec<f32> = serde_json::from_value(data(0)).unwrap();
        assert_eq!(
            back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            f32s.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(serde_json::from_value::<Vec<f64>>(data(1)).unwrap(), f64s);
        assert_eq!(
            serde_json::from_value::<Vec<i64>>(data(2)).unwrap(),
            vec![i64::MIN, 0, i64::MAX]
        );
        assert_eq!(data(4), serde_json::json!([true, false]));
        assert_eq!(
            serde_json::from_value::<Vec<String>>(data(5)).unwrap(),
            vec!["q\"\\\x7f", "é\u{2028}", "\u{1f}"]
        );
        assert_eq!(
            serde_json::from_value::<Vec<f32>>(data(6)).unwrap(),
            vec![f16::from_f32(0.333).to_f32(), 65504.0]
        );
        assert_eq!(v["outputs"][6]["datatype"], "FP16");
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([6]));
    }

    #[test]
    fn every_datatype_round_trips_through_the_decoder_bit_for_bit() {
        let outputs = vec![
            tensor(
                "f32",
                TensorData::Fp32(vec![
                    0.1,
                    f32::NAN,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    -0.0,
                    1e-45,
                    f32::MAX,
                ]),
            ),
            tensor(
                "f64",
                TensorData::Fp64(vec![0.1, -2.5e-308, 5e-324, f64::MAX, f64::NEG_INFINITY]),
            ),
            tensor(
                "f16",
                TensorData::Fp16(vec![
                    f16::from_bits(1),
                    f16::MAX,
                    f16::from_f32(0.1),
                    f16::NAN,
                ]),
            ),
            tensor(
                "bf16",
                TensorData::Bf16(vec![bf16::from_bits(1), bf16::MAX, bf16::from_f32(0.1)]),
            ),
            tensor("i8", TensorData::Int8(vec![i8::MIN, i8::MAX])),
            tensor("u64", TensorData::Uint64(vec![u64::MAX])),
            tensor(
                "bytes",
                TensorData::Bytes(vec![b"a\"\\\n\x01".to_vec(), "😀".as_bytes().to_vec()]),
            ),
            tensor("bool", TensorData::Bool(vec![false, true])),
        ];
        let mut out = Vec::new();
        encode_infer_response(&response(outputs.clone()), &mut out);
        // A response's outputs have the form of a request's inputs.
        let text = String::from_utf8(out)
            .unwrap()
            .replacen("\"outputs\"", "\"inputs\"", 1);
        let decoded =
            crate::decode_infer_request(text.as_bytes(), &crate::DecodeOptions::default()).unwrap();
        let bits = |t: &TensorData| -> Vec<u64> {
            match t {
                TensorData::Fp32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
                TensorData::Fp64(v) => v.iter().map(|x| x.to_bits()).collect(),
                TensorData::Fp16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
                TensorData::Bf16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
                _ => Vec::new(),
            }
        };
        for (got, want) in decoded.inputs.iter().zip(&outputs) {
            assert_eq!(got.name, want.name);
            assert_eq!(got.shape, want.shape);
            if bits(&want.data).is_empty() {
                assert_eq!(got.data, want.data, "{}", want.name);
            } else {
                assert_eq!(bits(&got.data), bits(&want.data), "{}", want.name);
            }
        }
    }

    #[test]
    fn non_finite_floats_are_json_every_parser_reads_on_v2_and_tokens_on_tf_serving() {
        let x = tensor(
            "x",
            TensorData::Fp32(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5]),
        );
        let mut out = Vec::new();
        encode_infer_response(&response(vec![x.clone()]), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\"data\":[null,\"Infinity\",\"-Infinity\",1.5]"),
            "{text}"
        );
        // serde_json, a strict parser, reads the answer.
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["outputs"][0]["data"][0], serde_json::Value::Null);
        let mut tf = Vec::new();
        encode_tf_response(&[x], Format::TfColumns, &mut tf);
        assert_eq!(
            String::from_utf8(tf).unwrap(),
            "{\"outputs\":[NaN,Infinity,-Infinity,1.5]}"
        );
    }

    #[test]
    fn non_utf8_bytes_are_found() {
        let data = TensorData::Bytes(vec![b"ok".to_vec(), vec![0xff, 0xfe]]);
        assert_eq!(non_utf8_element(&data), Some(1));
        assert_eq!(non_utf8_element(&TensorData::Fp32(vec![1.0])), None);
    }
}
