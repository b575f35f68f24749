//! The Open Inference Protocol's JSON infer request and response.
//!
//! Requests are decoded with serde_json, but without a DOM: the envelope is
//! read into borrowed structs, and each input's `data` is kept as raw text
//! until its `shape` and `datatype` are known, then flattened straight into a
//! typed buffer. The incremental chunked decoder replaces this module behind
//! the same [`decode_infer_request`] signature.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use wirespeed_core::{
    bf16, element_count, f16, format_shape, DataType, Error, InferRequest, InferResponse,
    ParameterValue, Parameters, RequestedOutput, Tensor, TensorData,
};

#[derive(Deserialize)]
struct RequestJson<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<ParametersJson>,
    #[serde(borrow)]
    inputs: Vec<Object<InputJson<'a>>>,
    #[serde(default)]
    outputs: Vec<Object<OutputJson>>,
}

/// `T` read only from a JSON object. Derived structs would also take an
/// array of their fields in order, which the protocol does not allow.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }

        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct InputJson<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<ParametersJson>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Option<ParametersJson>,
}

type ParametersJson = serde_json::Map<String, serde_json::Value>;

/// Decodes a V2 JSON infer request body into typed tensors.
///
/// Checks the JSON itself, each input's datatype name, that `data` is flat or
/// nested exactly to `shape`, that every element fits the datatype, and that
/// the element count matches `shape`. Whether the inputs fit a model is the
/// caller's check.
pub fn decode_infer_request(body: &[u8]) -> Result<InferRequest, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::malformed(
            "empty request body; expected a JSON infer request object",
        ));
    }
    let Object(request): Object<RequestJson<'_>> = serde_json::from_slice(body)
        .map_err(|e| Error::malformed(format!("invalid infer request JSON: {e}")))?;

    let mut inputs = Vec::with_capacity(request.inputs.len());
    for Object(input) in request.inputs {
        inputs.push(decode_input(input)?);
    }
    let outputs = request
        .outputs
        .into_iter()
        .map(|Object(o)| {
            let parameters = convert_parameters(o.parameters, &format!("output '{}'", o.name))?;
            Ok(RequestedOutput {
                name: o.name,
                parameters,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(InferRequest {
        id: request.id,
        parameters: convert_parameters(request.parameters, "the request")?,
        inputs,
        outputs,
    })
}

fn decode_input(input: InputJson<'_>) -> Result<Tensor, Error> {
    let name = input.name;
    let datatype: DataType = input
        .datatype
        .parse()
        .map_err(|e| Error::malformed(format!("input '{name}': {e}")))?;
    let shape = input
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| {
            Error::malformed(format!(
                "input '{name}' has shape {}; a request's dimensions must be zero or more",
                format_shape(&input.shape)
            ))
        })?;
    let parameters = convert_parameters(input.parameters, &format!("input '{name}'"))?;
    let Some(raw) = input.data else {
        if parameters.iter().any(|(k, _)| k == "binary_data_size") {
            return Err(Error::new(
                wirespeed_core::ErrorKind::Unsupported,
                format!("input '{name}' uses the binary tensor data extension, which this server does not support yet; send 'data' as JSON"),
            ));
        }
        return Err(Error::malformed(format!("input '{name}' has no 'data'")));
    };
    let count = element_count(&shape).ok_or_else(|| {
        Error::malformed(format!(
            "input '{name}' has shape {}, whose element count overflows",
            format_shape(&shape)
        ))
    })?;
    // Every element takes at least two bytes of JSON (a digit and a comma),
    // so this bounds the allocation by the body size, whatever the shape says.
    let capacity = count.min(raw.get().len() / 2 + 1);
    let data = decode_data(raw.get(), datatype, &shape, count, capacity)
        .map_err(|e| Error::malformed(format!("input '{name}': {e}")))?;
    if data.len() != count {
        return Err(Error::invalid_input(format!(
            "input '{name}' has shape {}, which holds {count} elements, but 'data' has {}",
            format_shape(&shape),
            data.len()
        )));
    }
    Ok(Tensor { name, shape, data })
}

fn decode_data(
    raw: &str,
    datatype: DataType,
    shape: &[usize],
    count: usize,
    capacity: usize,
) -> Result<TensorData, String> {
    fn flat<T: for<'de> Deserialize<'de>>(
        raw: &str,
        shape: &[usize],
        count: usize,
        capacity: usize,
    ) -> Result<Vec<T>, String> {
        let mut out = Vec::with_capacity(capacity);
        let mut de = serde_json::Deserializer::from_str(raw);
        let mut state = Layout {
            shape,
            count,
            mode: Mode::Unknown,
        };
        Level {
            out: &mut out,
            state: &mut state,
            depth: 0,
        }
        .deserialize(&mut de)
        .map_err(|e| e.to_string())?;
        Ok(out)
    }
    Ok(match datatype {
        DataType::Bool => TensorData::Bool(flat(raw, shape, count, capacity)?),
        DataType::Uint8 => TensorData::Uint8(flat(raw, shape, count, capacity)?),
        DataType::Uint16 => TensorData::Uint16(flat(raw, shape, count, capacity)?),
        DataType::Uint32 => TensorData::Uint32(flat(raw, shape, count, capacity)?),
        DataType::Uint64 => TensorData::Uint64(flat(raw, shape, count, capacity)?),
        DataType::Int8 => TensorData::Int8(flat(raw, shape, count, capacity)?),
        DataType::Int16 => TensorData::Int16(flat(raw, shape, count, capacity)?),
        DataType::Int32 => TensorData::Int32(flat(raw, shape, count, capacity)?),
        DataType::Int64 => TensorData::Int64(flat(raw, shape, count, capacity)?),
        DataType::Fp32 => TensorData::Fp32(flat(raw, shape, count, capacity)?),
        DataType::Fp64 => TensorData::Fp64(flat(raw, shape, count, capacity)?),
        DataType::Fp16 => TensorData::Fp16(
            flat::<f64>(raw, shape, count, capacity)?
                .into_iter()
                .map(f16::from_f64)
                .collect(),
        ),
        DataType::Bf16 => TensorData::Bf16(
            flat::<f64>(raw, shape, count, capacity)?
                .into_iter()
                .map(bf16::from_f64)
                .collect(),
        ),
        DataType::Bytes => TensorData::Bytes(
            flat::<String>(raw, shape, count, capacity)?
                .into_iter()
                .map(String::into_bytes)
                .collect(),
        ),
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unknown,
    /// One array of scalars, row-major.
    Flat,
    /// Arrays nested to the shape's depth.
    Nested,
}

struct Layout<'s> {
    shape: &'s [usize],
    count: usize,
    mode: Mode,
}

/// Deserializes one array at `depth`, appending its scalars to `out`.
struct Level<'o, 's, T> {
    out: &'o mut Vec<T>,
    state: &'o mut Layout<'s>,
    depth: usize,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Level<'_, '_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Level<'_, '_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut len = 0usize;
        while seq
            .next_element_seed(Item {
                out: &mut *self.out,
                state: &mut *self.state,
                depth: self.depth,
            })?
            .is_some()
        {
            len += 1;
        }
        let state = &*self.state;
        if state.mode == Mode::Nested && state.shape.get(self.depth) != Some(&len) {
            return Err(de::Error::custom(format!(
                "nested 'data' has {len} elements at depth {}, but shape {} needs {}",
                self.depth,
                format_shape(state.shape),
                state
                    .shape
                    .get(self.depth)
                    .map_or("none".to_owned(), |d| d.to_string())
            )));
        }
        Ok(())
    }
}

/// One element of an array at `depth`: a scalar or a deeper array.
struct Item<'o, 's, T> {
    out: &'o mut Vec<T>,
    state: &'o mut Layout<'s>,
    depth: usize,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Item<'_, '_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>> Item<'_, '_, T> {
    fn scalar<E: de::Error, V: IntoDeserializer<'de, E>>(self, value: V) -> Result<(), E> {
        let state = &mut *self.state;
        if state.mode == Mode::Unknown {
            state.mode = Mode::Flat;
        }
        let rank = state.shape.len();
        let at_leaf = match state.mode {
            Mode::Flat => self.depth == 0,
            _ => self.depth + 1 == rank,
        };
        if !at_leaf {
            return Err(E::custom(format!(
                "a value at depth {} of 'data' does not fit shape {}; give 'data' flat or nested exactly to the shape",
                self.depth,
                format_shape(state.shape)
            )));
        }
        if self.out.len() == state.count {
            return Err(E::custom(format!(
                "'data' has more than the {} elements shape {} holds",
                state.count,
                format_shape(state.shape)
            )));
        }
        self.out.push(T::deserialize(value.into_deserializer())?);
        Ok(())
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Item<'_, '_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value or an array")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let state = &mut *self.state;
        if state.mode == Mode::Flat || self.depth + 1 >= state.shape.len() {
            return Err(de::Error::custom(format!(
                "'data' is nested deeper than shape {} allows",
                format_shape(state.shape)
            )));
        }
        state.mode = Mode::Nested;
        Level {
            out: self.out,
            state,
            depth: self.depth + 1,
        }
        .visit_seq(seq)
    }
}

fn convert_parameters(
    parameters: Option<ParametersJson>,
    owner: &str,
) -> Result<Parameters, Error> {
    let Some(map) = parameters else {
        return Ok(Vec::new());
    };
    map.into_iter()
        .map(|(key, value)| {
            let value = match value {
                serde_json::Value::Bool(b) => ParameterValue::Bool(b),
                serde_json::Value::String(s) => ParameterValue::String(s),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => ParameterValue::Int(i),
                    None => ParameterValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                other => {
                    return Err(Error::malformed(format!(
                        "parameter '{key}' of {owner} is {}; parameters must be a string, number or bool",
                        json_kind(&other)
                    )))
                }
            };
            Ok((key, value))
        })
        .collect()
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::Bool(_) => "a bool",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
    }
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    model_name: &'a str,
    model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    outputs: Vec<OutputTensorJson<'a>>,
}

#[derive(Serialize)]
struct OutputTensorJson<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [usize],
    data: DataJson<'a>,
}

