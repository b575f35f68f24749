//! How a call fails: the server's own error, or what went wrong on the way.

use std::io;

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not one the client can reach.
    #[error("invalid url '{url}': {reason}")]
    Url {
        /// The address given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection could be made.
    #[error("failed to connect to {target}: {source}")]
    Connect {
        /// Where.
        target: String,
        /// Why.
        source: io::Error,
    },
    /// The connection failed or timed out mid-call.
    #[error("connection to {target} failed: {source}")]
    Io {
        /// Where.
        target: String,
        /// Why.
        source: io::Error,
    },
    /// The server's answer is not HTTP or not the protocol.
    #[error("{0}")]
    Protocol(String),
    /// The server answered with an error status.
    #[error("{message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The server's `error` message (or its body, when it has none).
        message: String,
    },
    /// The gRPC server answered with an error status.
    #[error("{message}")]
    Status {
        /// The status code's number.
        code: i32,
        /// Its name as grpcio writes it: `StatusCode.NOT_FOUND`.
        name: &'static str,
        /// The server's message.
        message: String,
    },
    /// A request that cannot be sent as given.
    #[error("{0}")]
    Request(String),
}

impl ClientError {
    /// The HTTP status the server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Server { status, .. } => Some(*status),
            _ => None,
        }
    }
}
