//! Random bytes through the transcoder's codecs, on `everything.proto`
//! (every scalar, list, map, oneof and well-known type). Checks: no panic;
//! any chunking gives the same bytes or the same error as one chunk; what
//! JSON to protobuf writes, protobuf to JSON prints, and reading that JSON
//! back gives the same message; random bytes printed as JSON never panic;
//! the same bytes as a stream of messages (a client stream's body) give
//! the same messages at any chunking, and a body of one object gives the
//! one message JSON to protobuf writes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost_reflect::{DescriptorPool, MessageDescriptor};
use wirespeed_transcode::{
    proto_to_json, EncodeOptions, JsonToProto, JsonToProtoStream, PrintOptions,
};

fn everything() -> &'static MessageDescriptor {
    static DESC: OnceLock<MessageDescriptor> = OnceLock::new();
    DESC.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/wirespeed-transcode/tests/protos");
        let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
        DescriptorPool::from_file_descriptor_set(files)
            .expect("a pool")
            .get_message_by_name("wirespeed.test.Everything")
            .expect("the message")
    })
}

fn encode(body: &[u8], chunk: usize) -> Result<Vec<u8>, String> {
    let mut encoder = JsonToProto::new(everything().clone(), EncodeOptions::default());
    for piece in body.chunks(chunk.max(1)) {
        encoder.feed(piece).map_err(|e| e.message().to_owned())?;
    }
    encoder.finish().map_err(|e| e.message().to_owned())
}

fn stream(body: &[u8], chunk: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut encoder = JsonToProtoStream::new(everything().clone(), EncodeOptions::default());
    let mut messages = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        encoder.feed(piece).map_err(|e| e.message().to_owned())?;
        messages.extend(encoder.messages());
    }
    encoder.finish().map_err(|e| e.message().to_owned())?;
    messages.extend(encoder.messages());
    Ok(messages)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let desc = everything();
    let whole = encode(body, body.len());
    assert_eq!(encode(body, usize::from(first % 16) + 1), whole, "chunkings differ");
    if let Ok(bytes) = &whole {
        let mut json = Vec::new();
        proto_to_json(desc, bytes, &PrintOptions::default(), &mut json).expect("our bytes print");
        let again = JsonToProto::encode(desc.clone(), &json, EncodeOptions::default())
            .unwrap_or_else(|e| panic!("our JSON reads back: {e}: {}", String::from_utf8_lossy(&json)));
        let mut json_again = Vec::new();
        proto_to_json(desc, &again, &PrintOptions::default(), &mut json_again).expect("prints again");
        assert_eq!(json, json_again, "a round trip changes the message");
    }
    let mut json = Vec::new();
    let _ = proto_to_json(desc, body, &PrintOptions::default(), &mut json);
    let messages = stream(body, body.len());
    assert_eq!(stream(body, usize::from(first % 16) + 1), messages, "stream chunkings differ");
    if let (Ok(one), true) = (&whole, body.trim_ascii_start().starts_with(b"{")) {
        assert_eq!(messages.as_deref(), Ok(&[one.clone()][..]), "one object is a stream of one");
    }
});
