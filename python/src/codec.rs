//! `decode_request` and `encode_response`: the server's V2 codec for
//! Python code that serves models itself (FastAPI, KServe, MLServer).

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};
use wirespeed_core::raw::{from_raw, raw_len, write_raw, RawError};
use wirespeed_core::{
    element_count, InferResponse, ParameterValue, Parameters, RequestLimits, Tensor,
};
use wirespeed_json::{DecodeOptions, RequestDecoder};

use crate::tensors::{from_numpy, to_numpy};

create_exception!(
    wirespeed,
    DecodeError,
    pyo3::exceptions::PyValueError,
    "A body that is not a valid V2 infer request. Its attributes: `category` \
     ('syntax', 'schema', 'type', 'range', 'shape', 'limit' or 'binary'), \
     `offset` (the byte in the body) and `input` (the input's name, or None)."
);

fn decode_error(
    py: Python<'_>,
    category: &str,
    offset: u64,
    input: Option<&str>,
    message: String,
) -> PyErr {
    let err = DecodeError::new_err(message);
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail.
    let _ = value.setattr("category", category);
    let _ = value.setattr("offset", offset);
    let _ = value.setattr("input", input);
    err
}

/// A decoded V2 infer request.
#[pyclass(module = "wirespeed", frozen, get_all)]
pub(crate) struct Request {
    /// The inputs by name, as numpy arrays that own the decoder's buffers.
    inputs: Py<PyDict>,
    /// The request's id, or None.
    id: Option<String>,
    /// Request-level parameters.
    parameters: Py<PyDict>,
    /// The outputs asked for: dicts with `name` and `parameters`.
    outputs: Py<PyList>,
}

#[pymethods]
impl Request {
    fn __repr__(&self, py: Python<'_>) -> String {
        let names: Vec<String> = self
            .inputs
            .bind(py)
            .keys()
            .iter()
            .map(|k| k.to_string())
            .collect();
        let id = self
            .id
            .as_deref()
            .map_or("None".to_owned(), |id| format!("{id:?}"));
        format!("Request(id={id}, inputs={names:?})")
    }
}

/// Decodes a V2 infer request (JSON, or Triton's binary extension when
/// `header_length` says where the JSON ends).
#[pyfunction]
#[pyo3(signature = (body, header_length=None, *, strict=false, max_elements=None))]
pub(crate) fn decode_request(
    py: Python<'_>,
    body: &Bound<'_, PyAny>,
    header_length: Option<usize>,
    strict: bool,
    max_elements: Option<usize>,
) -> PyResult<Request> {
    // `bytes` is read where it lies; a bytearray or memoryview is copied
    // once first (its memory could change while the GIL is released).
    let copied;
    let bytes: &[u8] = if let Ok(b) = body.cast::<PyBytes>() {
        b.as_bytes()
    } else if body.is_instance_of::<pyo3::types::PyByteArray>()
        || body.is_instance_of::<pyo3::types::PyMemoryView>()
    {
        copied = PyBytes::new(py, &[]).get_type().call1((body,))?;
        copied.cast::<PyBytes>()?.as_bytes()
    } else {
        return Err(PyTypeError::new_err(format!(
            "body must be bytes, bytearray or memoryview, not {}",
            body.get_type().name()?
        )));
    };
    let mut limits = RequestLimits::default();
    if let Some(max) = max_elements {
        limits.max_elements = max;
        limits.max_tensor_bytes = max.saturating_mul(8);
    }
    // A large body's runs of numbers are decoded on the pool's threads
    // too, bit-identical to one thread.
    let pool = if bytes.len() >= wirespeed_json::PARALLEL_MIN_BYTES {
        Some(crate::pool::pool()?)
            .filter(|p| p.threads() > 1)
            .cloned()
    } else {
        None
    };
    let options = DecodeOptions {
        limits,
        strict,
        pool,
        bytes_length_dimension: false,
    };
    let decoded = py.detach(|| decode(bytes, header_length, options));
    let request = decoded.map_err(|e| decode_error(py, e.0, e.1, e.2.as_deref(), e.3))?;

    let inputs = PyDict::new(py);
    for tensor in request.inputs {
        let array = to_numpy(py, &tensor.shape, tensor.data)?;
        inputs.set_item(tensor.name, array)?;
    }
    let outputs = PyList::empty(py);
    for output in request.outputs {
        let entry = PyDict::new(py);
        entry.set_item("name", output.name)?;
        entry.set_item("parameters", parameters_dict(py, &output.parameters)?)?;
        outputs.append(entry)?;
    }
    Ok(Request {
        inputs: inputs.unbind(),
        id: request.id,
        parameters: parameters_dict(py, &request.parameters)?.unbind(),
        outputs: outputs.unbind(),
    })
}

