//! The proxy's errors, through one table. Each is a gRPC status code
//! (`google.rpc.Code`): [`Code::http_status`] gives its HTTP status (the
//! mapping grpc-gateway and Google's APIs use), and the answer's body is
//! the `google.rpc.Status` JSON (`code`, `message`, `details`). The only
//! exceptions are written here too: a method the route does not take is
//! a 405 with its `Allow`, and a failure of the upstream that is not a
//! status it sent (a broken answer, an unreachable replica's INTERNAL) is
//! a 502, since the fault is the upstream's, not the proxy's.

use hyper::header::ALLOW;
use hyper::{Response, StatusCode};
use serde_json::json;
use wirespeed_http::{json_response, Body};
use wirespeed_upstream::{CallError, UpstreamError};

/// `google.rpc.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code of a status's number; a number gRPC does not define is
    /// UNKNOWN.
    pub(crate) fn of(number: i32) -> Code {
        Code::ALL
            .into_iter()
            .find(|c| *c as i32 == number)
            .unwrap_or(Code::Unknown)
    }

    /// The one table: the HTTP status of each code.
    pub(crate) fn http_status(self) -> StatusCode {
        match self {
            Code::Ok => StatusCode::OK,
            Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A failed call, as the client is told: the status's number (the
/// upstream's own, which may be one gRPC does not define), its message,
/// and whether the upstream is at fault without having said so.
pub(crate) struct CallFailure {
    pub(crate) number: i32,
    pub(crate) message: String,
    /// Not a status the upstream sent: its answer was broken, or it could
    /// not be reached.
    pub(crate) upstream_fault: bool,
}

impl CallFailure {
    /// The failure of a call that ended with `error`; `deadline` says what
    /// a passed deadline means here.
    pub(crate) fn of(error: &CallError, describe: impl FnOnce() -> String, deadline: &str) -> Self {
        let (code, message) = match error {
            CallError::Status { code, message } => {
                return CallFailure {
                    number: *code,
                    message: message.clone(),
                    upstream_fault: false,
                }
            }
            CallError::Deadline => (Code::DeadlineExceeded, deadline.to_owned()),
            CallError::Unreached(_) | CallError::NoReplica(_) => (Code::Unavailable, describe()),
            _ => (Code::Internal, describe()),
        };
        CallFailure {
            number: code as i32,
            message,
            upstream_fault: code == Code::Internal,
        }
    }

    /// The failure of a unary call, from the upstream's error.
    pub(crate) fn of_call(e: &UpstreamError) -> CallFailure {
        CallFailure::of(
            &e.error,
            || e.to_string(),
            "the deadline passed before the upstream answered",
        )
    }

    /// Its HTTP status.
    pub(crate) fn http_status(&self) -> StatusCode {
        if self.upstream_fault {
            StatusCode::BAD_GATEWAY
        } else {
            Code::of(self.number).http_status()
        }
    }
}

/// A `google.rpc.Status` answer of the proxy's own (no details).
pub(crate) fn status(code: Code, message: &str) -> Response<Body> {
    let body = json!({ "code": code as i32, "message": message, "details": [] });
    json_response(code.http_status(), body.to_string())
}

/// The upstream's answer does not decode as its method's output: its
/// fault, a 502.
pub(crate) fn bad_answer(message: &str) -> Response<Body> {
    let mut answer = status(Code::Internal, message);
    *answer.status_mut() = StatusCode::BAD_GATEWAY;
    answer
}

/// `path` is routed, but not for `method`: 405 with the methods it takes
/// (UNIMPLEMENTED in the body, as grpc-gateway answers).
pub(crate) fn method_not_allowed(
    path: &str,
    method: &str,
    mut methods: Vec<String>,
) -> Response<Body> {
    methods.sort();
    methods.dedup();
    let taken = methods.join(", ");
    let body = json!({
        "code": Code::Unimplemented as i32,
        "message": format!("{path} takes {taken}, not {method}"),
        "details": []
    });
    let mut answer = json_response(StatusCode::METHOD_NOT_ALLOWED, body.to_string());
    if let Ok(allow) = taken.parse() {
        answer.headers_mut().insert(ALLOW, allow);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_number_and_an_undefined_number_is_unknown() {
        for (n, code) in Code::ALL.into_iter().enumerate() {
            assert_eq!(Code::of(n as i32), code);
        }
        assert_eq!(Code::of(17), Code::Unknown);
        assert_eq!(Code::of(-1), Code::Unknown);
        assert_eq!(
            Code::of(17).http_status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(Code::NotFound.http_status(), StatusCode::NOT_FOUND);
        assert_eq!(Code::Cancelled.http_status().as_u16(), 499);
    }
}
