//! The engine of `wirespeed.client.http`: tritonclient's `InferInput`,
//! `InferRequestedOutput` and `InferResult`, and a pool of kept-open
//! connections, each call made by the caller's thread with the GIL released.

use std::sync::Arc;
use std::time::Duration;

use numpy::PyArrayMethods;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use wirespeed_client::{
    Answer, Client, ClientError, ClientOptions, InferRequest, InputData, RequestedOutput,
};
use wirespeed_core::{DataType, TensorData};

use crate::codec::parameters_from;
use crate::connections::Connections;
use crate::tensors::{datatype_of, from_numpy, to_numpy};

/// tritonclient's exception type, defined in `wirespeed.client.utils`.
pub(crate) fn server_exception(
    py: Python<'_>,
    message: String,
    status: Option<String>,
    debug: Option<String>,
) -> PyErr {
    let class = py
        .import("wirespeed.client.utils")
        .and_then(|m| m.getattr("InferenceServerException"));
    match class.and_then(|c| c.call1((message.clone(), status, debug))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

pub(crate) fn raise(py: Python<'_>, message: impl Into<String>) -> PyErr {
    server_exception(py, message.into(), None, None)
}

pub(crate) fn client_error(py: Python<'_>, e: ClientError) -> PyErr {
    let status = match &e {
        ClientError::Status { name, .. } => Some(name.to_string()),
        e => e.status().map(|s| s.to_string()),
    };
    server_exception(py, e.to_string(), status, None)
}

pub(crate) fn headers_from(headers: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    if let Some(headers) = headers {
        for (k, v) in headers.iter() {
            out.push((k.str()?.to_string(), v.str()?.to_string()));
        }
    }
    Ok(out)
}

/// One input of an infer request (tritonclient's `InferInput`).
#[pyclass(module = "wirespeed.client.http")]
pub(crate) struct InferInput {
    pub(crate) name: String,
    shape: Vec<i64>,
    datatype: String,
    /// The request's input, once data is set: shared by every request
    /// that sends it, never copied.
    pub(crate) input: Option<Arc<wirespeed_client::InferInput>>,
}

#[pymethods]
impl InferInput {
    #[new]
    fn new(name: String, shape: Vec<i64>, datatype: String) -> InferInput {
        InferInput {
            name,
            shape,
            datatype,
            input: None,
        }
    }

    /// The input's name.
    fn name(&self) -> &str {
        &self.name
    }

    /// Its datatype.
    fn datatype(&self) -> &str {
        &self.datatype
    }

    /// Its shape.
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// Sets the shape.
    fn set_shape(mut slf: PyRefMut<'_, Self>, shape: Vec<i64>) -> PyRefMut<'_, Self> {
        slf.shape = shape;
        slf
    }

    /// Sets the data: as raw bytes after the JSON (`binary_data=True`, the
    /// default) or in the JSON.
    #[pyo3(signature = (input_tensor, binary_data=true))]
    fn set_data_from_numpy<'py>(
        mut slf: PyRefMut<'py, Self>,
        input_tensor: &Bound<'py, PyAny>,
        binary_data: bool,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let py = input_tensor.py();
        let Ok(dtype) = datatype_of(input_tensor) else {
            if !input_tensor.is_instance_of::<numpy::PyUntypedArray>() {
                return Err(raise(py, "input_tensor must be a numpy array"));
            }
            return Err(raise(
                py,
                format!(
                    "got unexpected datatype {} from numpy array, expected {}",
                    input_tensor.getattr("dtype")?,
                    slf.datatype
                ),
            ));
        };
        if dtype.as_str() != slf.datatype {
            return Err(raise(
                py,
                format!(
                    "got unexpected datatype {dtype} from numpy array, expected {}",
                    slf.datatype
                ),
            ));
        }
        let (shape, data) = from_numpy(input_tensor)?;
        let fits = shape.len() == slf.shape.len()
            && shape.iter().zip(&slf.shape).all(|(&a, &b)| a as i64 == b);
        if !fits {
            let list = |s: &[String]| s.join(", ");
            return Err(raise(
                py,
                format!(
                    "got unexpected numpy array shape [{}], expected [{}]",
                    list(&shape.iter().map(|d| d.to_string()).collect::<Vec<_>>()),
                    list(&slf.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>()),
                ),
            ));
        }
        let name = slf.name.clone();
        let input = if binary_data {
            wirespeed_client::InferInput::binary(name, shape, data)
        } else {
            if dtype == DataType::Bf16 {
                return Err(raise(
                    py,
                    "BF16 inputs must be sent as binary data over HTTP. Please set binary_data=True",
                ));
            }
            wirespeed_client::InferInput::json(name, shape, data)
        };
        slf.input = Some(Arc::new(input));
        Ok(slf)
    }

    /// Sends the data from a registered shared-memory region instead.
    #[pyo3(signature = (region_name, byte_size, offset=0))]
    fn set_shared_memory(
        mut slf: PyRefMut<'_, Self>,
        region_name: String,
        byte_size: usize,
        offset: usize,
    ) -> PyResult<PyRefMut<'_, Self>> {
        let datatype: DataType = slf
            .datatype
            .parse()
            .map_err(|e: wirespeed_core::UnknownDataType| raise(slf.py(), e.to_string()))?;
        let shape = slf.shape.iter().map(|&d| d.max(0) as usize).collect();
        slf.input = Some(Arc::new(wirespeed_client::InferInput {
            name: slf.name.clone(),
            shape,
            datatype,
            data: InputData::Shared {
                region: region_name,
                byte_size,
                offset,
            },
            parameters: Vec::new(),
        }));
        Ok(slf)
    }
}

/// An output asked for (tritonclient's `InferRequestedOutput`).
#[pyclass(module = "wirespeed.client.http")]
pub(crate) struct InferRequestedOutput {
    pub(crate) output: RequestedOutput,
}

#[pymethods]
impl InferRequestedOutput {
    #[new]
    #[pyo3(signature = (name, binary_data=true, class_count=0))]
    fn new(name: String, binary_data: bool, class_count: u32) -> InferRequestedOutput {
        InferRequestedOutput {
            output: RequestedOutput {
                name,
                binary: binary_data,
                class_count,
                shared: None,
            },
        }
    }

    /// The output's name.
    fn name(&self) -> &str {
        &self.output.name
    }

    /// Asks for the output in a registered shared-memory region.
    #[pyo3(signature = (region_name, byte_size, offset=0))]
    fn set_shared_memory(&mut self, region_name: String, byte_size: usize, offset: usize) {
        self.output.shared = Some((region_name, byte_size, offset));
    }

    /// Asks for the output in the answer again.
    fn unset_shared_memory(&mut self) {
        self.output.shared = None;
    }
}

/// One output of an answer, turned into numpy when first asked for.
struct Output {
    name: String,
    datatype: DataType,
    shape: Vec<usize>,
    binary: bool,
    data: Option<TensorData>,
    array: Option<Py<PyAny>>,
}

/// The answer to an infer call (tritonclient's `InferResult`).
#[pyclass(module = "wirespeed.client.http")]
pub(crate) struct InferResult {
    /// The answer's JSON, as the server wrote it (HTTP).
    json: Vec<u8>,
    /// The answer's message (gRPC).
    message: Option<Box<wirespeed_client::pb::ModelInferResponse>>,
    /// `get_response()`, once asked for.
    response: Option<Py<PyAny>>,
    outputs: Vec<Output>,
}

impl InferResult {
    pub(crate) fn from_message(
        answer: Answer,
        message: wirespeed_client::pb::ModelInferResponse,
    ) -> InferResult {
        let mut result = InferResult::from_answer(answer);
        result.message = Some(Box::new(message));
        result
    }

    fn from_answer(answer: Answer) -> InferResult {
        let response = answer.response;
        let outputs = response
            .outputs
            .into_iter()
            .enumerate()
            .map(|(i, t)| Output {
                datatype: t.datatype(),
                name: t.name,
                shape: t.shape,
                binary: answer.binary_outputs.contains(&i),
                data: Some(t.data),
                array: None,
            })
            .collect();
        InferResult {
            json: answer.json,
            message: None,
            response: None,
            outputs,
        }
    }

    fn array<'py>(py: Python<'py>, output: &mut Output) -> PyResult<Bound<'py, PyAny>> {
        if let Some(array) = &output.array {
            return Ok(array.bind(py).clone());
        }
        let data = output
            .data
            .take()
            .unwrap_or_else(|| TensorData::with_capacity(output.datatype, 0));
        let array = match data {
            // BYTES sent in the JSON are text: tritonclient gives `str`s.
            TensorData::Bytes(v) if !output.binary => {
                let strings: Vec<Py<PyAny>> = v
                    .iter()
                    .map(|b| {
                        PyString::new(py, &String::from_utf8_lossy(b))
                            .into_any()
                            .unbind()
                    })
                    .collect();
                let a = numpy::PyArray1::from_vec(py, strings);
                a.reshape(output.shape.clone())?.into_any()
            }
            data => to_numpy(py, &output.shape, data)?,
        };
        output.array = Some(array.clone().unbind());
        Ok(array)
    }
}

