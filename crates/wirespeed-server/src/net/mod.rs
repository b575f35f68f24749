//! The transport: listeners on TCP and Unix sockets, TLS, the I/O threads
//! that accept and keep connections (`threads.rs` starts them), connection tracking (keep-alive,
//! drain), HTTP/1.1 read in place for plain requests (`http1`), and the
//! HTTP/2 `:authority` rewrite for gRPC over Unix sockets.
//!
//! Generic over a hyper `Service`: nothing here knows a protocol. The
//! composition root (`lib.rs`) hands each listener the service that
//! answers it.

pub(crate) mod authority;
pub(crate) mod connection;
pub(crate) mod counts;
pub(crate) mod hpack;
pub(crate) mod http1;
pub(crate) mod listen;
pub(crate) mod threads;
pub(crate) mod tls;
pub(crate) mod uds;
