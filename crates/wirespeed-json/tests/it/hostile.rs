//! Malformed and hostile bodies: each gives the expected category and offset.

use wirespeed_core::RequestLimits;
use wirespeed_json::{Category, DecodeError, DecodeOptions, RequestDecoder};

const SAMPLE: &str = r#"{"id":"a","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1.5,-2],[3e2,0.25]]},{"name":"s","shape":[1],"datatype":"BYTES","data":["h\u00e9"]}],"outputs":[{"name":"y"}]}"#;

fn decode_with(
    body: &[u8],
    options: DecodeOptions,
) -> Result<wirespeed_core::InferRequest, DecodeError> {
    let mut d = RequestDecoder::new(options);
    d.feed(body)?;
    d.finish()
}

fn decode(body: &[u8]) -> Result<wirespeed_core::InferRequest, DecodeError> {
    decode_with(body, DecodeOptions::default())
}

/// Expects an error of `category` at the first occurrence of `marker` in `body`.
fn expect(body: &[u8], category: Category, marker: &str, words: &str) {
    let text = String::from_utf8_lossy(body);
    let offset = text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in {text}")) as u64;
    let e = decode(body).expect_err(&text);
    assert_eq!(
        (e.category(), e.offset()),
        (category, offset),
        "{e} for {}",
        String::from_utf8_lossy(body)
    );
    assert!(e.to_string().contains(words), "{e}");
}

#[test]
fn the_sample_decodes() {
    let r = decode(SAMPLE.as_bytes()).unwrap();
    assert_eq!(r.inputs.len(), 2);
}

#[test]
fn every_truncation_is_a_syntax_error_not_a_panic() {
    for end in 0..SAMPLE.len() {
        let e = decode(&SAMPLE.as_bytes()[..end]).unwrap_err();
        assert_eq!(e.category(), Category::Syntax, "cut at {end}: {e}");
        assert!(e.offset() <= end as u64, "cut at {end}: {e}");
    }
}

#[test]
fn bad_numbers_are_syntax_errors_at_the_number() {
    for bad in [
        "01", "1.", ".5", "1e", "+1", "--1", "1.2.3", "0x1", "-", "1e+",
    ] {
        let body = format!(
            r#"{{"inputs":[{{"name":"x","shape":[2],"datatype":"FP32","data":[0,{bad}]}}]}}"#
        );
        let at = body.find(bad).unwrap() as u64;
        let e = decode(body.as_bytes()).unwrap_err();
        assert_eq!(e.category(), Category::Syntax, "{bad}: {e}");
        assert_eq!(e.offset(), at, "{bad}: {e}");
        assert_eq!(e.input(), Some("x"), "{bad}: {e}");
    }
}

#[test]
fn strings_are_validated() {
    let invalid_utf8 =
        b"{\"inputs\":[{\"name\":\"x\xff\",\"shape\":[1],\"datatype\":\"BOOL\",\"data\":[true]}]}";
    expect(invalid_utf8, Category::Syntax, "\u{fffd}", "UTF-8");
    let body = br#"{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["\ud800"]}]}"#;
    expect(body, Category::Syntax, "\"]}]}", "surrogate");
}

#[test]
fn shape_and_range_and_type_errors_name_the_input() {
    let e = decode(br#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1,2]}]}"#)
        .unwrap_err();
    assert_eq!(
        (e.category(), e.input()),
        (Category::Shape, Some("x")),
        "{e}"
    );
    assert!(
        e.to_string().contains("holds 3 elements, but 'data' has 2"),
        "{e}"
    );

    let e =
        decode(br#"{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3]]}]}"#)
            .unwrap_err();
    assert_eq!(e.category(), Category::Shape, "{e}");

    let body = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"UINT8","data":[1,256]}]}"#;
    expect(
        body,
        Category::Range,
        "256",
        "256 is out of range for datatype UINT8",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[-129]}]}"#,
        Category::Range,
        "-129",
        "out of range",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1.5]}]}"#,
        Category::Type,
        "1.5",
        "expected an integer",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]}"#,
        Category::Type,
        "1]}",
        "true or false",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["1"]}]}"#,
        Category::Type,
        "\"1\"",
        "a number",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT","data":[1]}]}"#,
        Category::Type,
        "\"FLOAT",
        "unknown datatype 'FLOAT'",
    );
}