struct DataJson<'a>(&'a TensorData);

impl Serialize for DataJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            TensorData::Bool(v) => v.serialize(s),
            TensorData::Uint8(v) => v.serialize(s),
            TensorData::Uint16(v) => v.serialize(s),
            TensorData::Uint32(v) => v.serialize(s),
            TensorData::Uint64(v) => v.serialize(s),
            TensorData::Int8(v) => v.serialize(s),
            TensorData::Int16(v) => v.serialize(s),
            TensorData::Int32(v) => v.serialize(s),
            TensorData::Int64(v) => v.serialize(s),
            TensorData::Fp32(v) => v.serialize(s),
            TensorData::Fp64(v) => v.serialize(s),
            TensorData::Fp16(v) => s.collect_seq(v.iter().map(|x| x.to_f32())),
            TensorData::Bf16(v) => s.collect_seq(v.iter().map(|x| x.to_f32())),
            TensorData::Bytes(v) => s.collect_seq(v.iter().map(|b| String::from_utf8_lossy(b))),
        }
    }
}

/// Encodes an infer response as V2 JSON.
pub fn encode_infer_response(response: &InferResponse) -> Vec<u8> {
    let body = ResponseJson {
        model_name: &response.model_name,
        model_version: &response.model_version,
        id: response.id.as_deref(),
        outputs: response
            .outputs
            .iter()
            .map(|t| OutputTensorJson {
                name: &t.name,
                datatype: t.datatype().as_str(),
                shape: &t.shape,
                data: DataJson(&t.data),
            })
            .collect(),
    };
    let estimate = 128
        + response
            .outputs
            .iter()
            .map(|t| t.data.len() * 12)
            .sum::<usize>();
    let mut out = Vec::with_capacity(estimate);
    // Writing plain data into a Vec cannot fail.
    serde_json::to_writer(&mut out, &body).expect("serializing an infer response");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_core::ErrorKind;

    fn decode(body: &str) -> Result<InferRequest, Error> {
        decode_infer_request(body.as_bytes())
    }

    fn one_input(shape: &str, datatype: &str, data: &str) -> Result<Tensor, Error> {
        let body = format!(
            r#"{{"inputs":[{{"name":"x","shape":{shape},"datatype":"{datatype}","data":{data}}}]}}"#
        );
        decode(&body).map(|mut r| r.inputs.remove(0))
    }

    #[test]
    fn flat_and_nested_data_decode_to_the_same_row_major_buffer() {
        let flat = one_input("[2,3]", "FP32", "[1,2.5,3,4,5,6e-1]").unwrap();
        let nested = one_input("[2,3]", "FP32", "[[1,2.5,3],[4,5,6e-1]]").unwrap();
        assert_eq!(flat, nested);
        let reference: Vec<f32> = serde_json::from_str::<Vec<f64>>("[1,2.5,3,4,5,6e-1]")
            .unwrap()
            .into_iter()
            .map(|x| x as f32)
            .collect();
        assert_eq!(flat.data, TensorData::Fp32(reference));
        assert_eq!(flat.shape, vec![2, 3]);
    }

    #[test]
    fn envelope_fields_are_kept() {
        let r = decode(
            r#"{"id":"42","parameters":{"a":1,"b":"s","c":true,"d":0.5},
                "inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[true]}],
                "outputs":[{"name":"y","parameters":{"binary_data":false}}],"unknown":{"skipped":[1,2]}}"#,
        )
        .unwrap();
        assert_eq!(r.id.as_deref(), Some("42"));
        assert_eq!(r.parameters.len(), 4);
        assert_eq!(
            r.parameters[3],
            ("d".to_owned(), ParameterValue::Float(0.5))
        );
        assert_eq!(r.outputs[0].name, "y");
        assert_eq!(r.inputs[0].data, TensorData::Bool(vec![true]));
    }

    #[test]
    fn every_datatype_decodes() {
        let cases = [
            ("BOOL", "[true,false]", TensorData::Bool(vec![true, false])),
            ("UINT8", "[0,255]", TensorData::Uint8(vec![0, 255])),
            ("INT8", "[-128,127]", TensorData::Int8(vec![-128, 127])),
            (
                "UINT64",
                "[0,18446744073709551615]",
                TensorData::Uint64(vec![0, u64::MAX]),
            ),
            (
                "INT64",
                "[-9223372036854775808,1]",
                TensorData::Int64(vec![i64::MIN, 1]),
            ),
            ("FP64", "[0.1,-2]", TensorData::Fp64(vec![0.1, -2.0])),
            (
                "FP16",
                "[0.5,65504]",
                TensorData::Fp16(vec![f16::from_f32(0.5), f16::MAX]),
            ),
            (
                "BF16",
                "[1,-2]",
                TensorData::Bf16(vec![bf16::ONE, bf16::from_f32(-2.0)]),
            ),
            (
                "BYTES",
                r#"["a\"b","\u00e9"]"#,
                TensorData::Bytes(vec![b"a\"b".to_vec(), "é".as_bytes().to_vec()]),
            ),
        ];
        for (dt, data, want) in cases {
            assert_eq!(one_input("[2]", dt, data).unwrap().data, want, "{dt}");
        }
    }

    #[test]
    fn out_of_range_and_wrong_type_elements_are_refused() {
        for (dt, data) in [
            ("UINT8", "[256, 1]"),
            ("INT8", "[-129, 1]"),
            ("BOOL", "[1, 0]"),
            ("FP32", r#"["1", 2]"#),
        ] {
            let e = one_input("[2]", dt, data).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::MalformedRequest, "{dt} {data}");
            assert!(e.message().contains("input 'x'"), "{e}");
        }
    }

    #[test]
    fn shape_mismatches_are_specific() {
        let e = one_input("[2,3]", "FP32", "[1,2,3,4,5]").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(
            e.message().contains("holds 6 elements") && e.message().contains("has 5"),
            "{e}"
        );
        assert!(one_input("[2,3]", "FP32", "[1,2,3,4,5,6,7]")
            .unwrap_err()
            .message()
            .contains("more than the 6"));
        assert!(one_input("[2,3]", "FP32", "[[1,2,3],[4,5]]")
            .unwrap_err()
            .message()
            .contains("needs 3"));
        assert!(one_input("[2,3]", "FP32", "[[1,2,3],4,5,6]").is_err());
        assert!(one_input("[6]", "FP32", "[[1,2,3],[4,5,6]]")
            .unwrap_err()
            .message()
            .contains("deeper"));
        assert!(one_input("[-1,3]", "FP32", "[1,2,3]")
            .unwrap_err()
            .message()
            .contains("zero or more"));
    }

    #[test]
    fn an_absurd_shape_is_refused_without_allocating_it() {
        let e = one_input("[1000000000000]", "FP32", "[1]").unwrap_err();
        assert!(e.message().contains("1000000000000 elements"), "{e}");
        let e = one_input("[4294967296,4294967296,4294967296]", "FP32", "[1]").unwrap_err();
        assert!(e.message().contains("overflows"), "{e}");
    }

    #[test]
    fn malformed_bodies_are_malformed_requests() {
        for body in [
            "",
            "  ",
            "{",
            "[]",
            r#"{"inputs":3}"#,
            r#"{"inputs":[{"name":"x"}]}"#,
            "{\"inputs\":[]}x",
            // Fields given positionally, as serde's derived structs would accept.
            r#"[null, null, []]"#,
            r#"{"inputs":[["x",[1],"FP32",null,[1]]]}"#,
            r#"{"inputs":[],"outputs":[["y"]]}"#,
        ] {
            let e = decode(body).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::MalformedRequest, "{body:?}: {e}");
        }
        let e = one_input("[1]", "FLOAT32", "[1]").unwrap_err();
        assert!(e.message().contains("unknown datatype 'FLOAT32'"), "{e}");
    }

    #[test]
    fn responses_round_trip_through_serde_json() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: Some("7".into()),
            outputs: vec![Tensor {
                name: "p".into(),
                shape: vec![2],
                data: TensorData::Fp32(vec![0.1, 1e-7]),
            }],
        };
        let v: serde_json::Value =
            serde_json::from_slice(&encode_infer_response(&response)).unwrap();
        assert_eq!(v["model_name"], "m");
        assert_eq!(v["id"], "7");
        assert_eq!(v["outputs"][0]["datatype"], "FP32");
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([2]));
        let data: Vec<f32> = serde_json::from_value(v["outputs"][0]["data"].clone()).unwrap();
        assert_eq!(data, vec![0.1, 1e-7]);
    }
}
