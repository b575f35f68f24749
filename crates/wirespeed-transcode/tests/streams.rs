//! A stream of messages (a client-streaming call's body): each message is
//! prost-reflect's reading of its JSON, as an array or newline-delimited,
//! at every chunking; and what is not a stream of messages is refused.

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use wirespeed_transcode::{EncodeOptions, JsonToProtoStream, StreamFormat};

fn message(name: &str) -> MessageDescriptor {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
    let pool = DescriptorPool::from_file_descriptor_set(files).expect("a pool");
    pool.get_message_by_name(name).expect("the message")
}

/// The messages of `body`, fed in chunks of `chunk`, each decoded and
/// printed by prost-reflect; and how many were ready before the end.
fn stream(desc: &MessageDescriptor, body: &str, chunk: usize) -> Result<Vec<String>, String> {
    let mut encoder = JsonToProtoStream::new(desc.clone(), EncodeOptions::default());
    let mut out = Vec::new();
    for piece in body.as_bytes().chunks(chunk) {
        encoder.feed(piece).map_err(|e| e.to_string())?;
        out.extend(encoder.messages());
    }
    encoder.finish().map_err(|e| e.to_string())?;
    out.extend(encoder.messages());
    assert_eq!(encoder.count(), out.len() as u64);
    Ok(out
        .iter()
        .map(|bytes| {
            let m = DynamicMessage::decode(desc.clone(), bytes.as_slice()).expect("decodes");
            serde_json::to_string(&m).expect("prints")
        })
        .collect())
}

/// prost-reflect's reading of each message.
fn reference(desc: &MessageDescriptor, messages: &[&str]) -> Vec<String> {
    messages
        .iter()
        .map(|json| {
            let mut de = serde_json::Deserializer::from_str(json);
            let m = DynamicMessage::deserialize(desc.clone(), &mut de).expect("reference reads");
            serde_json::to_string(&m).expect("prints")
        })
        .collect()
}

#[test]
fn arrays_and_newline_delimited_bodies_give_each_message() {
    let desc = message("wirespeed.test.Everything");
    let messages = [
        r#"{"fInt32": 1, "fString": "a", "rInt32": [1, 2, 3, 4, 5, 6, 7]}"#,
        r#"{}"#,
        r#"{"inner": {"b": "x", "children": [{"a": 3}]}, "rString": ["x", "y"], "rInner": [{}, {"b": "y"}]}"#,
        r#"{"fInt64": "9007199254740993", "st": {"a": [1, {"b": null}]}}"#,
    ];
    let want = reference(&desc, &messages);
    let array = format!(" [ {} ] ", messages.join(" ,\n "));
    let ndjson = messages.join("\n") + "\n";
    let packed = messages.join("");
    for body in [&array, &ndjson, &packed] {
        for chunk in [1, 2, 5, 13, 4096] {
            assert_eq!(
                stream(&desc, body, chunk).unwrap(),
                want,
                "{body} by {chunk}"
            );
        }
    }
    assert_eq!(stream(&desc, "[]", 1).unwrap(), Vec::<String>::new());
    assert_eq!(stream(&desc, " \n", 1).unwrap(), Vec::<String>::new());
    assert_eq!(stream(&desc, messages[0], 3).unwrap(), want[..1]);
}

