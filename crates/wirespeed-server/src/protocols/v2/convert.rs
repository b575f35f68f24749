//! Between the gRPC messages and wirespeed's own request and response types.
//!
//! Inputs come either as typed `contents` (prost has already decoded them
//! into the `Vec` the tensor keeps, so they move, not copy) or as
//! `raw_input_contents`: each entry the pieces it arrived in (one, sliced
//! out of tonic's message; or, for a `ModelInfer` call read from its
//! HTTP/2 frames, `grpc_frames.rs`, slices of the frames), copied once
//! into the typed tensor. Outputs always go back as
//! `raw_output_contents`, as Triton answers.

use bytes::Bytes;
use wirespeed_core::raw::{from_pieces, into_raw};
use wirespeed_core::{
    DataType, Error, InferRequest, InferResponse, Parameters, RequestLimits, RequestedOutput,
    SharedInput, SharedOutput, SharedRef, Tensor, TensorBudget, TensorData,
};

use pb::infer_parameter::ParameterChoice;
use wirespeed_proto::inference as pb;
use wirespeed_proto::tensors::{parameters_from_map, typed_contents, ContentsError};

/// A `ModelInferRequest` as received: the message without its
/// `raw_input_contents`, and each of those entries as the pieces of bytes
/// it arrived in, in order.
pub(crate) struct Received {
    pub(crate) message: pb::ModelInferRequest,
    pub(crate) raw: Vec<Vec<Bytes>>,
}

impl From<pb::ModelInferRequest> for Received {
    fn from(mut message: pb::ModelInferRequest) -> Received {
        let raw = std::mem::take(&mut message.raw_input_contents)
            .into_iter()
            .map(|entry| vec![entry])
            .collect();
        Received { message, raw }
    }
}

impl Received {
    /// Raw input bytes the request carries.
    pub(crate) fn raw_len(&self) -> usize {
        self.raw.iter().flatten().map(Bytes::len).sum()
    }

    /// The message's encoded length, its raw entries included.
    pub(crate) fn encoded_len(&self) -> usize {
        let raw: usize = self
            .raw
            .iter()
            .map(|pieces| {
                let len: usize = pieces.iter().map(Bytes::len).sum();
                prost::encoding::key_len(7) + prost::encoding::encoded_len_varint(len as u64) + len
            })
            .sum();
        prost::Message::encoded_len(&self.message) + raw
    }
}

/// A raw entry as one slice: the entry's own when it came in one piece.
fn joined(pieces: &[Bytes]) -> std::borrow::Cow<'_, [u8]> {
    match pieces {
        [one] => std::borrow::Cow::Borrowed(&one[..]),
        pieces => std::borrow::Cow::Owned(pieces.concat()),
    }
}

/// A client error about one input.
fn input_error(name: &str, message: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!("input '{name}': {message}"))
}