/// category, offset, input, message
type Failure = (&'static str, u64, Option<String>, String);

fn decode(
    body: &[u8],
    header_length: Option<usize>,
    options: DecodeOptions,
) -> Result<wirespeed_core::InferRequest, Failure> {
    let max_element = options.limits.max_string_bytes;
    let json_len = match header_length {
        Some(n) if n > body.len() => {
            return Err((
                "binary",
                0,
                None,
                format!(
                    "header_length {n} is past the body's end ({} bytes)",
                    body.len()
                ),
            ))
        }
        Some(n) => n,
        None => body.len(),
    };
    let mut decoder = RequestDecoder::new(options).with_body_len(json_len as u64);
    if header_length.is_some() {
        decoder = decoder.with_binary_data();
    }
    let json_failure = |e: wirespeed_json::DecodeError| -> Failure {
        (
            e.category().as_str(),
            e.offset(),
            e.input().map(str::to_owned),
            e.to_string(),
        )
    };
    decoder.feed(&body[..json_len]).map_err(json_failure)?;
    let mut request = decoder.finish().map_err(json_failure)?;
    let mut at = json_len;
    for binary in std::mem::take(&mut request.binary_inputs) {
        let tensor = &mut request.inputs[binary.input];
        let fail = |m: String| ("binary", at as u64, Some(tensor.name.clone()), m);
        let end = at
            .checked_add(binary.size)
            .filter(|&end| end <= body.len())
            .ok_or_else(|| {
                fail(format!(
                    "input '{}': its {} bytes of binary data run past the body's end",
                    tensor.name, binary.size
                ))
            })?;
        let count = element_count(&tensor.shape).unwrap_or(usize::MAX);
        tensor.data = from_raw(tensor.datatype(), count, &body[at..end], max_element).map_err(
            |e| match e {
                RawError::Invalid(m) => fail(format!("input '{}': {m}", tensor.name)),
                RawError::Limit(l) => ("limit", at as u64, Some(tensor.name.clone()), {
                    format!("input '{}': {}", tensor.name, l.message())
                }),
            },
        )?;
        at = end;
    }
    if at != body.len() {
        return Err((
            "binary",
            at as u64,
            None,
            format!(
                "the body has {} bytes after the binary data its inputs' binary_data_size \
                 values account for",
                body.len() - at
            ),
        ));
    }
    if !request.shared_inputs.is_empty() {
        return Err((
            "schema",
            0,
            None,
            "inputs in shared memory are for a server with registered regions".to_owned(),
        ));
    }
    Ok(request)
}

pub(crate) fn parameters_dict<'py>(
    py: Python<'py>,
    parameters: &Parameters,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in parameters {
        match value {
            ParameterValue::Bool(b) => dict.set_item(key, *b)?,
            ParameterValue::Int(i) => dict.set_item(key, *i)?,
            ParameterValue::Float(x) => dict.set_item(key, *x)?,
            ParameterValue::String(s) => dict.set_item(key, s)?,
        }
    }
    Ok(dict)
}

pub(crate) fn parameters_from(dict: Option<&Bound<'_, PyDict>>) -> PyResult<Parameters> {
    let mut out = Vec::new();
    let Some(dict) = dict else { return Ok(out) };
    for (key, value) in dict.iter() {
        let key: String = key.extract()?;
        // bool before int: a Python bool is an int.
        let value = if let Ok(b) = value.cast::<PyBool>() {
            ParameterValue::Bool(b.is_true())
        } else if value.is_instance_of::<PyInt>() {
            ParameterValue::Int(value.extract()?)
        } else if value.is_instance_of::<PyFloat>() {
            ParameterValue::Float(value.extract()?)
        } else if let Ok(s) = value.cast::<PyString>() {
            ParameterValue::String(s.to_cow()?.into_owned())
        } else {
            return Err(PyTypeError::new_err(format!(
                "parameter '{key}' must be a str, int, float or bool, not {}",
                value.get_type().name()?
            )));
        };
        out.push((key, value));
    }
    Ok(out)
}

/// Encodes a V2 infer response from numpy outputs. With `binary`, outputs
/// go as raw bytes after the JSON (Triton's binary extension) and the
/// header's length is returned as well, for
/// `Inference-Header-Content-Length`.
#[pyfunction]
#[pyo3(signature = (outputs, *, model_name, model_version="", id=None, parameters=None, binary=false))]
pub(crate) fn encode_response(
    py: Python<'_>,
    outputs: &Bound<'_, PyDict>,
    model_name: &str,
    model_version: &str,
    id: Option<String>,
    parameters: Option<&Bound<'_, PyDict>>,
    binary: bool,
) -> PyResult<(Py<PyBytes>, Option<usize>)> {
    let mut tensors = Vec::with_capacity(outputs.len());
    for (name, array) in outputs.iter() {
        let (shape, data) = from_numpy(&array)?;
        tensors.push(Tensor {
            name: name.extract()?,
            shape,
            data,
            parameters: Vec::new(),
        });
    }
    let response = InferResponse {
        model_name: model_name.to_owned(),
        model_version: model_version.to_owned(),
        id,
        parameters: parameters_from(parameters)?,
        outputs: tensors,
        shared_outputs: Vec::new(),
        dialect: Default::default(),
    };
    let (body, header) = py.detach(|| {
        let mut body = Vec::new();
        if binary {
            let flags = vec![true; response.outputs.len()];
            wirespeed_json::encode_infer_response_header(&response, &flags, &mut body);
            let header = body.len();
            body.reserve(response.outputs.iter().map(|t| raw_len(&t.data)).sum());
            for t in &response.outputs {
                write_raw(&t.data, &mut body);
            }
            (body, Some(header))
        } else {
            wirespeed_json::encode_infer_response(&response, &mut body);
            (body, None)
        }
    });
    if body.len() > isize::MAX as usize {
        return Err(PyValueError::new_err("the response is too large"));
    }
    Ok((PyBytes::new(py, &body).unbind(), header))
}
