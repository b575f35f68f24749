//! TF Serving and Clipper request bodies: shapes learned from nesting, named
//! inputs, b64 values, and their errors; checked against serde_json.

use wirespeed_core::{DataType, InferRequest, RequestLimits, TensorData};
use wirespeed_json::{Category, DecodeError, DecodeOptions, Format, RequestDecoder};

fn tf(
    inputs: &[(&str, DataType)],
    body: &str,
    chunk: usize,
) -> Result<(InferRequest, Format), DecodeError> {
    let specs: Vec<(String, DataType)> = inputs.iter().map(|(n, d)| (n.to_string(), *d)).collect();
    let mut d = RequestDecoder::tf_serving(DecodeOptions::default(), &specs);
    for piece in body.as_bytes().chunks(chunk) {
        d.feed(piece)?;
    }
    d.finish_with_format()
}

fn clipper(datatype: DataType, body: &str) -> Result<(InferRequest, Format), DecodeError> {
    let mut d = RequestDecoder::clipper(DecodeOptions::default(), ("x".into(), datatype));
    d.feed(body.as_bytes())?;
    d.finish_with_format()
}

/// Every chunking gives the same answer as one chunk.
fn tf_all_chunkings(inputs: &[(&str, DataType)], body: &str) -> (InferRequest, Format) {
    let whole = tf(inputs, body, body.len()).unwrap();
    for chunk in [1, 2, 3, 7] {
        assert_eq!(tf(inputs, body, chunk).unwrap(), whole, "chunks of {chunk}");
    }
    whole
}