/// Converts a gRPC infer request, enforcing the request limits. With
/// `length_dimension`, a BYTES input's last dimension may be its elements'
/// length, as MLServer's clients write it (`WRITTEN_SHAPE`).
pub(crate) fn request(
    received: Received,
    model: &str,
    limits: &RequestLimits,
    length_dimension: bool,
) -> Result<InferRequest, Error> {
    let Received { message, raw } = received;
    limits.check_inputs(message.inputs.len())?;
    // Inputs in shared memory carry no data here; raw_input_contents has
    // one entry for each of the others, in order (as tritonclient sends).
    // Most inputs have no parameters: only those that name shared memory
    // are converted and read.
    let mut shared_refs = Vec::with_capacity(message.inputs.len());
    let mut input_parameters: Vec<(String, Parameters)> = Vec::new();
    for input in &message.inputs {
        if input
            .parameters
            .keys()
            .any(|k| !wirespeed_core::is_transport_parameter(k))
        {
            // `$` keys are the server's own (WRITTEN_SHAPE), never a client's.
            let own = parameters(input.parameters.clone())?
                .into_iter()
                .filter(|(k, _)| !wirespeed_core::is_transport_parameter(k) && !k.starts_with('$'))
                .collect();
            input_parameters.push((input.name.clone(), own));
        }
        let names_shm = input
            .parameters
            .keys()
            .any(|k| k.starts_with("shared_memory_"));
        let shared = if names_shm {
            let parameters = parameters(input.parameters.clone())?;
            SharedRef::from_parameters(&parameters).map_err(|m| input_error(&input.name, m))?
        } else {
            None
        };
        shared_refs.push(shared);
    }
    let with_data = shared_refs.iter().filter(|s| s.is_none()).count();
    let raw_entries = raw;
    let raw = !raw_entries.is_empty();
    // An input with `contents` in a request with raw contents: Triton's
    // words, which its clients look for, before the count is checked.
    if let Some(both) = message
        .inputs
        .iter()
        .zip(&shared_refs)
        .find(|(input, shared)| raw && shared.is_none() && input.contents.is_some())
    {
        return Err(Error::invalid_input(format!(
            "contents field must not be specified when using raw_input_contents for '{}' for \
             model '{}'",
            both.0.name, model
        )));
    }
    if raw && raw_entries.len() != with_data {
        return Err(Error::invalid_input(format!(
            "raw_input_contents has {} entries for {} inputs{}; give one per input, in \
             order, or none",
            raw_entries.len(),
            with_data,
            if with_data < message.inputs.len() {
                " outside shared memory"
            } else {
                ""
            }
        )));
    }
    let mut raw_contents = raw_entries.into_iter();
    let mut budget = TensorBudget::default();
    let mut inputs = Vec::with_capacity(message.inputs.len());
    let mut shared_inputs = Vec::new();
    for (input, shared) in message.inputs.into_iter().zip(shared_refs) {
        let name = input.name;
        let datatype: DataType = input.datatype.parse().map_err(|e| input_error(&name, e))?;
        let shape = input
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| {
                input_error(
                    &name,
                    format!("shape {:?} has a negative dimension", input.shape),
                )
            })?;
        let mut count = budget
            .take_shape(limits, datatype, &shape)
            .map_err(|e| e.in_input(&name))?;
        let mut shape = shape;
        if let (true, DataType::Bytes, None, Some((_, outer))) =
            (length_dimension, datatype, &shared, shape.split_last())
        {
            // MLServer's BYTES shape: its last dimension the elements'
            // length, when the elements given count the rest.
            let outer_count: usize = outer.iter().product();
            let given = match (&input.contents, raw_contents.as_slice().first()) {
                (Some(contents), _) => Some(contents.bytes_contents.len()),
                (None, Some(pieces)) => wirespeed_core::raw::bytes_elements(&joined(pieces)),
                (None, None) => None,
            };
            if given == Some(outer_count) && outer_count != count {
                let written = wirespeed_core::written_shape_parameter(&shape);
                match input_parameters.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, own)) => own.push(written),
                    None => input_parameters.push((name.clone(), vec![written])),
                }
                shape = outer.to_vec();
                count = outer_count;
            }
        }
        if let Some(at) = shared {
            if input.contents.is_some() {
                return Err(input_error(
                    &name,
                    "has both contents and shared_memory_region; send one",
                ));
            }
            shared_inputs.push(SharedInput {
                input: inputs.len(),
                at,
            });
            let data = TensorData::with_capacity(datatype, 0);
            inputs.push(Tensor {
                name,
                shape,
                data,
                parameters: Vec::new(),
            });
            continue;
        }
        let data = match (raw_contents.next(), input.contents) {
            // Refused above, before the count: never both here.
            (Some(_), Some(_)) => {
                return Err(input_error(
                    &name,
                    "has both contents and raw_input_contents; send one",
                ))
            }
            (Some(pieces), None) => from_pieces(datatype, count, &pieces, limits.max_string_bytes)
                .map_err(|e| e.for_input(&name))?,
            (None, Some(contents)) => typed(&name, datatype, count, contents, limits)?,
            (None, None) => {
                return Err(input_error(
                    &name,
                    "has no data; set contents or raw_input_contents, or shared_memory_region",
                ))
            }
        };
        inputs.push(Tensor {
            name,
            shape,
            data,
            parameters: Vec::new(),
        });
    }
    let outputs = message
        .outputs
        .into_iter()
        .map(|o| {
            Ok(RequestedOutput {
                parameters: parameters(o.parameters)?,
                name: o.name,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(InferRequest {
        id: (!message.id.is_empty()).then_some(message.id),
        parameters: parameters(message.parameters)?,
        inputs,
        outputs,
        binary_inputs: Vec::new(),
        shared_inputs,
        input_parameters,
    })
}

/// The typed `contents` of an input (`wirespeed_proto::tensors` holds the
/// rules, shared with the upstream client).
fn typed(
    name: &str,
    datatype: DataType,
    count: usize,
    contents: pb::InferTensorContents,
    limits: &RequestLimits,
) -> Result<TensorData, Error> {
    typed_contents(datatype, count, contents, limits).map_err(|e| match e {
        ContentsError::Mismatch(m) => input_error(name, m),
        ContentsError::Limit(e) => e.in_input(name).into(),
    })
}

/// A `parameters` map, sorted by key so its order does not depend on hashing.
fn parameters(
    map: std::collections::HashMap<String, pb::InferParameter>,
) -> Result<Parameters, Error> {
    parameters_from_map(map).map_err(Error::invalid_input)
}

/// Builds the gRPC response: outputs' metadata, and their data as raw
/// bytes; an output written to shared memory has its `shared_memory_*`
/// parameters and an empty raw entry, so the others keep their places.
pub(crate) fn response(response: InferResponse) -> pb::ModelInferResponse {
    response_as(response, false)
}

/// A response as `ModelInferResponse`, its tensors in the typed
/// `contents` of each output when `typed` and every output has such a
/// field (MLServer answers so a request that sent no raw bytes), else
/// in `raw_output_contents`.
pub(crate) fn response_as(response: InferResponse, typed: bool) -> pb::ModelInferResponse {
    let typed = typed
        && response.outputs.iter().enumerate().all(|(i, t)| {
            response.shared_output(i).is_none()
                && wirespeed_proto::tensors::has_contents_field(t.datatype())
        });
    let mut metadata = Vec::with_capacity(response.outputs.len());
    let parameters = wirespeed_proto::tensors::parameters_to_map(&response.parameters);
    let mut raw = Vec::with_capacity(response.outputs.len());
    let shared: Vec<Option<SharedOutput>> = (0..response.outputs.len())
        .map(|i| response.shared_output(i).cloned())
        .collect();
    for (tensor, shared) in response.outputs.into_iter().zip(shared) {
        // The output's own parameters (a content type), and where its data
        // went when in shared memory.
        let mut parameters = wirespeed_proto::tensors::parameters_to_map(&tensor.parameters);
        // The shape as an MLServer runtime wrote it, when it counts bytes.
        let shape = match tensor.parameters.is_empty() {
            true => None,
            false => wirespeed_core::written_shape(&tensor.parameters),
        }
        .unwrap_or_else(|| tensor.shape.clone());
        let datatype = tensor.datatype().as_str().to_owned();
        let contents = match shared {
            Some(shared) => {
                raw.push(Bytes::new());
                let mut put = |key: &str, choice| {
                    parameters.insert(
                        key.to_owned(),
                        pb::InferParameter {
                            parameter_choice: Some(choice),
                        },
                    );
                };
                put(
                    "shared_memory_region",
                    ParameterChoice::StringParam(shared.at.region),
                );
                put(
                    "shared_memory_byte_size",
                    ParameterChoice::Int64Param(shared.written as i64),
                );
                if shared.at.offset > 0 {
                    put(
                        "shared_memory_offset",
                        ParameterChoice::Int64Param(shared.at.offset as i64),
                    );
                }
                None
            }
            None if typed => wirespeed_proto::tensors::into_contents(tensor.data),
            None => {
                // The tensor's own buffer, sent as it is.
                raw.push(into_raw(tensor.data));
                None
            }
        };
        metadata.push(pb::model_infer_response::InferOutputTensor {
            datatype,
            shape: shape.iter().map(|&d| d as i64).collect(),
            name: tensor.name,
            parameters,
            contents,
        });
    }
    pb::ModelInferResponse {
        model_name: response.model_name,
        model_version: response.model_version,
        id: response.id.unwrap_or_default(),
        parameters,
        outputs: metadata,
        raw_output_contents: raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::model_infer_request::InferInputTensor;

    fn input(
        datatype: &str,
        shape: Vec<i64>,
        contents: pb::InferTensorContents,
    ) -> InferInputTensor {
        InferInputTensor {
            name: "x".into(),
            datatype: datatype.into(),
            shape,
            parameters: Default::default(),
            contents: Some(contents),
        }
    }

    fn convert(inputs: Vec<InferInputTensor>, raw: Vec<Bytes>) -> Result<InferRequest, Error> {
        request(
            pb::ModelInferRequest {
                inputs,
                raw_input_contents: raw,
                ..Default::default()
            }
            .into(),
            "m",
            &RequestLimits::default(),
            false,
        )
    }

    #[test]
    fn typed_contents_become_tensors() {
        let contents = pb::InferTensorContents {
            int_contents: vec![-128, 127],
            ..Default::default()
        };
        let r = convert(vec![input("INT8", vec![2], contents)], vec![]).unwrap();
        assert_eq!(r.inputs[0].data, TensorData::Int8(vec![-128, 127]));
    }

    #[test]
    fn out_of_range_and_misplaced_values_are_refused() {
        let contents = pb::InferTensorContents {
            int_contents: vec![128],
            ..Default::default()
        };
        let e = convert(vec![input("INT8", vec![1], contents)], vec![]).unwrap_err();
        assert!(e.message().contains("out of range for INT8"), "{e}");
        let contents = pb::InferTensorContents {
            fp64_contents: vec![1.0],
            ..Default::default()
        };
        let e = convert(vec![input("FP32", vec![1], contents)], vec![]).unwrap_err();
        assert!(e.message().contains("fp64_contents holds values"), "{e}");
        let contents = pb::InferTensorContents {
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        let e = convert(vec![input("FP32", vec![2], contents)], vec![]).unwrap_err();
        assert!(e.message().contains("has 2 elements"), "{e}");
    }

    #[test]
    fn raw_contents_are_checked_against_the_shape() {
        let mut x = input("FP32", vec![2], Default::default());
        x.contents = None;
        let ok = convert(vec![x.clone()], vec![Bytes::from_static(&[0; 8])]).unwrap();
        assert_eq!(ok.inputs[0].data, TensorData::Fp32(vec![0.0, 0.0]));
        let e = convert(vec![x.clone()], vec![Bytes::from_static(&[0; 6])]).unwrap_err();
        assert!(e.message().contains("take 8 bytes"), "{e}");
        let e = convert(vec![x], vec![]).unwrap_err();
        assert!(e.message().contains("has no data"), "{e}");
    }

    #[test]
    fn a_huge_shape_is_a_limit_error_before_any_allocation() {
        use wirespeed_core::ErrorKind;
        let mut x = input("FP32", vec![1_000_000_000_000], Default::default());
        x.contents = None;
        let e = convert(vec![x], vec![Bytes::from_static(&[0; 8])]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LimitExceeded);
    }
}