#[pymethods]
impl InferResult {
    /// An answer body read by the caller's own HTTP code, as tritonclient's
    /// `InferResult.from_response_body`: `header_length` is its
    /// `Inference-Header-Content-Length`, `content_encoding` its
    /// `Content-Encoding` (gzip or deflate).
    #[staticmethod]
    #[pyo3(signature = (response_body, verbose=false, header_length=None, content_encoding=None))]
    fn from_response_body(
        py: Python<'_>,
        response_body: &Bound<'_, PyAny>,
        verbose: bool,
        header_length: Option<u64>,
        content_encoding: Option<&str>,
    ) -> PyResult<InferResult> {
        let _ = verbose;
        let body = match content_encoding {
            None | Some("identity") => response_body.clone(),
            Some("gzip") => py
                .import("gzip")?
                .call_method1("decompress", (response_body,))?,
            Some("deflate") => py
                .import("zlib")?
                .call_method1("decompress", (response_body,))?,
            Some(other) => {
                return Err(raise(py, format!("unsupported content encoding '{other}'")));
            }
        };
        // bytes(x) is x itself for bytes, one copy for the others.
        let body = py.get_type::<PyBytes>().call1((body,))?;
        let bytes = body.cast::<PyBytes>()?.as_bytes();
        let answer = py
            .detach(|| wirespeed_client::decode_answer(bytes, header_length))
            .map_err(|e| client_error(py, e))?;
        Ok(InferResult::from_answer(answer))
    }