#[test]
fn a_message_is_handed_on_as_soon_as_it_closes() {
    let desc = message("wirespeed.test.Everything");
    let mut encoder = JsonToProtoStream::new(desc, EncodeOptions::default());
    encoder.feed(br#"[{"fInt32": 1}, {"fInt32""#).unwrap();
    assert_eq!(encoder.messages().count(), 1);
    encoder.feed(br#": 2}"#).unwrap();
    assert_eq!(encoder.messages().count(), 1);
    encoder.feed(b"]").unwrap();
    encoder.finish().unwrap();
    assert_eq!(encoder.messages().count(), 0);
}

#[test]
fn what_is_not_a_stream_of_messages_is_refused() {
    let desc = message("wirespeed.test.Everything");
    for (body, needle) in [
        ("[1]", "message 1 of the stream is a number"),
        ("[{}, \"x\"]", "message 2 of the stream is a string"),
        ("[[{}]]", "is an array"),
        ("{} []", "message 2 of the stream is an array"),
        ("[{}] {}", "after the stream's closing ']'"),
        ("[{}, null]", "is null"),
        ("{\"nope\": 1}", "nope"),
        ("[{\"fInt32\": 1}", "ends before"),
        ("{\"fInt32\": 1} {\"fInt32\":", "ends before"),
    ] {
        for chunk in [1, 4, 100] {
            let e = stream(&desc, body, chunk).unwrap_err();
            assert!(e.contains(needle), "{body} by {chunk}: {e}");
        }
    }
    // Each message is held to the size bound, not the stream.
    let options = EncodeOptions {
        max_message_bytes: 16,
        ..EncodeOptions::default()
    };
    let mut encoder = JsonToProtoStream::new(message("wirespeed.test.Everything"), options);
    for _ in 0..100 {
        encoder.feed(br#"{"fString": "0123456789"}"#).unwrap();
    }
    assert_eq!(encoder.messages().count(), 100);
    let e = encoder
        .feed(br#"{"rInt32": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}"#)
        .unwrap_err();
    assert!(e.message().contains("larger than 16 bytes"), "{e}");
}

#[test]
fn accept_picks_the_framing() {
    assert_eq!(StreamFormat::from_accept(""), StreamFormat::JsonArray);
    assert_eq!(
        StreamFormat::from_accept("application/json"),
        StreamFormat::JsonArray
    );
    assert_eq!(
        StreamFormat::from_accept("text/event-stream"),
        StreamFormat::Sse
    );
    assert_eq!(
        StreamFormat::from_accept("application/json, application/x-ndjson;q=0.9"),
        StreamFormat::Ndjson
    );
    let mut out = Vec::new();
    let f = StreamFormat::Sse;
    f.begin(&mut out);
    f.before_message(true, &mut out);
    out.extend_from_slice(b"{}");
    f.after_message(&mut out);
    assert!(f.error(br#"{"code":2}"#, &mut out));
    assert_eq!(
        out,
        b"data: {}\n\nevent: error\ndata: {\"code\":2}\n\n".to_vec()
    );
    assert!(!StreamFormat::JsonArray.error(b"{}", &mut out));
}

#[test]
fn well_known_types_written_as_scalars_or_lists_stream_as_protojson_writes_them() {
    for (name, messages) in [
        (
            "google.protobuf.Duration",
            &[r#""1s""#, r#""-0.5s""#, r#""0s""#][..],
        ),
        (
            "google.protobuf.Timestamp",
            &[
                r#""1970-01-01T00:00:01Z""#,
                r#""2024-02-29T12:00:00.5+01:00""#,
            ][..],
        ),
        (
            "google.protobuf.Int64Value",
            &[r#""9007199254740993""#, "7"][..],
        ),
        ("google.protobuf.StringValue", &[r#""x""#, r#""""#][..]),
        ("google.protobuf.FieldMask", &[r#""a.b,c""#][..]),
        (
            "google.protobuf.Value",
            &[
                "1.5",
                r#""s""#,
                "true",
                "null",
                r#"{"k": [1]}"#,
                "[1, \"two\"]",
            ][..],
        ),
        ("google.protobuf.ListValue", &["[1, null]", "[]"][..]),
    ] {
        let desc = message(name);
        let want = reference(&desc, messages);
        let array = format!("[{}]", messages.join(", "));
        let ndjson = messages.join("\n") + "\n";
        let bodies: &[&str] = if name.ends_with("ListValue") {
            &[&array]
        } else {
            &[&array, &ndjson]
        };
        for body in bodies {
            for chunk in [1, 3, 4096] {
                assert_eq!(
                    stream(&desc, body, chunk).unwrap(),
                    want,
                    "{name}: {body} by {chunk}"
                );
            }
        }
    }
    // A message written as an object still refuses a scalar.
    let e = stream(&message("google.protobuf.Empty"), r#"["1s"]"#, 1).unwrap_err();
    assert!(e.contains("message 1 of the stream is a string"), "{e}");
}
