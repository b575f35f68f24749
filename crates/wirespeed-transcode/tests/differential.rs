//! Random messages of `everything.proto` as JSON: our JSON to protobuf
//! agrees with prost-reflect's reading at a random chunking (the bytes are
//! the same at every chunking), and our protobuf to JSON agrees with
//! prost-reflect's writing.

use base64::Engine;
use proptest::prelude::*;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use serde_json::{json, Map, Value};
use wirespeed_transcode::{proto_to_json, EncodeOptions, JsonToProto, PrintOptions};

fn everything() -> MessageDescriptor {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
    DescriptorPool::from_file_descriptor_set(files)
        .expect("a pool")
        .get_message_by_name("wirespeed.test.Everything")
        .expect("the message")
}

fn b64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn f32_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f32>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| json!(x)),
        Just(json!("NaN")),
        Just(json!("-Infinity")),
    ]
}

/// Doubles whose shortest text serde_json reads back exactly: its default
/// parser is not correctly rounded (`-4.164620961523392e-21` reads one
/// ulp off), so the reference would be wrong on the others. Ours is
/// correctly rounded (`a_double_is_rounded_correctly`).
fn f64_json() -> impl Strategy<Value = Value> {
    any::<f64>()
        .prop_filter("finite, and read back by serde_json", |x| {
            x.is_finite()
                && serde_json::from_str::<f64>(&serde_json::to_string(x).unwrap()).unwrap() == *x
        })
        .prop_map(|x| json!(x))
}

fn inner() -> impl Strategy<Value = Value> {
    let leaf = (any::<i32>(), "\\PC{0,8}").prop_map(|(a, b)| json!({"a": a, "b": b}));
    leaf.prop_recursive(3, 12, 3, |children| {
        (any::<i32>(), prop::collection::vec(children, 0..3))
            .prop_map(|(a, c)| json!({"a": a, "children": c}))
    })
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1e12f64..1e12).prop_map(|x| json!(x)),
        "\\PC{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A random message as JSON: each field present or not.
fn message() -> impl Strategy<Value = Value> {
    let scalars = (
        prop::option::of(f64_json()),
        prop::option::of(f32_json()),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<bool>()),
        prop::option::of("\\PC{0,12}"),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..12)),
        prop::option::of(prop_oneof![
            Just(json!("RED")),
            Just(json!("GREEN")),
            Just(json!(0))
        ]),
    );
    let lists = (
        prop::option::of(prop::collection::vec(any::<i32>(), 0..8)),
        prop::option::of(prop::collection::vec(f64_json(), 0..4)),
        prop::option::of(prop::collection::vec("\\PC{0,4}", 0..4)),
        prop::option::of(prop::collection::vec(inner(), 0..3)),
        prop::option::of(prop::collection::vec(any::<i64>(), 0..4)),
        prop::option::of(prop::collection::btree_map("\\PC{0,4}", any::<i32>(), 0..4)),
        prop::option::of(prop::collection::btree_map(any::<i64>(), inner(), 0..3)),
        prop::option::of(inner()),
    );
    let wkts = (
        prop::option::of((0i64..253_402_300_799, 0u32..1_000_000_000)),
        prop::option::of((-315_576_000_000i64..315_576_000_000, 0i32..1_000_000_000)),
        prop::option::of(prop::collection::btree_map("[a-z]{1,4}", any_json(), 0..4)),
        prop::option::of(any_json()),
        prop::option::of(any::<i32>()),
        prop::option::of(prop_oneof![
            "\\PC{0,4}".prop_map(|s| json!({"oString": s})),
            inner().prop_map(|i| json!({"oInner": i})),
            any::<i32>().prop_map(|n| json!({"oInt": n})),
        ]),
    );
    (scalars, lists, wkts).prop_map(|(s, l, w)| {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_owned(), v);
            }
        };
        put("fDouble", s.0);
        put("fFloat", s.1);
        put("fInt32", s.2.map(|v| json!(v)));
        put("fInt64", s.3.map(|v| json!(v.to_string())));
        put("fUint64", s.4.map(|v| json!(v.to_string())));
        put("fSint32", s.5.map(|v| json!(v)));
        put("fSfixed64", s.6.map(|v| json!(v)));
        put("fBool", s.7.map(|v| json!(v)));
        put("fString", s.8.map(|v| json!(v)));
        put("fBytes", s.9.map(|v| b64(&v)));
        put("color", s.10);
        put("rInt32", l.0.map(|v| json!(v)));
        put("rDouble", l.1.map(Value::Array));
        put("rString", l.2.map(|v| json!(v)));
        put("rInner", l.3.map(Value::Array));
        put(
            "rSint64",
            l.4.map(|v| json!(v.iter().map(|x| x.to_string()).collect::<Vec<_>>())),
        );
        put("mStrInt", l.5.map(|v| json!(v)));
        put(
            "mIntInner",
            l.6.map(|v| Value::Object(v.into_iter().map(|(k, i)| (k.to_string(), i)).collect())),
        );
        put("inner", l.7);
        put(
            "ts",
            w.0.map(|(s, n)| {
                let t = prost_types::Timestamp {
                    seconds: s - 62_135_596_800 / 2,
                    nanos: n as i32,
                };
                json!(t.to_string())
            }),
        );
        put(
            "dur",
            w.1.map(|(s, n)| {
                let n = if s < 0 { -n } else { n };
                json!(prost_types::Duration {
                    seconds: s,
                    nanos: n
                }
                .to_string())
            }),
        );
        put("st", w.2.map(|v| Value::Object(v.into_iter().collect())));
        put("val", w.3);
        put("wInt32", w.4.map(|v| json!(v)));
        if let Some(Value::Object(o)) = w.5 {
            for (k, v) in o {
                m.insert(k, v);
            }
        }
        Value::Object(m)
    })
}

