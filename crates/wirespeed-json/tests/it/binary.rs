//! The binary tensor data extension's JSON header: inputs with
//! `binary_data_size` and no `data`.

use wirespeed_core::{BinaryInput, DataType, TensorData};
use wirespeed_json::{Category, DecodeOptions, RequestDecoder};

const HEADER: &str = r#"{"inputs":[
    {"name":"a","shape":[2],"datatype":"FP32","data":[1,2]},
    {"name":"b","shape":[3,2],"datatype":"INT64","parameters":{"binary_data_size":48}},
    {"parameters":{"binary_data_size":9},"datatype":"BYTES","shape":[1],"name":"c"}]}"#;

fn decode(
    body: &str,
    binary: bool,
) -> Result<wirespeed_core::InferRequest, wirespeed_json::DecodeError> {
    let mut d = RequestDecoder::new(DecodeOptions::default());
    if binary {
        d = d.with_binary_data();
    }
    for chunk in body.as_bytes().chunks(5) {
        d.feed(chunk)?;
    }
    d.finish()
}

#[test]
fn binary_inputs_are_listed_in_body_order_with_empty_tensors() {
    let r = decode(HEADER, true).unwrap();
    assert_eq!(
        r.binary_inputs,
        [
            BinaryInput { input: 1, size: 48 },
            BinaryInput { input: 2, size: 9 }
        ]
    );
    assert_eq!(r.inputs[0].data, TensorData::Fp32(vec![1.0, 2.0]));
    assert_eq!(r.inputs[1].datatype(), DataType::Int64);
    assert_eq!(r.inputs[1].shape, [3, 2]);
    assert!(r.inputs[1].data.is_empty());
    assert_eq!(r.inputs[2].datatype(), DataType::Bytes);
}

#[test]
fn without_the_extension_a_binary_input_is_a_schema_error() {
    let e = decode(HEADER, false).unwrap_err();
    assert_eq!(e.category(), Category::Schema);
    assert!(
        e.to_string().contains("Inference-Header-Content-Length"),
        "{e}"
    );
}

#[test]
fn binary_inputs_count_against_the_element_limit() {
    let body = r#"{"inputs":[{"name":"b","shape":[1000000000000],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#;
    let e = decode(body, true).unwrap_err();
    assert_eq!(e.category(), Category::Limit);
}

#[test]
fn data_and_binary_data_size_together_are_refused() {
    let body = r#"{"inputs":[{"name":"b","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}"#;
    let e = decode(body, true).unwrap_err();
    assert!(
        e.to_string().contains("both 'data' and 'binary_data_size'"),
        "{e}"
    );
    let body = r#"{"inputs":[{"name":"b","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}"#;
    let e = decode(body, true).unwrap_err();
    assert!(e.to_string().contains("non-negative integer"), "{e}");
}

#[test]
fn shared_memory_inputs_are_listed_with_empty_tensors() {
    let body = br#"{"inputs":[{"name":"a","shape":[2,2],"datatype":"FP32","parameters":{"shared_memory_region":"in","shared_memory_byte_size":16,"shared_memory_offset":8}},{"name":"b","shape":[1],"datatype":"INT64","data":[3]}]}"#;
    let mut d = RequestDecoder::new(DecodeOptions::default());
    d.feed(body).unwrap();
    let r = d.finish().unwrap();
    assert_eq!(
        r.shared_inputs,
        [wirespeed_core::SharedInput {
            input: 0,
            at: wirespeed_core::SharedRef {
                region: "in".into(),
                offset: 8,
                byte_size: 16
            }
        }]
    );
    assert!(r.inputs[0].data.is_empty() && r.inputs[0].shape == [2, 2]);
    for (parameters, words) in [
        (
            r#"{"shared_memory_region":"in"}"#,
            "'shared_memory_byte_size' is required",
        ),
        (
            r#"{"shared_memory_region":7,"shared_memory_byte_size":4}"#,
            "must be a region's name",
        ),
        (
            r#"{"shared_memory_byte_size":4}"#,
            "without 'shared_memory_region'",
        ),
        (
            r#"{"shared_memory_region":"in","shared_memory_byte_size":-4}"#,
            "non-negative",
        ),
    ] {
        let body = format!(
            r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"FP32","parameters":{parameters}}}]}}"#
        );
        let mut d = RequestDecoder::new(DecodeOptions::default());
        let e = d
            .feed(body.as_bytes())
            .and_then(|_| d.finish())
            .unwrap_err();
        assert!(e.to_string().contains(words), "{e}");
    }
    let both = br#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":4}}]}"#;
    let mut d = RequestDecoder::new(DecodeOptions::default());
    let e = d.feed(both).and_then(|_| d.finish()).unwrap_err();
    assert!(
        e.to_string()
            .contains("both 'data' and 'shared_memory_region'"),
        "{e}"
    );
}
