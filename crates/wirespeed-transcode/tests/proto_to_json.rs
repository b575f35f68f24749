//! Protobuf to JSON against prost-reflect's serializer, the reference, on
//! messages built from JSON by prost-reflect itself; with each print
//! option; and malformed wire bytes.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use wirespeed_transcode::{field_to_json, proto_to_json, Category, PrintOptions};

fn everything() -> MessageDescriptor {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
    DescriptorPool::from_file_descriptor_set(files)
        .expect("a pool")
        .get_message_by_name("wirespeed.test.Everything")
        .expect("the message")
}

fn build(desc: &MessageDescriptor, json: &str) -> DynamicMessage {
    let mut de = serde_json::Deserializer::from_str(json);
    DynamicMessage::deserialize(desc.clone(), &mut de).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn printed(desc: &MessageDescriptor, bytes: &[u8], options: &PrintOptions) -> serde_json::Value {
    let mut out = Vec::new();
    proto_to_json(desc, bytes, options, &mut out).unwrap();
    serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out)))
}

fn reference(message: &DynamicMessage, options: &SerializeOptions) -> serde_json::Value {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    message.serialize_with_options(&mut ser, options).unwrap();
    serde_json::from_slice(&out).unwrap()
}

const CASES: &[&str] = &[
    r#"{}"#,
    r#"{"fDouble": 1.5, "fFloat": 0.1, "fInt32": -7, "fInt64": "-9007199254740993",
        "fUint32": 4294967295, "fUint64": "18446744073709551615", "fSint32": -2147483648,
        "fSint64": "-9223372036854775808", "fFixed32": 1, "fFixed64": "2", "fSfixed32": -3,
        "fSfixed64": "-4", "fBool": true, "fString": "h\u00e9\"\n", "fBytes": "AAEC/w==", "color": "GREEN"}"#,
    r#"{"fDouble": "NaN", "fFloat": "-Infinity", "fInt32": 0, "color": 7}"#,
    r#"{"inner": {"a": 1, "b": "x", "children": [{"a": 2}, {"children": [{"b": "deep"}]}]}}"#,
    r#"{"rInt32": [1, -2, 300000, 0], "rDouble": [0.5, -1e-300], "rString": ["a", "", "c"],
        "rInner": [{"a": 1}, {}], "rColor": ["RED", "COLOR_UNSPECIFIED"], "rBytes": ["", "AA=="],
        "rSint64": ["-1", "2"], "rFloat": [1.5, "NaN"], "rBool": [true, false], "rFixed64": ["18446744073709551615"]}"#,
    r#"{"mStrInt": {"a": 1, "b": 0}, "mIntInner": {"-5": {"a": 5}, "7": {}},
        "mBool": {"true": "t", "false": ""}, "mEnum": {"1": "RED", "2": "COLOR_UNSPECIFIED"},
        "mValue": {"n": null, "x": [1, "s", {"k": true}]}}"#,
    r#"{"oString": ""}"#,
    r#"{"oInner": {}}"#,
    r#"{"optInt": 0, "optString": ""}"#,
    r#"{"ts": "1972-01-01T10:00:20.021Z", "dur": "-1.500s", "mask": "fInt32,inner.children", "empty": {}}"#,
    r#"{"ts": "0001-01-01T00:00:00Z", "dur": "0.000000001s", "rTs": ["9999-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00.000001Z"]}"#,
    r#"{"st": {"a": 1, "b": [true, null, "x", {"c": {}}], "d": {"e": -2.5}}, "val": [[], {}], "lv": [1, "two", false, null]}"#,
    r#"{"val": null}"#,
    r#"{"wInt32": 5, "wString": "", "wBytes": "AQI=", "wDouble": -0.5, "wInt64": "-3",
        "wBool": false, "wUint64": "7", "wFloat": 1.25, "wUint32": 0}"#,
    r#"{"any": {"@type": "type.googleapis.com/wirespeed.test.Inner", "a": 9, "children": [{"b": "c"}]}}"#,
    r#"{"any": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "2s"}}"#,
    r#"{"any": {"@type": "type.googleapis.com/wirespeed.test.Inner"}}"#,
    r#"{"any": {"@type": "type.googleapis.com/google.protobuf.Any", "value": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s"}}}"#,
    r#"{"customName": "x"}"#,
];

