//! The HTTP plumbing the model server and the transcoding proxy share: a
//! request body read under a size limit and two timeouts, decompressed
//! (gzip, deflate) as it arrives ([`BodyReader`]); answers compressed when
//! the client asks ([`compress`]); the response [`Body`], whole, in
//! [`Chunks`] or streamed; and gRPC's `grpc-timeout` header ([`grpc_timeout`]).
//!
//! Nothing here knows a protocol: the server's codecs and the proxy's
//! transcoder read bodies through it and answer with its body.

mod body;
mod chunks;
mod coding;
mod grpc_timeout;
mod incoming;
mod reader;

pub use body::{json_response, Body, BoxError};
pub use chunks::Chunks;
pub use coding::{compress, request_coding, response_coding, Coding, Inflater};
pub use grpc_timeout::grpc_timeout;
pub use incoming::RequestBody;
pub use reader::{too_large, BodyLimits, BodyReader};
