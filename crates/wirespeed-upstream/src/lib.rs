//! wirespeed's client side: how the server calls other inference servers.
//!
//! ```
//! use wirespeed_upstream::{Address, Protocol, Transport};
//!
//! let replica: Address = "grpc://triton.models.svc:8001".parse().unwrap();
//! assert_eq!(replica.protocol, Protocol::Grpc);
//! assert_eq!(replica.authority(), "triton.models.svc:8001");
//!
//! // Over a Unix socket the authority sent is `localhost`.
//! let local: Address = "http+unix:///run/kserve.sock".parse().unwrap();
//! assert!(matches!(local.transport, Transport::Unix(_)));
//! assert_eq!(local.authority(), "localhost");
//!
//! // A URL it cannot use says what it takes.
//! let refused = "ftp://host:21".parse::<Address>().unwrap_err();
//! assert!(refused.contains("grpc://host:port"));
//! ```
//!
//! An [`Upstream`] is one server's replicas (`upstream.rs`: balancing,
//! passive health, retries), each reached through a [`channel`] of HTTP/2
//! connections kept per thread (`channel.rs`, opened by `connect.rs` over
//! TCP, Unix sockets or TLS). `grpc.rs` makes one unary gRPC call on hyper,
//! sending a request [`Chunks`] (`body.rs`) of existing buffers, or opens
//! a call of any method, streaming either way ([`Upstream::open`],
//! [`OpenCall`]: the transcoding proxy's); `v2.rs`
//! speaks the Open Inference Protocol over it ([`V2Client`]), or over REST
//! through `rest.rs` for upstreams with no gRPC; `openai.rs` speaks
//! OpenAI's API over the same REST connections ([`OpenAiClient`], streams
//! read as they arrive); `error.rs` says how each failure reaches
//! wirespeed's own clients.
//!
//! The transcoding proxy and the upstream backend share this one pool.

mod address;
#[cfg(feature = "backend")]
mod backend;
mod body;
pub mod channel;
mod connect;
mod error;
mod grpc;
mod openai;
mod rest;
mod upstream;
mod v2;

/// The `http` crate, for the headers of [`UpstreamOptions`].
pub use hyper::http;

pub use address::{Address, Protocol, Transport};
#[cfg(feature = "backend")]
pub use backend::{UpstreamBackend, UpstreamModel};
pub use body::{message_stream, Aborted, CallBody, Chunks, MessageSender, MessageStream};
pub use channel::ChannelOptions;
pub use error::CallError;
pub use grpc::{frame, framed, message_prefix, OpenCall};
pub use openai::{error_message, rename_model, Events, OpenAiAnswer, OpenAiClient};
pub use upstream::{Probe, Upstream, UpstreamError, UpstreamOptions};
pub use v2::{InferCall, V2Client};
