//! The HTTP plumbing the model server and the transcoding proxy share: a
//! request body read under a size limit and two timeouts, decompressed
//! (gzip, deflate) as it arrives ([`BodyReader`]); answers compressed when
//! the client asks ([`compress`]); the response [`Body`], whole, in
//! [`Chunks`] or streamed; and gRPC's `grpc-timeout` header ([`grpc_timeout`]).
//!
//! Nothing here knows a protocol: the server's codecs and the proxy's
//! transcoder read bodies through it and answer with its body.
//!
//! ```
//! use bytes::Bytes;
//! use hyper::body::Body as _;
//! use wirespeed_http::Body;
//!
//! // A binary answer: its JSON header, then a tensor's own buffer, uncopied.
//! let tensor = Bytes::from(vec![0u8; 1 << 20]);
//! let body = Body::chunks([Bytes::from_static(b"{\"outputs\":[]}"), tensor.clone()]);
//! assert_eq!(body.size_hint().exact(), Some(14 + (1 << 20)));
//! // Joined only for what needs it whole, as compression does.
//! let whole = body.into_whole().ok().unwrap();
//! assert_eq!(&whole[14..], &tensor[..]);
//! ```

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
