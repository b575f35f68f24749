//! HTTP/JSON to gRPC transcoding: the proto3 JSON mapping, both ways,
//! driven by a message's descriptor (prost-reflect), streaming.
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
