//! `google.rpc.Status` as JSON, the body of every error answer:
//! `{"code", "message", "details"}`. The details come from the upstream's
//! `grpc-status-details-bin` (an encoded `Status`), each an `Any` printed
//! through the descriptors: the services' own, plus google.rpc's standard
//! error details (`ErrorInfo`, `BadRequest`, `RetryInfo`...), compiled
//! into this crate so that they print without the user shipping them.
//! A detail of a type no descriptor has prints as `{"@type", "value"}`
//! with its bytes in base64, rather than losing the error.

use base64::Engine;
use prost::Message;
use prost_reflect::DescriptorPool;
use wirespeed_json::encode_string;

use crate::decode::{proto_to_json, PrintOptions};

/// google.rpc's `Status` and error details, compiled by `build.rs`.
const RPC_TYPES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rpc_status.bin"));

/// `pool` with google.rpc's `Status` and standard error details added,
/// where it does not have their files already.
pub fn with_rpc_types(pool: &DescriptorPool) -> DescriptorPool {
    let mut pool = pool.clone();
    let Ok(set) = prost_types::FileDescriptorSet::decode(RPC_TYPES) else {
        return pool;
    };
    let missing: Vec<_> = set
        .file
        .into_iter()
        .filter(|f| pool.get_file_by_name(f.name()).is_none())
        .collect();
    let mut with = pool.clone();
    match with.add_file_descriptor_protos(missing) {
        Ok(()) => with,
        // A set that defines these names differently keeps its own.
        Err(_) => std::mem::take(&mut pool),
    }
}

/// The fields of an encoded `Status`, its details left encoded.
#[derive(Clone, PartialEq, Message)]
struct RawStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(bytes = "vec", repeated, tag = "3")]
    details: Vec<Vec<u8>>,
}

/// An encoded `Any`'s fields.
#[derive(Clone, PartialEq, Message)]
struct RawAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// Writes the `google.rpc.Status` JSON of `code` and `message`, with the
/// details of `details` (an encoded `Status`, as `grpc-status-details-bin`
/// carries) printed through `pool`.
pub fn status_json(
    code: i32,
    message: &str,
    details: Option<&[u8]>,
    pool: &DescriptorPool,
    options: &PrintOptions,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"{\"code\":");
    out.extend_from_slice(itoa::Buffer::new().format(code).as_bytes());
    out.extend_from_slice(b",\"message\":");
    encode_string(message, out);
    out.extend_from_slice(b",\"details\":[");
    let status = details.and_then(|bytes| RawStatus::decode(bytes).ok());
    let any = pool.get_message_by_name("google.protobuf.Any");
    for (i, detail) in status.iter().flat_map(|s| &s.details).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mark = out.len();
        let printed = any
            .as_ref()
            .is_some_and(|any| proto_to_json(any, detail, options, out).is_ok());
        if !printed {
            out.truncate(mark);
            let raw = RawAny::decode(detail.as_slice()).unwrap_or_default();
            out.extend_from_slice(b"{\"@type\":");
            encode_string(&raw.type_url, out);
            out.extend_from_slice(b",\"value\":\"");
            let value = base64::engine::general_purpose::STANDARD.encode(&raw.value);
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\"}");
        }
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(type_url: &str, value: Vec<u8>) -> Vec<u8> {
        RawAny {
            type_url: type_url.to_owned(),
            value,
        }
        .encode_to_vec()
    }

    #[test]
    fn standard_details_print_and_unknown_ones_keep_their_bytes() {
        let pool = with_rpc_types(&DescriptorPool::new());
        let bad_request = pool.get_message_by_name("google.rpc.BadRequest").unwrap();
        let violations = bad_request.get_field_by_name("field_violations").unwrap();
        let mut detail = prost_reflect::DynamicMessage::new(bad_request);
        let violation = match violations.kind() {
            prost_reflect::Kind::Message(m) => m,
            _ => unreachable!(),
        };
        let mut v = prost_reflect::DynamicMessage::new(violation);
        v.set_field_by_name("field", prost_reflect::Value::String("title".into()));
        v.set_field_by_name("description", prost_reflect::Value::String("empty".into()));
        detail.set_field(
            &violations,
            prost_reflect::Value::List(vec![prost_reflect::Value::Message(v)]),
        );
        let status = RawStatus {
            code: 3,
            message: "bad".into(),
            details: vec![
                any(
                    "type.googleapis.com/google.rpc.BadRequest",
                    detail.encode_to_vec(),
                ),
                any("type.googleapis.com/x.Unknown", vec![1, 2, 3]),
            ],
        };
        let mut out = Vec::new();
        status_json(
            3,
            "bad \"title\"",
            Some(&status.encode_to_vec()),
            &pool,
            &PrintOptions::default(),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"code":3,"message":"bad \"title\"","details":["#,
                r#"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"title","description":"empty"}]},"#,
                r#"{"@type":"type.googleapis.com/x.Unknown","value":"AQID"}]}"#
            )
        );
        let mut out = Vec::new();
        status_json(5, "gone", None, &pool, &PrintOptions::default(), &mut out);
        assert_eq!(out, br#"{"code":5,"message":"gone","details":[]}"#);
    }
}