#[test]
fn row_format_learns_the_shape() {
    let (r, format) = tf_all_chunkings(
        &[("x", DataType::Fp32)],
        r#"{"signature_name": "serving_default", "instances": [[1, 2.5, -3], [4, 5, 6e-1]]}"#,
    );
    assert_eq!(format, Format::TfRows);
    assert_eq!(r.inputs[0].shape, [2, 3]);
    assert_eq!(
        r.inputs[0].data,
        TensorData::Fp32(vec![1.0, 2.5, -3.0, 4.0, 5.0, 0.6])
    );
    let (r, _) = tf_all_chunkings(&[("x", DataType::Int64)], r#"{"instances": [1, 2, 3]}"#);
    assert_eq!(r.inputs[0].shape, [3]);
}

#[test]
fn named_instances_feed_each_input() {
    let body = r#"{"instances": [{"a": [1, 2], "b": "x"}, {"b": {"b64": "/wA="}, "a": [3, 4]}]}"#;
    let (r, _) = tf_all_chunkings(&[("a", DataType::Int32), ("b", DataType::Bytes)], body);
    assert_eq!(r.inputs[0].shape, [2, 2]);
    assert_eq!(r.inputs[0].data, TensorData::Int32(vec![1, 2, 3, 4]));
    assert_eq!(r.inputs[1].shape, [2]);
    assert_eq!(
        r.inputs[1].data,
        TensorData::Bytes(vec![b"x".to_vec(), vec![0xff, 0]])
    );
}

#[test]
fn columnar_format_takes_whole_tensors() {
    let body = r#"{"inputs": {"b": ["p", "q"], "a": [[1.5], [2.5]]}}"#;
    let (r, format) = tf_all_chunkings(&[("a", DataType::Fp64), ("b", DataType::Bytes)], body);
    assert_eq!(format, Format::TfColumns);
    assert_eq!(r.inputs[0].shape, [2, 1]);
    assert_eq!(r.inputs[1].shape, [2]);
    let (r, _) = tf_all_chunkings(
        &[("a", DataType::Fp32)],
        r#"{"inputs": [[1, 2], [3, 4], [5, 6]]}"#,
    );
    assert_eq!(r.inputs[0].shape, [3, 2]);
}

#[test]
fn large_bodies_take_the_float_fast_path_exactly() {
    let rows: Vec<Vec<f64>> = (0..3000)
        .map(|i| {
            (0..20)
                .map(|j| ((i * 31 + j * 7) as f64).sin() * 1e3)
                .collect()
        })
        .collect();
    let body = serde_json::json!({ "instances": rows }).to_string();
    let (r, _) = tf(&[("x", DataType::Fp32)], &body, 65536).unwrap();
    assert_eq!(r.inputs[0].shape, [3000, 20]);
    let want: Vec<f32> = rows
        .iter()
        .flatten()
        .map(|v| serde_json::to_string(v).unwrap().parse::<f32>().unwrap())
        .collect();
    assert_eq!(r.inputs[0].data, TensorData::Fp32(want));
}

fn err(inputs: &[(&str, DataType)], body: &str) -> DecodeError {
    tf(inputs, body, body.len()).expect_err(body)
}

#[test]
fn bad_bodies_say_what_is_wrong() {
    let x = &[("x", DataType::Fp32)];
    let ab = &[("a", DataType::Fp32), ("b", DataType::Fp32)];
    type Case<'a> = (&'a [(&'a str, DataType)], &'a str, Category, &'a str);
    let cases: &[Case<'_>] = &[
        (
            x,
            r#"{"instances": [[1, 2], [3]]}"#,
            Category::Shape,
            "rectangular",
        ),
        (
            x,
            r#"{"instances": [[1, 2], [[3, 4]]]}"#,
            Category::Shape,
            "rectangular",
        ),
        (
            x,
            r#"{"instances": [[1, 2], 3]}"#,
            Category::Shape,
            "rectangular",
        ),
        (x, r#"{"instances": []}"#, Category::Schema, "no rows"),
        (
            x,
            r#"{"instances": [[1]], "inputs": [[1]]}"#,
            Category::Schema,
            "not both",
        ),
        (
            x,
            r#"{"signature_name": "s"}"#,
            Category::Schema,
            "neither 'instances' nor 'inputs'",
        ),
        (
            x,
            r#"{"instances": [{"y": 1}]}"#,
            Category::Schema,
            "no input 'y'",
        ),
        (
            ab,
            r#"{"instances": [{"a": 1}]}"#,
            Category::Schema,
            "has no 'b'",
        ),
        (
            ab,
            r#"{"instances": [{"a": 1, "a": 2, "b": 3}]}"#,
            Category::Schema,
            "given twice",
        ),
        (
            ab,
            r#"{"instances": [[1, 2]]}"#,
            Category::Schema,
            "one input",
        ),
        (
            ab,
            r#"{"inputs": {"a": 1, "b": [2]}}"#,
            Category::Shape,
            "must be a list",
        ),
        (
            x,
            r#"{"instances": [["a"]]}"#,
            Category::Type,
            "expected a number",
        ),
        (
            x,
            r#"{"instances": [{"b64": "AA=="}]}"#,
            Category::Type,
            "BYTES",
        ),
        // KServe's lightgbm sample: columns as pandas' to_dict writes them.
        (
            ab,
            r#"{"instances": [{"a": {"0": 3.5}, "b": {"0": 1.4}}]}"#,
            Category::Type,
            "is sent as a list ([3.5])",
        ),
        (
            &[("s", DataType::Bytes)],
            r#"{"instances": [{"b64": "!!"}]}"#,
            Category::Syntax,
            "base64",
        ),
    ];
    for (inputs, body, category, words) in cases {
        let e = err(inputs, body);
        assert_eq!(e.category(), *category, "{body}: {e}");
        assert!(e.to_string().contains(words), "{body}: {e}");
    }
}

#[test]
fn several_inputs_are_held_to_the_limits_together() {
    let specs = [
        ("a".to_owned(), DataType::Fp32),
        ("b".to_owned(), DataType::Fp32),
    ];
    let options = DecodeOptions {
        limits: RequestLimits {
            max_elements: 5,
            ..RequestLimits::default()
        },
        ..DecodeOptions::default()
    };
    let body = r#"{"inputs": {"a": [[1, 2, 3]], "b": [[4, 5, 6]]}}"#;
    let mut d = RequestDecoder::tf_serving(options, &specs);
    d.feed(body.as_bytes()).unwrap();
    let e = d.finish_with_format().unwrap_err();
    assert_eq!(e.category(), Category::Limit);
    assert!(e.to_string().contains("6 elements"), "{e}");
}

#[test]
fn clipper_input_and_input_batch() {
    let (r, format) = clipper(DataType::Fp32, r#"{"input": [1, 2, 3]}"#).unwrap();
    assert_eq!(format, Format::ClipperOne);
    assert_eq!(r.inputs[0].shape, [1, 3]);
    // Integer literals for a float input: Clipper refused them, we take them.
    let (r, format) = clipper(DataType::Fp64, r#"{"input_batch": [[1, 2], [3, 4.5]]}"#).unwrap();
    assert_eq!(format, Format::ClipperBatch);
    assert_eq!(r.inputs[0].shape, [2, 2]);
    assert_eq!(r.inputs[0].data, TensorData::Fp64(vec![1.0, 2.0, 3.0, 4.5]));
    let (r, _) = clipper(DataType::Bytes, r#"{"input": "some text"}"#).unwrap();
    assert_eq!(r.inputs[0].shape, [1]);
    let e = clipper(DataType::Fp32, r#"{"inputs": [1]}"#).unwrap_err();
    assert!(
        e.to_string().contains("neither 'input' nor 'input_batch'"),
        "{e}"
    );
    let e = clipper(DataType::Fp32, r#"{"input_batch": [[1, 2], [3]]}"#).unwrap_err();
    assert_eq!(e.category(), Category::Shape);
}

#[test]
fn clipper_bytes_inputs_are_base64_and_version_is_kept() {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    // Clipper's `bytes` input type: one query's bytes, in base64, for a
    // UINT8 input; a row each.
    let body = format!(r#"{{"input": "{}", "version": "2"}}"#, b64(&[0, 1, 255]));
    let (r, format) = clipper(DataType::Uint8, &body).unwrap();
    assert_eq!(format, Format::ClipperOne);
    assert_eq!(r.inputs[0].shape, [1, 3]);
    assert_eq!(r.inputs[0].data, TensorData::Uint8(vec![0, 1, 255]));
    assert_eq!(
        r.parameters,
        vec![(
            "version".to_owned(),
            wirespeed_core::ParameterValue::String("2".into())
        )]
    );
    let body = format!(r#"{{"input_batch": ["{}", "{}"]}}"#, b64(b"ab"), b64(b"cd"));
    let (r, format) = clipper(DataType::Uint8, &body).unwrap();
    assert_eq!(format, Format::ClipperBatch);
    assert_eq!(r.inputs[0].shape, [2, 2]);
    assert_eq!(r.inputs[0].data, TensorData::Uint8(b"abcd".to_vec()));
    assert!(r.parameters.is_empty());
    // Strings stay strings for a BYTES input (Clipper's `strings`).
    let (r, _) = clipper(DataType::Bytes, r#"{"input_batch": ["YWI=", "x"]}"#).unwrap();
    assert_eq!(
        r.inputs[0].data,
        TensorData::Bytes(vec![b"YWI=".to_vec(), b"x".to_vec()])
    );
    let e = clipper(DataType::Uint8, r#"{"input": "not base64!"}"#).unwrap_err();
    assert!(e.to_string().contains("invalid base64"), "{e}");
    let body = format!(r#"{{"input_batch": ["{}", "{}"]}}"#, b64(b"ab"), b64(b"c"));
    let e = clipper(DataType::Uint8, &body).unwrap_err();
    assert_eq!(e.category(), Category::Shape);
    let e = clipper(DataType::Fp32, r#"{"input": [1], "version": 2}"#).unwrap_err();
    assert!(e.to_string().contains("'version' must be a string"), "{e}");
}

#[test]
fn null_is_a_missing_float_in_tf_serving_and_clipper_bodies() {
    let body = r#"{"instances":[[1.5,null],[null,4]]}"#;
    let (r, _) = tf(&[("x", DataType::Fp32)], body, body.len()).unwrap();
    for chunk in [1, 2, 3, 7] {
        // NaN is not equal to itself: compare the printed requests.
        let (again, _) = tf(&[("x", DataType::Fp32)], body, chunk).unwrap();
        assert_eq!(format!("{again:?}"), format!("{r:?}"), "chunks of {chunk}");
    }
    let TensorData::Fp32(v) = &r.inputs[0].data else {
        panic!("FP32")
    };
    assert_eq!(r.inputs[0].shape, [2, 2]);
    assert!(v[1].is_nan() && v[2].is_nan() && v[0] == 1.5 && v[3] == 4.0);
    let (r, _) = clipper(DataType::Fp64, r#"{"input":[null,2]}"#).unwrap();
    let TensorData::Fp64(v) = &r.inputs[0].data else {
        panic!("FP64")
    };
    assert!(v[0].is_nan() && v[1] == 2.0);
    let e = tf(
        &[("x", DataType::Int32)],
        r#"{"instances":[[1,null]]}"#,
        100,
    )
    .unwrap_err();
    assert_eq!(e.category(), Category::Type, "{e}");
}
