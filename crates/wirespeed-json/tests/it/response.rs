//! Infer responses, as clients read them back: the fields a request lacks,
//! outputs in JSON and in the binary extension, at every chunk split, with
//! serde_json as the reference for the values.

use wirespeed_core::{BinaryInput, ParameterValue, TensorData};
use wirespeed_json::{Category, DecodeOptions, DecodedResponse, ResponseDecoder};

/// Triton's, KServe's and MLServer's responses differ in key order and in
/// `null` for an absent id or version.
const RESPONSE: &str = r#"{"id":null,"outputs":[
    {"data":[0.1,2.5e-7,-3.0,1e308],"name":"p","shape":[2,2],"datatype":"FP64"},
    {"name":"label","datatype":"BYTES","shape":[2],"data":["yes","n\u00f6"]},
    {"name":"raw","datatype":"INT32","shape":[3],"parameters":{"binary_data_size":12}},
    {"name":"n","datatype":"INT8","shape":[0],"data":[],"parameters":null}],
    "model_version":null,"model_name":"titanic","parameters":{"sequence_end":true}}"#;

fn decode(body: &str, chunk: usize) -> Result<DecodedResponse, wirespeed_json::DecodeError> {
    let mut d = ResponseDecoder::new(DecodeOptions::default());
    for part in body.as_bytes().chunks(chunk) {
        d.feed(part)?;
    }
    d.finish()
}

#[test]
fn every_field_at_every_chunk_size() {
    let reference: serde_json::Value = serde_json::from_str(RESPONSE).unwrap();
    let expected: Vec<f64> = reference["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    for chunk in 1..=RESPONSE.len() {
        let d = decode(RESPONSE, chunk).unwrap();
        let r = &d.response;
        assert_eq!(r.model_name, "titanic");
        assert_eq!(r.model_version, "");
        assert_eq!(r.id, None);
        assert_eq!(
            r.parameters,
            [("sequence_end".to_owned(), ParameterValue::Bool(true))]
        );
        assert_eq!(r.outputs[0].name, "p");
        assert_eq!(r.outputs[0].shape, [2, 2]);
        assert_eq!(r.outputs[0].data, TensorData::Fp64(expected.clone()));
        assert_eq!(
            r.outputs[1].data,
            TensorData::Bytes(vec![b"yes".to_vec(), "nö".as_bytes().to_vec()])
        );
        assert_eq!(r.outputs[2].shape, [3]);
        assert!(r.outputs[2].data.is_empty());
        assert_eq!(d.binary_outputs, [BinaryInput { input: 2, size: 12 }]);
        assert_eq!(r.outputs[3].data, TensorData::Int8(vec![]));
    }
}

#[test]
fn errors_name_outputs_not_inputs() {
    let err = decode(
        r#"{"model_name":"m","outputs":[{"name":"y","shape":[1]}]}"#,
        7,
    )
    .unwrap_err();
    assert_eq!(err.category(), Category::Schema);
    assert_eq!(err.message(), "output 'y' has no 'datatype'");
    assert_eq!(err.input(), Some("y"));

    let err = decode(r#"{"model_name":"m","outputs":{}}"#, 3).unwrap_err();
    assert!(
        err.message().starts_with("'outputs' must be an array"),
        "{err}"
    );

    let err = decode(r#"{"model_name":"m"}"#, 3).unwrap_err();
    assert_eq!(err.message(), "the response has no 'outputs'");

    let err = decode(r#"{"model_name":7,"outputs":[]}"#, 3).unwrap_err();
    assert!(
        err.message().starts_with("'model_name' must be a string"),
        "{err}"
    );
}

#[test]
fn data_that_disagrees_with_the_shape_is_refused() {
    let err = decode(
        r#"{"outputs":[{"name":"y","datatype":"FP32","shape":[3],"data":[1,2]}]}"#,
        4,
    )
    .unwrap_err();
    assert_eq!(err.input(), Some("y"));
}

#[test]
fn limits_hold_for_responses() {
    let options = DecodeOptions {
        limits: wirespeed_core::RequestLimits {
            max_elements: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut d = ResponseDecoder::new(options);
    let body = br#"{"outputs":[{"name":"y","datatype":"FP32","shape":[1000000000000],"data":[]}]}"#;
    let err = d
        .feed(body)
        .and_then(|()| d.finish().map(|_| ()))
        .unwrap_err();
    assert_eq!(err.category(), Category::Limit);
}
