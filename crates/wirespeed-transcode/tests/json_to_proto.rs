//! JSON to protobuf against prost-reflect's serde mapping, the reference:
//! every shape of `everything.proto`, at every chunking; and the errors.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use wirespeed_transcode::{Category, EncodeOptions, JsonToProto, TranscodeError};

fn pool() -> DescriptorPool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
    DescriptorPool::from_file_descriptor_set(files).expect("a pool")
}

fn message(name: &str) -> MessageDescriptor {
    pool().get_message_by_name(name).expect("the message")
}

/// Our encoding, the same at every chunking.
fn ours(desc: &MessageDescriptor, json: &str) -> Result<Vec<u8>, TranscodeError> {
    let whole = JsonToProto::encode(desc.clone(), json.as_bytes(), EncodeOptions::default());
    for chunk in [1, 2, 3, 7, 64] {
        let mut encoder = JsonToProto::new(desc.clone(), EncodeOptions::default());
        let mut result = Ok(());
        for piece in json.as_bytes().chunks(chunk) {
            result = encoder.feed(piece);
            if result.is_err() {
                break;
            }
        }
        let chunked = result.and_then(|()| encoder.finish());
        assert_eq!(
            chunked.as_ref().map_err(|e| e.message().to_owned()),
            whole.as_ref().map_err(|e| e.message().to_owned()),
            "chunks of {chunk} differ for {json}"
        );
    }
    whole
}

/// prost-reflect's reading of the same JSON.
fn reference(desc: &MessageDescriptor, json: &str) -> DynamicMessage {
    let mut de = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize(desc.clone(), &mut de)
        .unwrap_or_else(|e| panic!("prost-reflect refuses {json}: {e}"));
    de.end().unwrap();
    message
}

fn agrees(json: &str) {
    let desc = message("wirespeed.test.Everything");
    let bytes = ours(&desc, json).unwrap_or_else(|e| panic!("{json}: {e}"));
    let got = DynamicMessage::decode(desc.clone(), bytes.as_slice()).expect("our bytes decode");
    let want = reference(&desc, json);
    // Compared as their JSON (object keys unordered, NaN as "NaN").
    let as_json = |m: &DynamicMessage| serde_json::to_value(m).expect("serializes");
    assert_eq!(as_json(&got), as_json(&want), "{json}");
    // The same bytes as prost-reflect writes, where no map (or Struct, a
    // map) makes the order of entries free.
    let maps = ["\"m", "\"st\"", "{\"k", "\"val\": {", "\"rVal\"", "Struct"];
    if !maps.iter().any(|m| json.contains(m)) {
        assert_eq!(bytes, want.encode_to_vec(), "{json}");
    }
}

