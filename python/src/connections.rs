//! Kept-open connections to one server, HTTP or gRPC: each call takes an
//! idle one (or opens one), runs with the GIL released, and puts it back,
//! so calls from several threads run at once and a lone thread reuses one
//! connection.

use std::sync::Mutex;

use pyo3::prelude::*;
use wirespeed_client::ClientError;

use crate::client::client_error;

pub(crate) struct Connections<C> {
    idle: Mutex<Vec<C>>,
    /// Connections kept open when idle.
    keep: usize,
}

impl<C: Send> Connections<C> {
    /// Keeps up to `keep` idle connections, starting with `first`.
    pub(crate) fn new(keep: usize, first: Option<C>) -> Connections<C> {
        Connections {
            idle: Mutex::new(first.into_iter().collect()),
            keep: keep.max(1),
        }
    }

    /// Runs `call` on an idle connection, or on one `open` makes.
    pub(crate) fn run<T: Send>(
        &self,
        py: Python<'_>,
        open: impl FnOnce() -> Result<C, ClientError> + Send,
        call: impl FnOnce(&mut C) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let result = py.detach(|| {
            let taken = self.idle.lock().map(|mut idle| idle.pop()).unwrap_or(None);
            let mut connection = match taken {
                Some(c) => c,
                None => open()?,
            };
            let result = call(&mut connection);
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < self.keep {
                    idle.push(connection);
                }
            }
            result
        });
        result.map_err(|e| client_error(py, e))
    }

    /// Closes the idle connections.
    pub(crate) fn close(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }
}