    /// The output's data as a numpy array, or None without such an output.
    fn as_numpy<'py>(
        &mut self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.outputs.iter_mut().find(|o| o.name == name) {
            Some(output) => InferResult::array(py, output).map(Some),
            None => Ok(None),
        }
    }

    /// The output's object in the answer, or None: a dict of its JSON
    /// (HTTP); over gRPC, its message (`as_json`: its JSON mapping).
    #[pyo3(signature = (name, as_json=false))]
    fn get_output<'py>(
        &mut self,
        py: Python<'py>,
        name: &str,
        as_json: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let response = self.get_response(py, as_json)?;
        let outputs = match response.get_item("outputs") {
            Ok(outputs) => outputs,
            Err(_) => match response.getattr("outputs") {
                Ok(outputs) => outputs,
                Err(_) => return Ok(None),
            },
        };
        for output in outputs.try_iter()? {
            let output = output?;
            let found = match output.get_item("name") {
                Ok(n) => n,
                Err(_) => output.getattr("name")?,
            };
            if found.eq(name)? {
                return Ok(Some(output));
            }
        }
        Ok(None)
    }

    /// The whole answer, as tritonclient's `get_response`: the answer's JSON
    /// as a dict (HTTP); over gRPC, the `ModelInferResponse` (`as_json`:
    /// its JSON mapping as a dict).
    #[pyo3(signature = (as_json=false))]
    fn get_response<'py>(&mut self, py: Python<'py>, as_json: bool) -> PyResult<Bound<'py, PyAny>> {
        if let Some(message) = &self.message {
            return crate::grpc::message_value(
                py,
                message.as_ref(),
                "inference.ModelInferResponse",
                as_json,
            );
        }
        if let Some(response) = &self.response {
            return Ok(response.bind(py).clone());
        }
        let value = json_value(py, &self.json)?.into_bound(py);
        self.response = Some(value.clone().unbind());
        Ok(value)
    }
}

/// The request of tritonclient's `infer` arguments, HTTP or gRPC: the
/// inputs' data shared, not copied.
pub(crate) fn infer_request(
    py: Python<'_>,
    inputs: &[PyRef<'_, InferInput>],
    outputs: Option<Vec<PyRef<'_, InferRequestedOutput>>>,
    request_id: &str,
    parameters: Option<&Bound<'_, PyDict>>,
) -> PyResult<InferRequest> {
    let mut request = InferRequest {
        id: (!request_id.is_empty()).then(|| request_id.to_owned()),
        parameters: parameters_from(parameters)?,
        ..InferRequest::default()
    };
    for input in inputs {
        let Some(data) = &input.input else {
            return Err(raise(
                py,
                format!(
                    "input '{}' has no data: call set_data_from_numpy or set_shared_memory",
                    input.name
                ),
            ));
        };
        request.inputs.push(Arc::clone(data));
    }
    request.outputs = outputs
        .unwrap_or_default()
        .iter()
        .map(|o| o.output.clone())
        .collect();
    Ok(request)
}

/// The HTTP client of one server: its kept-open connections.
#[pyclass(module = "wirespeed.client.http", frozen)]
pub(crate) struct HttpClient {
    url: String,
    options: ClientOptions,
    connections: Connections<Client>,
}

impl HttpClient {
    fn with_client<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut Client) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let open = || Client::new(&self.url, self.options.clone());
        self.connections.run(py, open, call)
    }
}

