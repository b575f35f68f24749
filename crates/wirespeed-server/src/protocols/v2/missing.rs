//! Triton endpoints wirespeed knows of and does not serve yet: each is
//! answered with 501 (REST) or UNIMPLEMENTED (gRPC) and a message saying
//! what it is and what to use meanwhile, rather than a bare "no such
//! endpoint". `docs/protocols.md` lists every endpoint and its state.

use wirespeed_core::{Error, ErrorKind};

/// A capability behind endpoints wirespeed does not serve yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Trace settings.
    Trace,
    /// Log settings.
    Logging,
}

impl Missing {
    /// The error to answer with.
    pub(crate) fn error(self) -> Error {
        let message = match self {
            Missing::Trace => {
                "trace settings are not implemented; request tracing is on with --log-level \
                 debug"
            }
            Missing::Logging => {
                "log settings are not implemented; set the level at start with --log-level"
            }
        };
        Error::new(ErrorKind::NotImplemented, message)
    }
}