#[test]
fn data_before_shape_and_datatype_still_checks_and_reports_offsets() {
    let body = br#"{"inputs":[{"data":[1,2,300],"name":"x","shape":[3],"datatype":"UINT8"}]}"#;
    let e = decode(body).unwrap_err();
    assert_eq!(
        (e.category(), e.offset(), e.input()),
        (Category::Range, 24, Some("x")),
        "{e}"
    );
    let ok = decode(
        br#"{"inputs":[{"data":[[1,2],[3,4]],"shape":[2,2],"datatype":"INT64","name":"x"}]}"#,
    )
    .unwrap();
    assert_eq!(
        ok.inputs[0].data,
        wirespeed_core::TensorData::Int64(vec![1, 2, 3, 4])
    );
}

#[test]
fn deep_nesting_is_a_limit_error() {
    let body = "[".repeat(10_000);
    let e = decode(body.as_bytes()).unwrap_err();
    // The top level must be an object, so this stops at once.
    assert_eq!(e.category(), Category::Schema, "{e}");
    let body = format!(r#"{{"inputs":[],"x":{}}}"#, "[".repeat(10_000));
    let e = decode(body.as_bytes()).unwrap_err();
    assert_eq!(e.category(), Category::Limit, "{e}");
    assert!(e.to_string().contains("nesting is deeper than 64"), "{e}");
}

#[test]
fn a_huge_declared_shape_is_a_limit_error_before_any_allocation() {
    let body = br#"{"inputs":[{"name":"x","shape":[1000000000000],"datatype":"FP32","data":[1]}]}"#;
    expect(body, Category::Limit, "[1]}", "over the limit");
    let body = br#"{"inputs":[{"name":"x","shape":[4294967296,4294967296,4294967296],"datatype":"FP32","data":[1]}]}"#;
    let e = decode(body).unwrap_err();
    assert_eq!(e.category(), Category::Limit, "{e}");
}

#[test]
fn limits_are_configurable() {
    let options = DecodeOptions {
        limits: RequestLimits {
            max_inputs: 1,
            max_string_bytes: 8,
            ..RequestLimits::default()
        },
        strict: true,
        ..DecodeOptions::default()
    };
    let two = br#"{"inputs":[{"name":"a","shape":[0],"datatype":"FP32","data":[]},{"name":"b","shape":[0],"datatype":"FP32","data":[]}]}"#;
    assert_eq!(
        decode_with(two, options.clone()).unwrap_err().category(),
        Category::Limit
    );
    let long = br#"{"inputs":[{"name":"abcdefghij","shape":[0],"datatype":"FP32","data":[]}]}"#;
    assert_eq!(
        decode_with(long, options.clone()).unwrap_err().category(),
        Category::Limit
    );
    let nan = br#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[NaN]}]}"#;
    let e = decode_with(nan, options).unwrap_err();
    assert!(
        e.category() == Category::Syntax && e.to_string().contains("strict"),
        "{e}"
    );
}

#[test]
fn duplicate_keys_are_refused() {
    expect(
        br#"{"inputs":[],"inputs":[]}"#,
        Category::Schema,
        "\"inputs\":[]}",
        "duplicate key 'inputs'",
    );
    let body = br#"{"inputs":[{"name":"x","name":"y","shape":[0],"datatype":"FP32","data":[]}]}"#;
    expect(
        body,
        Category::Schema,
        "\"name\":\"y",
        "duplicate key 'name'",
    );
}

#[test]
fn trailing_garbage_and_wrong_kinds_are_refused() {
    expect(
        br#"{"inputs":[]} x"#,
        Category::Syntax,
        "x",
        "after the end",
    );
    expect(br#"[1,2]"#, Category::Schema, "[", "must be a JSON object");
    expect(
        br#"{"inputs":{}}"#,
        Category::Schema,
        "{}",
        "'inputs' must be an array",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":{}}]}"#,
        Category::Schema,
        "{}",
        "'data' must be an array",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[]}]}"#,
        Category::Schema,
        "-1",
        "non-negative integer",
    );
    expect(
        br#"{"id":5,"inputs":[]}"#,
        Category::Schema,
        "5",
        "'id' must be a string",
    );
    expect(
        br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]}"#,
        Category::Schema,
        "{\"name",
        "has no 'data'",
    );
    expect(br#"{}"#, Category::Schema, "{", "no 'inputs'");
    assert_eq!(decode(b"").unwrap_err().offset(), 0);
    assert!(decode(b"").unwrap_err().to_string().contains("empty"));
    expect(
        br#"{"inputs":[],"parameters":{"p":[1]}}"#,
        Category::Schema,
        "[1]",
        "parameter 'p'",
    );
}