#[test]
fn a_double_is_rounded_correctly() {
    let desc = everything();
    let text = "-4.164620961523392e-21";
    let bytes = JsonToProto::encode(
        desc.clone(),
        format!(r#"{{"fDouble": {text}}}"#).as_bytes(),
        EncodeOptions::default(),
    )
    .unwrap();
    let want: f64 = text.parse().unwrap();
    assert_eq!(bytes[1..], want.to_le_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Packed double and float lists (read by the one-pass run) round each
    /// value once, as `str::parse` does, at any chunking.
    #[test]
    fn packed_floats_are_rounded_once(
        values in prop::collection::vec(
            (any::<u64>(), -25i32..18, 1usize..20, any::<bool>()), 1..64),
        chunk in 1usize..64,
    ) {
        let desc = everything();
        // Decimal texts of 1 to 19 significant digits, in float's range.
        let texts: Vec<String> = values
            .iter()
            .map(|&(m, e, digits, negative)| {
                let m = m % 10u64.pow(digits as u32);
                let sign = if negative { "-" } else { "" };
                match e % 3 {
                    0 => format!("{sign}{m}e{e}"),
                    1 => format!("{sign}0.{m:0>width$}", width = digits),
                    _ => format!("{sign}{m}.5"),
                }
            })
            .collect();
        let list = texts.join(", ");
        let json = format!(r#"{{"rDouble": [{list}], "rFloat": [{list}]}}"#);
        let mut encoder = JsonToProto::new(desc.clone(), EncodeOptions::default());
        for piece in json.as_bytes().chunks(chunk) {
            encoder.feed(piece).unwrap();
        }
        let bytes = encoder.finish().unwrap();
        let message = DynamicMessage::decode(desc.clone(), bytes.as_slice()).unwrap();
        let doubles: Vec<f64> = message.get_field_by_name("r_double").unwrap().as_list().unwrap()
            .iter().map(|v| v.as_f64().unwrap()).collect();
        let floats: Vec<f32> = message.get_field_by_name("r_float").unwrap().as_list().unwrap()
            .iter().map(|v| v.as_f32().unwrap()).collect();
        let want_doubles: Vec<f64> = texts.iter().map(|t| t.parse().unwrap()).collect();
        let want_floats: Vec<f32> = texts.iter().map(|t| t.parse().unwrap()).collect();
        prop_assert_eq!(doubles, want_doubles);
        prop_assert_eq!(floats, want_floats);
    }
}

fn as_json(message: &DynamicMessage) -> Value {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    message
        .serialize_with_options(&mut ser, &SerializeOptions::new())
        .unwrap();
    serde_json::from_slice(&out).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_messages_agree_with_prost_reflect(doc in message(), cuts in prop::collection::vec(1usize..40, 1..16)) {
        let desc = everything();
        let text = serde_json::to_string(&doc).unwrap();
        let whole = JsonToProto::encode(desc.clone(), text.as_bytes(), EncodeOptions::default())
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        // At a random chunking, the same bytes.
        let mut encoder = JsonToProto::new(desc.clone(), EncodeOptions::default());
        let mut rest = text.as_bytes();
        for cut in cuts.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, tail) = rest.split_at((*cut).min(rest.len()));
            encoder.feed(piece).unwrap();
            rest = tail;
        }
        prop_assert_eq!(&encoder.finish().unwrap(), &whole);

        let mut de = serde_json::Deserializer::from_str(&text);
        let reference = DynamicMessage::deserialize(desc.clone(), &mut de).unwrap();
        let ours = DynamicMessage::decode(desc.clone(), whole.as_slice()).unwrap();
        prop_assert_eq!(as_json(&ours), as_json(&reference), "{}", text);

        // And back: our JSON of prost-reflect's bytes.
        let mut printed = Vec::new();
        proto_to_json(&desc, &reference.encode_to_vec(), &PrintOptions::default(), &mut printed).unwrap();
        let printed: Value = serde_json::from_slice(&printed).unwrap();
        prop_assert_eq!(printed, as_json(&reference), "{}", text);
    }
}
