//! HTTP/JSON to gRPC transcoding: the proto3 JSON mapping, both ways,
//! driven by a message's descriptor (prost-reflect), streaming.
//!
//! ```
//! use prost_reflect::DescriptorPool;
//! use prost_types::field_descriptor_proto::{Label, Type};
//! use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
//! use wirespeed_transcode::{proto_to_json, EncodeOptions, JsonToProto, PrintOptions};
//!
//! // message Row { repeated float values = 1; string id = 2; }
//! let field = |name: &str, number, label: Label, kind: Type| FieldDescriptorProto {
//!     name: Some(name.into()),
//!     json_name: Some(name.into()),
//!     number: Some(number),
//!     label: Some(label as i32),
//!     r#type: Some(kind as i32),
//!     ..Default::default()
//! };
//! let file = FileDescriptorProto {
//!     name: Some("row.proto".into()),
//!     package: Some("demo".into()),
//!     syntax: Some("proto3".into()),
//!     message_type: vec![DescriptorProto {
//!         name: Some("Row".into()),
//!         field: vec![
//!             field("values", 1, Label::Repeated, Type::Float),
//!             field("id", 2, Label::Optional, Type::String),
//!         ],
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet { file: vec![file] }).unwrap();
//! let row = pool.get_message_by_name("demo.Row").unwrap();
//!
//! // JSON in, chunk by chunk as it arrives, the message's wire format out...
//! let mut encoder = JsonToProto::new(row.clone(), EncodeOptions::default());
//! for chunk in br#"{"id": "a", "values": [1.5, -2.25]}"#.chunks(5) {
//!     encoder.feed(chunk).unwrap();
//! }
//! let wire = encoder.finish().unwrap();
//! // ...and back to JSON straight from those bytes.
//! let mut json = Vec::new();
//! proto_to_json(&row, &wire, &PrintOptions::default(), &mut json).unwrap();
//! assert_eq!(String::from_utf8(json).unwrap(), r#"{"values":[1.5,-2.25],"id":"a"}"#);
//! ```
//!
//! [`JsonToProto`] writes a message's protobuf wire format from its JSON
//! as the body arrives, chunk by chunk, through the push tokenizer of
//! `wirespeed_json`: no JSON tree and no message tree are built, so the
//! cost of a body does not depend on how it was cut into chunks.
//! [`proto_to_json`] writes a message's JSON straight from its wire bytes.
//! [`JsonToProtoStream`] does the same for a stream of messages (a
//! client-streaming call's body), and [`StreamFormat`] frames a stream of
//! answers as a JSON array, NDJSON or server-sent events.
//!
//! [`Routes`] compiles the `google.api.http` rules of a set of services
//! (and `POST /package.Service/Method` for every method) into a trie of
//! path segments; a found route gives the method, where the body goes, and
//! the path variables, which [`bound_fields`] writes with the query
//! parameters as wire format after the body's.
//! prost-reflect's `DynamicMessage` and its serde mapping are the tests'
//! reference, not the path: they build the tree this crate avoids.

mod decode;
mod encode;
mod error;
mod request;
mod routes;
mod rule;
mod status;
mod stream;
mod template;
mod wire;
mod wkt;

pub use decode::{field_to_json, proto_to_json, PrintOptions};
pub use encode::{EncodeOptions, JsonToProto};
pub use error::{Category, TranscodeError};
pub use request::{body_target, bound_fields};
pub use routes::{BodyTarget, Found, NotFound, Route, Routes};
pub use rule::{http_rule, CustomHttpPattern, HttpRule, Pattern};
pub use status::{status_json, with_rpc_types};
pub use stream::{JsonToProtoStream, StreamFormat};
