//! Tensors between Rust and numpy. Into numpy, an array takes ownership of
//! the tensor's `Vec` (no copy: the array's base is that buffer); BYTES
//! become an object array of `bytes`, as tritonclient returns them. From
//! numpy, the elements are copied once into a tensor.

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use wirespeed_core::{bf16, f16, DataType, TensorData};

/// An array of `shape` that owns `values`.
fn owned<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
    values: Vec<T>,
) -> PyResult<Bound<'py, PyAny>> {
    let array = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| PyValueError::new_err(format!("shape {shape:?}: {e}")))?;
    Ok(PyArrayDyn::from_owned_array(py, array).into_any())
}

/// The numpy array of a tensor, owning its buffer.
pub(crate) fn to_numpy<'py>(
    py: Python<'py>,
    shape: &[usize],
    data: TensorData,
) -> PyResult<Bound<'py, PyAny>> {
    match data {
        TensorData::Bool(v) => owned(py, shape, v),
        TensorData::Uint8(v) => owned(py, shape, v),
        TensorData::Uint16(v) => owned(py, shape, v),
        TensorData::Uint32(v) => owned(py, shape, v),
        TensorData::Uint64(v) => owned(py, shape, v),
        TensorData::Int8(v) => owned(py, shape, v),
        TensorData::Int16(v) => owned(py, shape, v),
        TensorData::Int32(v) => owned(py, shape, v),
        TensorData::Int64(v) => owned(py, shape, v),
        TensorData::Fp16(v) => owned(py, shape, v),
        TensorData::Fp32(v) => owned(py, shape, v),
        TensorData::Fp64(v) => owned(py, shape, v),
        // numpy has no bfloat16 of its own: ml_dtypes' is the one
        // tritonclient uses; without it, BF16 cannot be an array.
        TensorData::Bf16(v) => owned(py, shape, v).map_err(|e| {
            PyTypeError::new_err(format!(
                "a BF16 tensor needs ml_dtypes' bfloat16 (pip install ml_dtypes): {e}"
            ))
        }),
        TensorData::Bytes(v) => {
            let objects: Vec<Py<PyAny>> = v
                .into_iter()
                .map(|b| PyBytes::new(py, &b).into_any().unbind())
                .collect();
            owned(py, shape, objects)
        }
    }
}

/// The tensor datatype of a numpy array's dtype.
pub(crate) fn datatype_of(array: &Bound<'_, PyAny>) -> PyResult<DataType> {
    let py = array.py();
    let untyped = array.cast::<numpy::PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a numpy array, found {}",
            type_name(array)
        ))
    })?;
    let descr = untyped.dtype();
    use numpy::{dtype, PyArrayDescrMethods};
    let is = |d: Bound<'_, numpy::PyArrayDescr>| descr.is_equiv_to(&d);
    Ok(if is(dtype::<bool>(py)) {
        DataType::Bool
    } else if is(dtype::<u8>(py)) {
        DataType::Uint8
    } else if is(dtype::<u16>(py)) {
        DataType::Uint16
    } else if is(dtype::<u32>(py)) {
        DataType::Uint32
    } else if is(dtype::<u64>(py)) {
        DataType::Uint64
    } else if is(dtype::<i8>(py)) {
        DataType::Int8
    } else if is(dtype::<i16>(py)) {
        DataType::Int16
    } else if is(dtype::<i32>(py)) {
        DataType::Int32
    } else if is(dtype::<i64>(py)) {
        DataType::Int64
    } else if is(dtype::<f16>(py)) {
        DataType::Fp16
    } else if is(dtype::<f32>(py)) {
        DataType::Fp32
    } else if is(dtype::<f64>(py)) {
        DataType::Fp64
    } else if matches!(descr.kind(), b'O' | b'S' | b'U') {
        DataType::Bytes
    } else if descr.to_string().contains("bfloat16") {
        DataType::Bf16
    } else {
        return Err(PyTypeError::new_err(format!(
            "numpy dtype {descr} has no tensor datatype"
        )));
    })
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Copies a numpy array's elements, in C order, into a tensor.
pub(crate) fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<(Vec<usize>, TensorData)> {
    let datatype = datatype_of(array)?;
    let shape = array.cast::<numpy::PyUntypedArray>()?.shape().to_vec();
    fn copy<T: Element + Copy>(array: &Bound<'_, PyAny>) -> PyResult<Vec<T>> {
        let typed = array.cast::<PyArrayDyn<T>>()?;
        let view = typed.readonly();
        Ok(match view.as_slice() {
            Ok(slice) => slice.to_vec(),
            Err(_) => view.as_array().iter().copied().collect(),
        })
    }
    let data = match datatype {
        DataType::Bool => TensorData::Bool(copy::<bool>(array)?),
        DataType::Uint8 => TensorData::Uint8(copy(array)?),
        DataType::Uint16 => TensorData::Uint16(copy(array)?),
        DataType::Uint32 => TensorData::Uint32(copy(array)?),
        DataType::Uint64 => TensorData::Uint64(copy(array)?),
        DataType::Int8 => TensorData::Int8(copy(array)?),
        DataType::Int16 => TensorData::Int16(copy(array)?),
        DataType::Int32 => TensorData::Int32(copy(array)?),
        DataType::Int64 => TensorData::Int64(copy(array)?),
        DataType::Fp16 => TensorData::Fp16(copy::<f16>(array)?),
        DataType::Fp32 => TensorData::Fp32(copy(array)?),
        DataType::Fp64 => TensorData::Fp64(copy(array)?),
        DataType::Bf16 => TensorData::Bf16(copy::<bf16>(array)?),
        DataType::Bytes => TensorData::Bytes(byte_elements(array)?),
    };
    Ok((shape, data))
}

/// The elements of an object, bytes or str array, in C order: `bytes` as
/// they are, `str` as UTF-8, anything else as its `str()`.
fn byte_elements(array: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    let flat = array.call_method1("ravel", ("C",))?;
    let items = flat.call_method0("tolist")?;
    let mut out = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        if let Ok(b) = item.cast::<PyBytes>() {
            out.push(b.as_bytes().to_vec());
        } else if let Ok(s) = item.cast::<PyString>() {
            out.push(s.to_cow()?.as_bytes().to_vec());
        } else {
            out.push(item.str()?.to_cow()?.as_bytes().to_vec());
        }
    }
    Ok(out)
}