#[test]
fn null_is_a_missing_float_and_nothing_else() {
    // As orjson writes NaN (kserve's client), and as KServe and MLServer
    // read it back.
    let body = br#"{"inputs":[{"name":"a","shape":[2,3],"datatype":"FP32","data":[[1,null,3],[null,5,6]]},{"name":"b","shape":[2],"datatype":"FP64","data":[null,2.5]},{"name":"c","shape":[1],"datatype":"FP16","data":[null]},{"name":"d","shape":[1],"datatype":"BF16","data":[null]}]}"#;
    let r = decode(body).unwrap();
    let wirespeed_core::TensorData::Fp32(a) = &r.inputs[0].data else {
        panic!("FP32")
    };
    assert_eq!(
        a.iter().map(|x| x.is_nan()).collect::<Vec<_>>(),
        [false, true, false, true, false, false]
    );
    assert_eq!(a[5], 6.0);
    let wirespeed_core::TensorData::Fp64(b) = &r.inputs[1].data else {
        panic!("FP64")
    };
    assert!(b[0].is_nan() && b[1] == 2.5);
    // Chunked anywhere, the same.
    for cut in 1..body.len() {
        let mut d = RequestDecoder::new(DecodeOptions::default());
        d.feed(&body[..cut]).unwrap();
        d.feed(&body[cut..]).unwrap();
        let again = d.finish().unwrap();
        assert_eq!(
            format!("{:?}", again.inputs),
            format!("{:?}", r.inputs),
            "cut at {cut}"
        );
    }
    // Integers, bools and strings have no missing value; strict mode has none.
    for (datatype, data) in [
        ("INT64", "[1,null]"),
        ("BOOL", "[true,null]"),
        ("BYTES", r#"["x",null]"#),
        ("UINT8", "[null,1]"),
    ] {
        let body = format!(
            r#"{{"inputs":[{{"name":"i","shape":[2],"datatype":"{datatype}","data":{data}}}]}}"#
        );
        expect(body.as_bytes(), Category::Type, "null", "got null");
    }
    let strict = DecodeOptions {
        strict: true,
        ..DecodeOptions::default()
    };
    let e = decode_with(
        br#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[null]}]}"#,
        strict,
    )
    .unwrap_err();
    assert_eq!(e.category(), Category::Type, "{e}");
}

/// What MLServer's schema takes and a strict reading refused: `null` for
/// an optional field, a parameter set to `null`, one value as the whole
/// `data` (before or after its shape and datatype).
#[test]
fn optional_nulls_are_absent_and_one_value_is_a_one_element_list() {
    let body = br#"{"id":null,"parameters":null,"outputs":null,"inputs":[{"name":"s","shape":[1],"datatype":"BYTES","data":"he said \"hi\"\n","parameters":null},{"data":2.5,"name":"x","shape":[1],"datatype":"FP32","parameters":{"content_type":null,"k":1}},{"name":"b","datatype":"BOOL","shape":[1],"data":true}]}"#;
    let r = decode(body).unwrap();
    assert_eq!(r.id, None);
    assert!(r.parameters.is_empty() && r.outputs.is_empty());
    assert_eq!(
        r.inputs[0].data,
        wirespeed_core::TensorData::Bytes(vec![b"he said \"hi\"\n".to_vec()])
    );
    assert_eq!(
        r.inputs[1].data,
        wirespeed_core::TensorData::Fp32(vec![2.5])
    );
    assert_eq!(
        r.inputs[2].data,
        wirespeed_core::TensorData::Bool(vec![true])
    );
    assert_eq!(
        r.input_parameters,
        vec![(
            "x".to_owned(),
            vec![("k".to_owned(), wirespeed_core::ParameterValue::Int(1))]
        )]
    );
    // One value is one element: the shape must say so.
    expect(
        br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","data":7}]}"#,
        Category::Shape,
        "{\"name",
        "holds 2 elements, but 'data' has 1",
    );
    // Inputs themselves are not optional, nor is a value of data null.
    expect(
        br#"{"inputs":null}"#,
        Category::Schema,
        "null",
        "'inputs' must be an array",
    );
}
