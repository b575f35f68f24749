//! The engine of `wirespeed.client.grpc`: tritonclient.grpc's calls on
//! wirespeed-client's gRPC client, a pool of connections each used by one
//! call at a time, with the GIL released while it waits.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use wirespeed_client::{message_json, pb, ClientError, GrpcClient, GrpcOptions};

use crate::client::{
    client_error, headers_from, infer_request, json_value, InferInput, InferRequestedOutput,
    InferResult,
};
use crate::connections::Connections;

/// A message of the V2 gRPC API for Python: its JSON mapping as a dict
/// (`as_json`, as tritonclient gives it), or an object with the message's
/// fields as attributes, defaults included and 64-bit integers as ints.
pub(crate) fn message_value<'py>(
    py: Python<'py>,
    message: &impl prost::Message,
    name: &str,
    as_json: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let json = message_json(message, name, as_json).map_err(|e| client_error(py, e))?;
    let value = json_value(py, &json)?.into_bound(py);
    if as_json {
        return Ok(value);
    }
    py.import("wirespeed.client.grpc")?
        .getattr("_message")?
        .call1((value,))
}

/// The gRPC client of one server: its kept-open connections.
#[pyclass(module = "wirespeed.client.grpc", frozen)]
pub(crate) struct GrpcConnections {
    url: String,
    options: GrpcOptions,
    connections: Connections<GrpcClient>,
}

impl GrpcConnections {
    fn with_client<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut GrpcClient) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let open = || GrpcClient::new(&self.url, &self.options);
        self.connections.run(py, open, call)
    }
}

fn timeout(seconds: Option<f64>) -> Option<Duration> {
    // None, or a timeout that is not a positive number of seconds that
    // fits a Duration: no deadline.
    seconds
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[pymethods]
impl GrpcConnections {
    #[new]
    #[pyo3(signature = (url, concurrency=1))]
    fn new(py: Python<'_>, url: &str, concurrency: usize) -> PyResult<GrpcConnections> {
        let options = GrpcOptions::default();
        // Checks the address now; connects on the first call.
        let first = GrpcClient::new(url, &options).map_err(|e| client_error(py, e))?;
        Ok(GrpcConnections {
            url: url.to_owned(),
            options,
            connections: Connections::new(concurrency, Some(first)),
        })
    }

    fn close(&self) {
        self.connections.close();
    }

    #[pyo3(signature = (headers=None, client_timeout=None))]
    fn is_server_live(
        &self,
        py: Python<'_>,
        headers: Option<&Bound<'_, PyDict>>,
        client_timeout: Option<f64>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| c.server_live(&headers, timeout(client_timeout)))
    }

    #[pyo3(signature = (headers=None, client_timeout=None))]
    fn is_server_ready(
        &self,
        py: Python<'_>,
        headers: Option<&Bound<'_, PyDict>>,
        client_timeout: Option<f64>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| c.server_ready(&headers, timeout(client_timeout)))
    }

    #[pyo3(signature = (model_name, model_version="", headers=None, client_timeout=None))]
    fn is_model_ready(
        &self,
        py: Python<'_>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
        client_timeout: Option<f64>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| {
            c.model_ready(model_name, model_version, &headers, timeout(client_timeout))
        })
    }

    #[pyo3(signature = (headers=None, as_json=false, client_timeout=None))]
    fn get_server_metadata<'py>(
        &self,
        py: Python<'py>,
        headers: Option<&Bound<'_, PyDict>>,
        as_json: bool,
        client_timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let headers = headers_from(headers)?;
        let message =
            self.with_client(py, |c| c.server_metadata(&headers, timeout(client_timeout)))?;
        message_value(py, &message, "inference.ServerMetadataResponse", as_json)
    }

    #[pyo3(signature = (model_name, model_version="", headers=None, as_json=false, client_timeout=None))]
    fn get_model_metadata<'py>(
        &self,
        py: Python<'py>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
        as_json: bool,
        client_timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let headers = headers_from(headers)?;
        let message = self.with_client(py, |c| {
            c.model_metadata(model_name, model_version, &headers, timeout(client_timeout))
        })?;
        message_value(py, &message, "inference.ModelMetadataResponse", as_json)
    }

    #[pyo3(signature = (model_name, model_version="", headers=None, as_json=false, client_timeout=None))]
    fn get_model_config<'py>(
        &self,
        py: Python<'py>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
        as_json: bool,
        client_timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let headers = headers_from(headers)?;
        let message = self.with_client(py, |c| {
            c.model_config(model_name, model_version, &headers, timeout(client_timeout))
        })?;
        message_value(py, &message, "inference.ModelConfigResponse", as_json)
    }

    /// Runs inference, as tritonclient.grpc's `infer`.
    #[pyo3(signature = (model_name, inputs, model_version="", outputs=None, request_id="",
                        parameters=None, headers=None, client_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn infer(
        &self,
        py: Python<'_>,
        model_name: &str,
        inputs: Vec<PyRef<'_, InferInput>>,
        model_version: &str,
        outputs: Option<Vec<PyRef<'_, InferRequestedOutput>>>,
        request_id: &str,
        parameters: Option<&Bound<'_, PyDict>>,
        headers: Option<&Bound<'_, PyDict>>,
        client_timeout: Option<f64>,
    ) -> PyResult<InferResult> {
        let request = infer_request(py, &inputs, outputs, request_id, parameters)?;
        let headers = headers_from(headers)?;
        let (answer, message): (_, pb::ModelInferResponse) = self.with_client(py, |c| {
            c.infer(
                model_name,
                model_version,
                &request,
                &headers,
                timeout(client_timeout),
            )
        })?;
        Ok(InferResult::from_message(answer, message))
    }
}
