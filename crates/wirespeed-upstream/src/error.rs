//! How a call to an upstream fails, and what the client of wirespeed is
//! told: each failure becomes the front end's own status (NOT_FOUND is a
//! 404, UNAVAILABLE a 503 with `Retry-After`, a passed deadline a 504, a
//! broken answer a 502), with a message that says it came from the
//! upstream and which one.

use std::fmt;

use wirespeed_core::{Error, ErrorKind};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Nothing reached the upstream: it refused the connection, or the
    /// connection had closed before the request went out. Safe to retry.
    Unreached(String),
    /// The request went out but the connection failed before the answer.
    Broken(String),
    /// The upstream answered with a gRPC status other than OK (or, over
    /// REST, an error status), `code` as gRPC numbers it.
    Status {
        /// The gRPC code.
        code: i32,
        /// The upstream's message.
        message: String,
    },
    /// The request's deadline passed before the answer; the call was
    /// cancelled.
    Deadline,
    /// The answer is not the protocol's: a wrong content type, an HTTP
    /// error, a message over the limit or one that does not decode, or
    /// tensors that do not match what they claim.
    Protocol(String),
    /// No replica of the upstream is admitted: each failed too often and is
    /// being probed.
    NoReplica(String),
    /// The caller gave its request stream up (a client stream whose body
    /// did not encode) and the call was reset: no fault of the replica's.
    Abandoned(String),
}

/// gRPC's names for its codes.
pub(crate) fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "an unknown code",
    }
}

impl CallError {
    /// A request hyper could not send: unreached when it handed the
    /// request back (the connection had closed before it went out), broken
    /// when part of it may have reached the upstream.
    pub(crate) fn from_send<T>(e: hyper::client::conn::TrySendError<T>) -> CallError {
        if e.message().is_some() {
            CallError::Unreached(format!("the connection closed: {}", e.error()))
        } else {
            CallError::Broken(e.error().to_string())
        }
    }

    /// Whether the failure says the replica is unhealthy: it could not be
    /// reached, its connection broke, or it said UNAVAILABLE.
    pub(crate) fn is_unhealthy(&self) -> bool {
        matches!(
            self,
            CallError::Unreached(_) | CallError::Broken(_) | CallError::Status { code: 14, .. }
        )
    }

    /// The error the client of wirespeed sees, for a call to `upstream`.
    pub fn to_error(&self, upstream: &str) -> Error {
        let (kind, text) = match self {
            CallError::Unreached(why) => (
                ErrorKind::Unavailable,
                format!("upstream {upstream} cannot be reached: {why}"),
            ),
            CallError::Broken(why) => (
                ErrorKind::BadGateway,
                format!("upstream {upstream} failed during the call: {why}"),
            ),
            CallError::Status { code, message } => {
                let kind = match code {
                    3 | 9 | 11 => ErrorKind::InvalidInput,
                    5 => ErrorKind::ModelNotFound,
                    4 => ErrorKind::GatewayTimeout,
                    8 => ErrorKind::Overloaded,
                    12 => ErrorKind::NotImplemented,
                    14 => ErrorKind::Unavailable,
                    _ => ErrorKind::BadGateway,
                };
                let name = code_name(*code);
                (kind, format!("upstream {upstream} answered {name}: {message}"))
            }
            CallError::Deadline => (
                ErrorKind::GatewayTimeout,
                format!("upstream {upstream} did not answer before the request's deadline; the call was cancelled"),
            ),
            CallError::Protocol(why) => (
                ErrorKind::BadGateway,
                format!("upstream {upstream} answered something wirespeed cannot use: {why}"),
            ),
            CallError::NoReplica(why) => (
                ErrorKind::Unavailable,
                format!("no replica of upstream {upstream} answers: {why}"),
            ),
            CallError::Abandoned(why) => (
                ErrorKind::InvalidInput,
                format!("the call to upstream {upstream} was reset: {why}"),
            ),
        };
        Error::new(kind, text)
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Unreached(why) => write!(f, "cannot be reached: {why}"),
            CallError::Broken(why) => write!(f, "failed during the call: {why}"),
            CallError::Status { code, message } => {
                write!(f, "answered {}: {message}", code_name(*code))
            }
            CallError::Deadline => f.write_str("did not answer before the deadline"),
            CallError::Protocol(why) => write!(f, "answered something unusable: {why}"),
            CallError::NoReplica(why) => write!(f, "no replica answers: {why}"),
            CallError::Abandoned(why) => write!(f, "was reset: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_statuses_become_the_front_ends() {
        let status = |code| CallError::Status {
            code,
            message: "m".into(),
        };
        let up = "grpc://127.0.0.1:9";
        assert_eq!(status(5).to_error(up).kind().http_status(), 404);
        assert_eq!(status(3).to_error(up).kind().http_status(), 400);
        assert_eq!(status(14).to_error(up).kind().http_status(), 503);
        assert_eq!(status(4).to_error(up).kind().http_status(), 504);
        assert_eq!(status(8).to_error(up).kind().http_status(), 503);
        assert_eq!(status(13).to_error(up).kind().http_status(), 502);
        let e = status(13).to_error(up);
        assert!(
            e.message()
                .contains("upstream grpc://127.0.0.1:9 answered INTERNAL: m"),
            "{e}"
        );
        assert_eq!(CallError::Deadline.to_error(up).kind().grpc_code(), 4);
        assert_eq!(
            CallError::Unreached("refused".into())
                .to_error(up)
                .kind()
                .grpc_code(),
            14
        );
    }
}