#[test]
fn every_case_prints_as_prost_reflect_serializes() {
    let desc = everything();
    for case in CASES {
        let message = build(&desc, case);
        let bytes = message.encode_to_vec();
        for (ours, theirs) in [
            (PrintOptions::default(), SerializeOptions::new()),
            (
                PrintOptions {
                    emit_defaults: true,
                    ..PrintOptions::default()
                },
                SerializeOptions::new().skip_default_fields(false),
            ),
            (
                PrintOptions {
                    proto_field_names: true,
                    enums_as_ints: true,
                    ..PrintOptions::default()
                },
                SerializeOptions::new()
                    .use_proto_field_name(true)
                    .use_enum_numbers(true),
            ),
        ] {
            assert_eq!(
                printed(&desc, &bytes, &ours),
                reference(&message, &theirs),
                "{case} with {ours:?}"
            );
        }
    }
}

#[test]
fn a_wrapped_infinity_is_the_mappings_string() {
    // prost-reflect writes a DoubleValue's infinity as null (serde_json's
    // answer for a non-finite f64); the mapping says "Infinity".
    let desc = everything();
    let bytes = build(&desc, r#"{"wDouble": "Infinity", "wFloat": "NaN"}"#).encode_to_vec();
    assert_eq!(
        printed(&desc, &bytes, &PrintOptions::default()),
        serde_json::json!({"wDouble": "Infinity", "wFloat": "NaN"})
    );
}

#[test]
fn repeated_and_merged_fields_read_as_protobuf_reads_them() {
    let desc = everything();
    // Field 3 (fInt32) twice: the last wins. Field 17 (inner) twice: the
    // parts merge. Field 20 (rInt32) packed and unpacked, interleaved.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&[0x18, 0x01, 0x18, 0x02]);
    bytes.extend_from_slice(&[0x8a, 0x01, 0x02, 0x08, 0x05]);
    bytes.extend_from_slice(&[0xa0, 0x01, 0x07]);
    bytes.extend_from_slice(&[0x8a, 0x01, 0x03, 0x12, 0x01, b'z']);
    bytes.extend_from_slice(&[0xa2, 0x01, 0x02, 0x08, 0x09]);
    // An unknown field, skipped.
    bytes.extend_from_slice(&[0xf8, 0x3e, 0x01]);
    let want = reference(
        &DynamicMessage::decode(desc.clone(), bytes.as_slice()).unwrap(),
        &SerializeOptions::new(),
    );
    assert_eq!(printed(&desc, &bytes, &PrintOptions::default()), want);
    assert_eq!(want["inner"], serde_json::json!({"a": 5, "b": "z"}));
}

#[test]
fn malformed_bytes_are_refused() {
    let desc = everything();
    for (bytes, needle) in [
        (vec![0x18], "inside a varint"),
        (vec![0x8a, 0x01, 0x05, 0x08], "past the message's end"),
        // A length claim of 2^63: refused, nothing allocated for it.
        (
            vec![
                0x8a, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
            "past the message's end",
        ),
        (vec![0x72, 0x02, 0xff, 0xfe], "not UTF-8"),
        (vec![0x1b], "wire type 3"),
        (
            vec![
                0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            "varint",
        ),
        (vec![0x1d, 1, 0, 0, 0], "wire type its kind does not use"),
    ] {
        let mut out = Vec::new();
        let e = proto_to_json(&desc, &bytes, &PrintOptions::default(), &mut out)
            .expect_err(&format!("{bytes:?} is refused"));
        assert_eq!(e.category(), Category::Invalid);
        assert!(e.message().contains(needle), "{bytes:?}: {e}");
    }
}

#[test]
fn one_field_prints_alone_at_any_depth() {
    // `response_body`: a top-level field read in place, a nested one
    // through its parent, and an absent one as its default.
    let desc = everything();
    let message = build(
        &desc,
        r#"{"rInt32": [3, 4], "inner": {"a": 1, "children": [{"b": "x"}]}}"#,
    );
    let bytes = message.encode_to_vec();
    let print = |names: &[&str]| {
        let mut path = Vec::new();
        let mut current = desc.clone();
        for name in names {
            let field = current.get_field_by_name(name).unwrap();
            if let prost_reflect::Kind::Message(m) = field.kind() {
                current = m;
            }
            path.push(field);
        }
        let mut out = Vec::new();
        field_to_json(&desc, &path, &bytes, &PrintOptions::default(), &mut out).unwrap();
        serde_json::from_slice::<serde_json::Value>(&out).unwrap()
    };
    assert_eq!(print(&["r_int32"]), serde_json::json!([3, 4]));
    assert_eq!(
        print(&["inner", "children"]),
        serde_json::json!([{"b": "x"}])
    );
    assert_eq!(print(&["inner", "a"]), serde_json::json!(1));
    assert_eq!(print(&["f_string"]), serde_json::json!(""));
    assert_eq!(print(&["r_string"]), serde_json::json!([]));
}