pub(crate) fn json_value(py: Python<'_>, body: &[u8]) -> PyResult<Py<PyAny>> {
    let text = std::str::from_utf8(body)
        .map_err(|_| raise(py, "the server's answer is not UTF-8 JSON"))?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

#[pymethods]
impl HttpClient {
    #[new]
    #[pyo3(signature = (url, connection_timeout=60.0, network_timeout=60.0, concurrency=1))]
    fn new(
        url: &str,
        connection_timeout: f64,
        network_timeout: f64,
        concurrency: usize,
        py: Python<'_>,
    ) -> PyResult<HttpClient> {
        wirespeed_client::Target::parse(url).map_err(|e| client_error(py, e))?;
        // No timeout (zero, negative, NaN, infinite or too large): a year.
        let seconds = |s: f64| {
            Some(s)
                .filter(|s| *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .unwrap_or(Duration::from_secs(365 * 24 * 3600))
        };
        Ok(HttpClient {
            url: url.to_owned(),
            options: ClientOptions {
                connect_timeout: seconds(connection_timeout),
                network_timeout: seconds(network_timeout),
                ..ClientOptions::default()
            },
            connections: Connections::new(concurrency, None),
        })
    }

    /// Closes the idle connections.
    fn close(&self) {
        self.connections.close();
    }

    #[pyo3(signature = (headers=None))]
    fn is_server_live(
        &self,
        py: Python<'_>,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| c.is_server_live(&headers))
    }

    #[pyo3(signature = (headers=None))]
    fn is_server_ready(
        &self,
        py: Python<'_>,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| c.is_server_ready(&headers))
    }

    #[pyo3(signature = (model_name, model_version="", headers=None))]
    fn is_model_ready(
        &self,
        py: Python<'_>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<bool> {
        let headers = headers_from(headers)?;
        self.with_client(py, |c| {
            c.is_model_ready(model_name, model_version, &headers)
        })
    }

    #[pyo3(signature = (headers=None))]
    fn get_server_metadata(
        &self,
        py: Python<'_>,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let headers = headers_from(headers)?;
        let body = self.with_client(py, |c| c.server_metadata(&headers))?;
        json_value(py, &body)
    }

    #[pyo3(signature = (model_name, model_version="", headers=None))]
    fn get_model_metadata(
        &self,
        py: Python<'_>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let headers = headers_from(headers)?;
        let body = self.with_client(py, |c| {
            c.model_metadata(model_name, model_version, &headers)
        })?;
        json_value(py, &body)
    }

    #[pyo3(signature = (model_name, model_version="", headers=None))]
    fn get_model_config(
        &self,
        py: Python<'_>,
        model_name: &str,
        model_version: &str,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let headers = headers_from(headers)?;
        let body = self.with_client(py, |c| c.model_config(model_name, model_version, &headers))?;
        json_value(py, &body)
    }

    /// A `GET` or `POST` (with a JSON body) of any path: (status, JSON or None).
    #[pyo3(signature = (method, path, body=None, headers=None))]
    fn request(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(u16, Py<PyAny>)> {
        let headers = headers_from(headers)?;
        let reply = match method {
            "GET" => self.with_client(py, |c| c.get(path, &headers))?,
            "POST" => {
                let body = body.unwrap_or(b"{}").to_vec();
                self.with_client(py, move |c| c.post(path, &body, &headers))?
            }
            other => return Err(raise(py, format!("method {other} is not supported"))),
        };
        let value = if reply.body.is_empty() {
            py.None()
        } else {
            json_value(py, &reply.body)?
        };
        Ok((reply.status, value))
    }

    /// Runs inference, as tritonclient's `infer`.
    #[pyo3(signature = (model_name, inputs, model_version="", outputs=None, request_id="",
                        parameters=None, headers=None, binary_data_output=true))]
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
        binary_data_output: bool,
    ) -> PyResult<InferResult> {
        let mut request = infer_request(py, &inputs, outputs, request_id, parameters)?;
        // tritonclient asks for every output in binary when it names none.
        if request.outputs.is_empty() && binary_data_output {
            request.parameters.push((
                "binary_data_output".to_owned(),
                wirespeed_core::ParameterValue::Bool(true),
            ));
        }
        let headers = headers_from(headers)?;
        let answer = self.with_client(py, |c| {
            c.infer_with_headers(model_name, model_version, &request, &headers)
        })?;
        Ok(InferResult::from_answer(answer))
    }
}
