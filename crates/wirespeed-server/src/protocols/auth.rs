//! The bearer token (`--auth-token-file`), and the one list of what
//! answers without it: health checks, on every protocol, so a load
//! balancer's or Kubernetes' probes need no secret. Everything else, model
//! metadata and inference included, needs the token.

use hyper::header::{HeaderMap, AUTHORIZATION};
use wirespeed_core::{Error, ErrorKind};

/// The health checks, the only calls that need no token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HealthCheck {
    /// The server is live.
    ServerLive,
    /// The server is ready.
    ServerReady,
    /// A model is ready.
    ModelReady,
}

/// The token requests must carry, when the server has one.
pub(crate) struct Auth {
    token: Option<String>,
}

impl Auth {
    pub(crate) fn new(token: Option<String>) -> Auth {
        Auth { token }
    }

    /// Lets a request through if it is a health check or carries the
    /// token. The comparison takes the same time wherever the first
    /// difference is.
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        health: Option<HealthCheck>,
    ) -> Result<(), Error> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if health.is_some() {
            return Ok(());
        }
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        if given.is_some_and(|g| constant_time_eq(g, token.as_bytes())) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Unauthenticated,
            "this server needs a bearer token: 'Authorization: Bearer <token>' (gRPC: \
             'authorization' metadata)",
        ))
    }
}

/// Compares two secrets in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn only_health_checks_go_without_the_token() {
        let auth = Auth::new(Some("s3cret".into()));
        let mut headers = HeaderMap::new();
        for health in [
            HealthCheck::ServerLive,
            HealthCheck::ServerReady,
            HealthCheck::ModelReady,
        ] {
            assert!(auth.check(&headers, Some(health)).is_ok());
        }
        let e = auth.check(&headers, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cre"));
        assert!(auth.check(&headers, None).is_err());
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert!(auth.check(&headers, None).is_ok());
        assert!(Auth::new(None).check(&HeaderMap::new(), None).is_ok());
    }
}