#[test]
fn scalars_take_every_form_the_mapping_allows() {
    agrees(
        r#"{"fDouble": 1.5, "fFloat": 0.1, "fInt32": -7, "fInt64": "-9007199254740993",
        "fUint32": 4294967295, "fUint64": "18446744073709551615", "fSint32": -2147483648,
        "fSint64": -9223372036854775808, "fFixed32": 1, "fFixed64": "2", "fSfixed32": -3,
        "fSfixed64": -4, "fBool": true, "fString": "h\u00e9\ud83d\ude00", "fBytes": "AAEC/w==",
        "color": "GREEN"}"#,
    );
    agrees(
        r#"{"f_double": "NaN", "f_float": "-Infinity", "f_int32": "12", "f_int64": 1e3,
        "f_bytes": "AAEC_w", "color": 1}"#,
    );
    agrees(
        r#"{"fInt32": 0, "fString": "", "fBool": false, "fDouble": 0, "color": "COLOR_UNSPECIFIED"}"#,
    );
    agrees(r#"{"fInt32": null, "inner": null, "rInt32": null, "mStrInt": null}"#);
    agrees(r#"{"customName": "x"}"#);
    agrees(r#"{"json_named": "y"}"#);
    agrees(r#"{"fDouble": 1.7976931348623157e308, "fFloat": 3.4028234e38, "fInt32": 2147483647}"#);
}

#[test]
fn messages_lists_and_maps_nest() {
    agrees(
        r#"{"inner": {"a": 1, "b": "x", "children": [{"a": 2}, {"children": [{"b": "deep"}]}]}}"#,
    );
    agrees(
        r#"{"rInt32": [1, -2, 300000, 0], "rDouble": [0.5, -1e-300], "rString": ["a", "", "c"],
        "rInner": [{"a": 1}, {}], "rColor": ["RED", 2, "COLOR_UNSPECIFIED"], "rBytes": ["", "AA=="],
        "rSint64": ["-1", 2], "rFloat": [1.5, "NaN"], "rBool": [true, false], "rFixed64": ["18446744073709551615"]}"#,
    );
    agrees(r#"{"rInt32": [], "rInner": []}"#);
    agrees(
        r#"{"mStrInt": {"a": 1, "b": 0}, "mIntInner": {"-5": {"a": 5}, "7": {}},
        "mBool": {"true": "t", "false": ""}, "mEnum": {"1": "RED", "2": 0},
        "mValue": {"n": null, "x": [1, "s", {"k": true}]}}"#,
    );
    // A record of more than 127 bytes, whose length takes two bytes.
    let long = "x".repeat(300);
    agrees(&format!(
        r#"{{"inner": {{"b": "{long}", "children": [{{"b": "{long}"}}]}}}}"#
    ));
    let many: Vec<String> = (0..5000)
        .map(|i| (i * 7919 % 100_003 - 50_000).to_string())
        .collect();
    agrees(&format!(r#"{{"rInt32": [{}]}}"#, many.join(",")));
}

#[test]
fn packed_integer_runs_read_as_the_general_path_does() {
    // The one-loop path of packed integer lists, at every chunking (ours()
    // cuts each body 6 ways): spacing, signs, every packed integer kind.
    agrees(
        r#"{"rInt32": [ 1 ,-2,
        3,	-2147483648 , 2147483647, 0, 10, -10 ], "rColor": [1, 2, 0],
        "rSint64": [-1, 2, -9223372036854775808, 9223372036854775807],
        "rFixed64": [0, 18446744073709551615, 5]}"#,
    );
    for (json, needle) in [
        (r#"{"rInt32": [1, 2, 2147483648, 4]}"#, "out of range"),
        (r#"{"rInt32": [1, 2, 07, 4]}"#, "leading zeros"),
        (r#"{"rFixed64": [1, -2, 3]}"#, "out of range"),
        (r#"{"rInt32": [1, 2, 3,]}"#, "expected a value"),
    ] {
        let e = refused(json);
        assert!(e.message().contains(needle), "{json}: {e}");
    }
}

#[test]
fn oneofs_and_presence() {
    agrees(r#"{"oString": "s"}"#);
    agrees(r#"{"oInner": {"a": 3}}"#);
    agrees(r#"{"oInt": 0}"#);
    agrees(r#"{"optInt": 0, "optString": ""}"#);
}

#[test]
fn well_known_types_take_their_json_forms() {
    agrees(
        r#"{"ts": "1972-01-01T10:00:20.021Z", "dur": "-1.5s", "mask": "fInt32,inner.children",
        "empty": {}}"#,
    );
    agrees(r#"{"st": {"a": 1, "b": [true, null, "x", {"c": {}}], "d": {"e": -2.5}}}"#);
    agrees(r#"{"val": 3}"#);
    agrees(r#"{"val": null}"#);
    agrees(r#"{"val": "s"}"#);
    agrees(r#"{"val": {"a": [1, 2]}}"#);
    agrees(r#"{"val": [[], {}]}"#);
    agrees(r#"{"lv": [1, "two", false, null, [3]]}"#);
    agrees(r#"{"rVal": [1, null, {"a": "b"}, []], "rTs": ["2024-02-29T12:00:00+01:00"]}"#);
    agrees(
        r#"{"wInt32": 5, "wString": "s", "wBytes": "AQI=", "wDouble": "Infinity", "wInt64": "-3",
        "wBool": false, "wUint64": "7", "wFloat": 1.25, "wUint32": 0}"#,
    );
    agrees(
        r#"{"any": {"@type": "type.googleapis.com/wirespeed.test.Inner", "a": 9, "children": [{"b": "c"}]}}"#,
    );
    agrees(r#"{"any": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "2s"}}"#);
    agrees(
        r#"{"any": {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"k": 1}}}"#,
    );
    // An Any holding an Any: the inner one, with its own form, under "value".
    agrees(
        r#"{"any": {"@type": "type.googleapis.com/google.protobuf.Any", "value": {"@type": "type.googleapis.com/wirespeed.test.Inner", "a": 2}}}"#,
    );
    // An Any with nothing in it is the empty Any (prost-reflect wants a
    // '@type'; protobuf's own parser takes `{}`).
    let desc = message("wirespeed.test.Everything");
    assert_eq!(
        ours(&desc, r#"{"any": {}}"#).unwrap(),
        vec![0x92, 0x04, 0x00]
    );
}

fn refused(json: &str) -> TranscodeError {
    let desc = message("wirespeed.test.Everything");
    ours(&desc, json).expect_err(json)
}

#[test]
fn mistakes_are_named() {
    for (json, category, needle) in [
        (r#"{"nope": 1}"#, Category::Invalid, "has no field 'nope'"),
        (
            r#"{"fInt32": 1, "f_int32": 2}"#,
            Category::Invalid,
            "given twice",
        ),
        (
            r#"{"oString": "a", "oInt": 1}"#,
            Category::Invalid,
            "oneof 'choice'",
        ),
        (
            r#"{"fInt32": 2147483648}"#,
            Category::Invalid,
            "out of range",
        ),
        (r#"{"fUint32": -1}"#, Category::Invalid, "out of range"),
        (r#"{"fInt32": 1.5}"#, Category::Invalid, "not an integer"),
        (
            r#"{"fFloat": 1e39}"#,
            Category::Invalid,
            "out of float's range",
        ),
        (
            r#"{"color": "BLUE"}"#,
            Category::Invalid,
            "not a value of enum",
        ),
        (r#"{"fBytes": "!!"}"#, Category::Invalid, "invalid base64"),
        (r#"{"fBool": "true"}"#, Category::Invalid, "true or false"),
        (r#"{"fString": 1}"#, Category::Invalid, "takes a string"),
        (r#"{"rInt32": 1}"#, Category::Invalid, "takes a list"),
        (
            r#"{"rInt32": [null]}"#,
            Category::Invalid,
            "may not hold null",
        ),
        (r#"{"inner": [1]}"#, Category::Invalid, "not a list"),
        (r#"{"ts": "yesterday"}"#, Category::Invalid, "RFC 3339"),
        (
            r#"{"ts": "1970-01-01T00:00:0\u00e9Z"}"#,
            Category::Invalid,
            "RFC 3339",
        ),
        (r#"{"dur": "1.\u00e9s"}"#, Category::Invalid, "duration"),
        (r#"{"dur": 5}"#, Category::Invalid, "written as a string"),
        (
            r#"{"mIntInner": {"x": {}}}"#,
            Category::Invalid,
            "not an integer",
        ),
        (
            r#"{"mStrInt": {"a": 1, "a": 2}}"#,
            Category::Invalid,
            "twice",
        ),
        (
            r#"{"any": {"a": 1, "@type": "x"}}"#,
            Category::Invalid,
            "'@type' first",
        ),
        (
            r#"{"any": {"@type": "type.googleapis.com/no.Such"}}"#,
            Category::Invalid,
            "do not have",
        ),
        (r#"{"fString": "\ud800"}"#, Category::Syntax, "surrogate"),
        (r#"{"fInt32": 1"#, Category::Syntax, "ends"),
        (r#"[1]"#, Category::Invalid, "not a list"),
        // protojson and json_format refuse a body of null.
        (r#"null"#, Category::Invalid, "the body is null"),
    ] {
        let e = refused(json);
        assert_eq!(e.category(), category, "{json}: {e}");
        assert!(e.message().contains(needle), "{json}: {e}");
    }
    let deep =
        "{\"inner\":".to_owned() + &"{\"children\":[".repeat(40) + "{}" + &"]}".repeat(40) + "}";
    assert_eq!(refused(&deep).category(), Category::Limit);
}

#[test]
fn unknown_fields_may_be_skipped() {
    let desc = message("wirespeed.test.Everything");
    let options = EncodeOptions {
        ignore_unknown_fields: true,
        ..EncodeOptions::default()
    };
    let json = r#"{"nope": {"deep": [1, {"x": []}]}, "fInt32": 3, "color": "BLUE", "other": null}"#;
    let bytes = JsonToProto::encode(desc.clone(), json.as_bytes(), options).unwrap();
    assert_eq!(bytes, reference(&desc, r#"{"fInt32": 3}"#).encode_to_vec());
}

#[test]
fn the_message_size_is_bounded() {
    let desc = message("wirespeed.test.Everything");
    let options = EncodeOptions {
        max_message_bytes: 100,
        ..EncodeOptions::default()
    };
    let json = format!(r#"{{"fString": "{}"}}"#, "x".repeat(200));
    let e = JsonToProto::encode(desc, json.as_bytes(), options).unwrap_err();
    assert_eq!(e.category(), Category::Limit, "{e}");
}
