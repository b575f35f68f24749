//! What a worker answered, read: the outputs it placed, checked against
//! the declared ones, and its errors with Triton's statuses.

use wirespeed_core::raw::{from_raw, raw_size};
use wirespeed_core::{element_count, DataType, Error, ErrorKind, Tensor, TensorData};

use super::super::segment::OutputSegment;
use super::super::wire;
use super::Launch;

/// Where a worker's outputs lie: its output segment, or the bytes after a
/// streamed response.
pub(crate) trait Outputs {
    /// The `len` bytes `offset` in, when they lie inside.
    fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]>;

    /// Those bytes as a tensor of `datatype` left where they are, when
    /// they can be; `None` to copy them.
    fn lend(&self, _datatype: DataType, _offset: usize, _len: usize) -> Option<TensorData> {
        None
    }
}

impl Outputs for [u8] {
    fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.get(offset..offset.checked_add(len)?)
    }
}

impl Outputs for OutputSegment {
    fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        OutputSegment::bytes(self, offset, len)
    }

    fn lend(&self, datatype: DataType, offset: usize, len: usize) -> Option<TensorData> {
        OutputSegment::lend(self, datatype, offset, len)
    }
}

/// One output's elements: lent where they lie when they can be, else
/// copied; `None` when they lie outside, or over an output still held.
fn output_data(
    contents: &(impl Outputs + ?Sized),
    datatype: DataType,
    count: usize,
    offset: usize,
    len: usize,
) -> Option<Result<TensorData, wirespeed_core::raw::RawError>> {
    if raw_size(datatype, count) == Some(len) {
        if let Some(data) = contents.lend(datatype, offset, len) {
            return Some(Ok(data));
        }
    }
    let bytes = contents.bytes(offset, len)?;
    Some(from_raw(datatype, count, bytes, usize::MAX))
}

/// Outputs placed in `contents` (the output segment, or the bytes after a
/// streamed response), checked against the declared ones, in the order
/// `wanted` asks. One of a decoupled model's `streamed` responses may
/// leave some out, as Triton's may (an LLM's `finish_reason` in its last
/// response only); a whole answer may not.
pub(crate) fn outputs_from(
    launch: &Launch,
    wanted: &[usize],
    placed: &[wire::Placed],
    contents: &(impl Outputs + ?Sized),
    streamed: bool,
) -> Result<Vec<Tensor>, Error> {
    let model = &launch.model;
    let bad = |message: String| Error::model_failed(format!("model '{model}': {message}"));
    if launch.open && wanted.is_empty() {
        return placed
            .iter()
            .map(|wire::Placed(name, datatype, shape, offset, len, own)| {
                let datatype: DataType = datatype.parse().map_err(|e| bad(format!("{e}")))?;
                let count = element_count(shape)
                    .ok_or_else(|| bad(format!("output '{name}' has too many elements")))?;
                let data = output_data(contents, datatype, count, *offset, *len)
                    .ok_or_else(|| bad(format!("output '{name}' lies outside its segment")))?
                    .map_err(|e| bad(e.for_input(name).message().to_owned()))?;
                Ok(Tensor {
                    name: name.clone(),
                    shape: shape.clone(),
                    data,
                    parameters: wire::parameters(own),
                })
            })
            .collect();
    }
    wanted
        .iter()
        .filter(|&&index| !streamed || placed.iter().any(|p| p.0 == launch.outputs[index].name))
        .map(|&index| {
            let spec = &launch.outputs[index];
            let Some(wire::Placed(_, datatype, shape, offset, len, own)) =
                placed.iter().find(|p| p.0 == spec.name)
            else {
                return Err(bad(format!("it did not return output '{}'", spec.name)));
            };
            let datatype: DataType = datatype.parse().map_err(|e| bad(format!("{e}")))?;
            if datatype != spec.datatype {
                return Err(bad(format!(
                    "output '{}' is declared {}, and the model returned {datatype}",
                    spec.name, spec.datatype
                )));
            }
            if !launch.shapes_as_produced && !spec.accepts_shape(shape) {
                return Err(bad(format!(
                    "output '{}' is declared with shape {}, and the model returned shape {}",
                    spec.name,
                    spec.shape_display(),
                    wirespeed_core::format_shape(shape)
                )));
            }
            let count = element_count(shape)
                .ok_or_else(|| bad(format!("output '{}' has too many elements", spec.name)))?;
            let data = output_data(contents, datatype, count, *offset, *len)
                .ok_or_else(|| {
                    bad(format!(
                        "output '{}' lies outside the output segment, or over an output \
                         still being answered",
                        spec.name
                    ))
                })?
                .map_err(|e| bad(e.for_input(&spec.name).message().to_owned()))?;
            Ok(Tensor {
                name: spec.name.clone(),
                shape: shape.clone(),
                data,
                parameters: wire::parameters(own),
            })
        })
        .collect()
}

/// A request's error as the worker reported it: `kind` is the model's
/// code (`pb_utils.TritonError`'s), with Triton's statuses.
pub(crate) fn model_error(model: &str, kind: &str, error: String) -> Error {
    // A Triton model's error, worded by the worker as Triton words it (it
    // names the model's instance where Triton does), with its code's status.
    if let Some(code) = kind.strip_prefix("triton:") {
        let kind = match code {
            "UNKNOWN" => ErrorKind::Unknown,
            "NOT_FOUND" => ErrorKind::ModelNotFound,
            "INVALID_ARG" => ErrorKind::InvalidInput,
            "UNAVAILABLE" => ErrorKind::Unavailable,
            "UNSUPPORTED" => ErrorKind::NotImplemented,
            "ALREADY_EXISTS" => ErrorKind::AlreadyExists,
            "CANCELLED" => ErrorKind::Cancelled,
            _ => ErrorKind::ModelFailed,
        };
        return Error::new(kind, error);
    }
    match kind {
        "invalid" => Error::invalid_input(error),
        "not_found" => Error::new(ErrorKind::ModelNotFound, error),
        "unavailable" => Error::new(ErrorKind::Unavailable, format!("model '{model}': {error}")),
        "unsupported" => Error::new(ErrorKind::NotImplemented, error),
        "interrupted" => Error::new(
            ErrorKind::GatewayTimeout,
            format!("model '{model}': {error}"),
        ),
        _ => Error::model_failed(format!("model '{model}': {error}")),
    }
}
