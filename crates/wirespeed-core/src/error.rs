//! The one error taxonomy of wirespeed.
//!
//! Every failure on the request path is an [`Error`] with an [`ErrorKind`].
//! The kind decides, in one place, whose fault it is and which status the
//! client sees, so every front end reports the same failure the same way.

use std::fmt;

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request was wrong: fix it before sending it again.
    Client,
    /// The server failed or was too busy: the same request may succeed later.
    Server,
}

/// What went wrong, coarsely enough to pick a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The body is not valid JSON, or not the shape of message the endpoint takes.
    MalformedRequest,
    /// The request is well formed but does not fit the model: an unknown input
    /// or output name, a wrong datatype, a shape that does not match.
    InvalidInput,
    /// No model of that name in the repository.
    ModelNotFound,
    /// The model exists but not in the requested version.
    VersionNotFound,
    /// The body is larger than the server accepts.
    PayloadTooLarge,
    /// The request's headers are larger than the server accepts.
    HeadersTooLarge,
    /// The request exceeds a configured limit other than the body size:
    /// tensor elements, string length, nesting depth, number of inputs.
    LimitExceeded,
    /// No route for this path.
    RouteNotFound,
    /// The route exists but not for this HTTP method.
    MethodNotAllowed,
    /// A feature of the protocol this server does not implement, asked
    /// for in a request that could otherwise be served (400).
    Unsupported,
    /// An endpoint of a protocol this server speaks, for a capability it
    /// does not have (KServe's `:explain`): 501, UNIMPLEMENTED.
    NotImplemented,
    /// The request lacks the bearer token the server requires.
    Unauthenticated,
    /// The client took too long: a request body that stalled or ran past
    /// its deadline, or a gRPC deadline that passed.
    Timeout,
    /// The model's queue is full: try again shortly. The client did nothing
    /// wrong, but the server is not at fault either; it sheds load.
    Overloaded,
    /// The model cannot answer now: it is not ready (a server it fronts
    /// does not answer) or that server said it is unavailable. 503 with
    /// `Retry-After`, UNAVAILABLE.
    Unavailable,
    /// A server the model fronts failed, or answered something wrong (a
    /// tensor of the wrong size, a message that is not the protocol's):
    /// 502, INTERNAL. Its message names that server.
    BadGateway,
    /// A server the model fronts did not answer within the request's
    /// deadline: 504, DEADLINE_EXCEEDED.
    GatewayTimeout,
    /// The model's own code failed: an exception in a Python model, or its
    /// worker process died. 500, INTERNAL, with the model's message, which
    /// is the model's to give (it names the model and what it raised).
    ModelFailed,
    /// A model's error of Triton's code UNKNOWN (`pb_utils.TritonError(...,
    /// TritonError.UNKNOWN)`): 400, UNKNOWN, as Triton answers it.
    Unknown,
    /// A model's error of Triton's code ALREADY_EXISTS: 400,
    /// ALREADY_EXISTS.
    AlreadyExists,
    /// A model's error of Triton's code CANCELLED (it gave up on the
    /// request): 400, CANCELLED.
    Cancelled,
    /// Our fault: a bug or a failed resource. Its message is never shown to
    /// the client.
    Internal,
}

impl ErrorKind {
    /// Whether the client may be told exactly what went wrong: every kind
    /// but [`ErrorKind::Internal`].
    pub const fn is_client_error(self) -> bool {
        !matches!(self, ErrorKind::Internal)
    }

    /// Whose fault it is: the client's, or the server's (a bug, or not
    /// enough capacity). Only [`ErrorKind::Internal`] hides its message.
    pub const fn fault(self) -> Fault {
        match self {
            ErrorKind::Internal
            | ErrorKind::ModelFailed
            | ErrorKind::Overloaded
            | ErrorKind::Unavailable
            | ErrorKind::BadGateway
            | ErrorKind::GatewayTimeout => Fault::Server,
            _ => Fault::Client,
        }
    }

    /// The HTTP status for this kind.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorKind::MalformedRequest
            | ErrorKind::InvalidInput
            | ErrorKind::Unsupported
            | ErrorKind::LimitExceeded
            | ErrorKind::Unknown
            | ErrorKind::AlreadyExists
            | ErrorKind::Cancelled => 400,
            ErrorKind::ModelNotFound | ErrorKind::VersionNotFound | ErrorKind::RouteNotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::Timeout => 408,
            ErrorKind::Overloaded => 503,
            ErrorKind::Internal | ErrorKind::ModelFailed => 500,
            ErrorKind::NotImplemented => 501,
            ErrorKind::BadGateway => 502,
            ErrorKind::Unavailable => 503,
            ErrorKind::GatewayTimeout => 504,
        }
    }

    /// The gRPC status code for this kind of error, as its number
    /// (`3` is INVALID_ARGUMENT, `5` NOT_FOUND, ...).
    pub const fn grpc_code(self) -> i32 {
        match self {
            ErrorKind::MalformedRequest | ErrorKind::InvalidInput | ErrorKind::LimitExceeded => 3,
            ErrorKind::ModelNotFound | ErrorKind::VersionNotFound | ErrorKind::RouteNotFound => 5,
            ErrorKind::PayloadTooLarge | ErrorKind::HeadersTooLarge | ErrorKind::Overloaded => 8,
            ErrorKind::MethodNotAllowed | ErrorKind::Unsupported | ErrorKind::NotImplemented => 12,
            ErrorKind::Unauthenticated => 16,
            ErrorKind::Timeout | ErrorKind::GatewayTimeout => 4,
            ErrorKind::Unavailable => 14,
            ErrorKind::Internal | ErrorKind::ModelFailed | ErrorKind::BadGateway => 13,
            ErrorKind::Cancelled => 1,
            ErrorKind::Unknown => 2,
            ErrorKind::AlreadyExists => 6,
        }
    }
}

/// A failure with a message written for the person who sent the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorKind::MalformedRequest`].
    pub fn malformed(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::MalformedRequest, message)
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::ModelFailed`].
    pub fn model_failed(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::ModelFailed, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The full message, for logs.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message the client may see: the full message for client errors,
    /// a generic one for ours, so internals never leak.
    pub fn public_message(&self) -> &str {
        if self.kind.is_client_error() {
            &self.message
        } else {
            "internal server error; the server log has the details"
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_hide_their_message_from_clients() {
        let e = Error::internal("thread pool poisoned at src/x.rs:10");
        assert_eq!(e.kind().http_status(), 500);
        assert!(!e.public_message().contains("src/x.rs"));
        let e = Error::invalid_input("input 'x' has datatype FP64, expected FP32");
        assert_eq!(e.kind().http_status(), 400);
        assert_eq!(e.public_message(), e.message());
    }
}
