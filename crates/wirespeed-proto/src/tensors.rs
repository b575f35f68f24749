//! Between the Open Inference Protocol's gRPC tensors and wirespeed's own:
//! typed `contents` into a [`TensorData`], and `parameters` maps both ways.
//! The server reads clients' requests with it and the upstream backend
//! reads other servers' answers, so both hold the same rules.

use std::collections::HashMap;
use std::fmt;

use wirespeed_core::{DataType, LimitError, ParameterValue, Parameters, RequestLimits, TensorData};

use crate::inference::infer_parameter::ParameterChoice;
use crate::inference::{InferParameter, InferTensorContents};

/// Why typed contents do not make a tensor: they do not fit its datatype
/// or shape, or a value is over a request limit.
#[derive(Debug)]
pub enum ContentsError {
    /// The contents do not fit the tensor; the text says how.
    Mismatch(String),
    /// A string is longer than the limit.
    Limit(LimitError),
}

impl fmt::Display for ContentsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContentsError::Mismatch(m) => f.write_str(m),
            ContentsError::Limit(e) => f.write_str(e.message()),
        }
    }
}

/// The typed `contents` of a tensor of `datatype` and `count` elements: the
/// field its datatype uses must hold exactly `count` values, and the others
/// nothing. Values move into the tensor; narrower integer types are checked
/// for range.
pub fn typed_contents(
    datatype: DataType,
    count: usize,
    contents: InferTensorContents,
    limits: &RequestLimits,
) -> Result<TensorData, ContentsError> {
    let mismatch = |m: String| Err(ContentsError::Mismatch(m));
    let filled: Vec<(&str, usize)> = [
        ("bool_contents", contents.bool_contents.len()),
        ("int_contents", contents.int_contents.len()),
        ("int64_contents", contents.int64_contents.len()),
        ("uint_contents", contents.uint_contents.len()),
        ("uint64_contents", contents.uint64_contents.len()),
        ("fp32_contents", contents.fp32_contents.len()),
        ("fp64_contents", contents.fp64_contents.len()),
        ("bytes_contents", contents.bytes_contents.len()),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .collect();
    let field = match datatype {
        DataType::Bool => "bool_contents",
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "int_contents",
        DataType::Int64 => "int64_contents",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "uint_contents",
        DataType::Uint64 => "uint64_contents",
        DataType::Fp32 => "fp32_contents",
        DataType::Fp64 => "fp64_contents",
        DataType::Bytes => "bytes_contents",
        DataType::Fp16 | DataType::Bf16 => {
            return mismatch(format!(
                "{datatype} has no contents field; it is sent as raw contents"
            ))
        }
    };
    if let Some((other, _)) = filled.iter().find(|(f, _)| *f != field) {
        return mismatch(format!(
            "is {datatype}, whose values go in {field}, but {other} holds values"
        ));
    }
    let given = filled.first().map_or(0, |&(_, n)| n);
    if given != count {
        return mismatch(format!(
            "its shape has {count} elements, but {field} holds {given}"
        ));
    }
    Ok(match datatype {
        DataType::Bool => TensorData::Bool(contents.bool_contents),
        DataType::Int8 => TensorData::Int8(narrow(datatype, contents.int_contents)?),
        DataType::Int16 => TensorData::Int16(narrow(datatype, contents.int_contents)?),
        DataType::Int32 => TensorData::Int32(contents.int_contents),
        DataType::Int64 => TensorData::Int64(contents.int64_contents),
        DataType::Uint8 => TensorData::Uint8(narrow(datatype, contents.uint_contents)?),
        DataType::Uint16 => TensorData::Uint16(narrow(datatype, contents.uint_contents)?),
        DataType::Uint32 => TensorData::Uint32(contents.uint_contents),
        DataType::Uint64 => TensorData::Uint64(contents.uint64_contents),
        DataType::Fp32 => TensorData::Fp32(contents.fp32_contents),
        DataType::Fp64 => TensorData::Fp64(contents.fp64_contents),
        DataType::Bytes => {
            let mut elements = Vec::with_capacity(count);
            for b in contents.bytes_contents {
                limits.check_string(b.len()).map_err(ContentsError::Limit)?;
                elements.push(Vec::from(b));
            }
            TensorData::Bytes(elements)
        }
        DataType::Fp16 | DataType::Bf16 => unreachable!("refused above"),
    })
}

/// `values` narrowed to `T`, each checked for range: the integer fields
/// both protocols share among several widths (V2's `int_contents`, TF's
/// `int_val`).
pub(crate) fn narrow<S: Copy + fmt::Display, T: TryFrom<S>>(
    datatype: DataType,
    values: Vec<S>,
) -> Result<Vec<T>, ContentsError> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            T::try_from(v).map_err(|_| {
                ContentsError::Mismatch(format!("element {i} ({v}) is out of range for {datatype}"))
            })
        })
        .collect()
}

/// Whether `datatype` has a typed field of `InferTensorContents` (all but
/// FP16 and BF16).
pub fn has_contents_field(datatype: DataType) -> bool {
    !matches!(datatype, DataType::Fp16 | DataType::Bf16)
}

/// A tensor's values in the typed field of `InferTensorContents` its
/// datatype has (as MLServer answers gRPC requests that sent no raw
/// bytes), moved where the field's type is the tensor's; `None` for FP16
/// and BF16, which have no field.
pub fn into_contents(data: TensorData) -> Option<InferTensorContents> {
    let mut contents = InferTensorContents::default();
    match data {
        TensorData::Bool(v) => contents.bool_contents = v,
        TensorData::Uint8(v) => contents.uint_contents = v.into_iter().map(u32::from).collect(),
        TensorData::Uint16(v) => contents.uint_contents = v.into_iter().map(u32::from).collect(),
        TensorData::Uint32(v) => contents.uint_contents = v,
        TensorData::Uint64(v) => contents.uint64_contents = v,
        TensorData::Int8(v) => contents.int_contents = v.into_iter().map(i32::from).collect(),
        TensorData::Int16(v) => contents.int_contents = v.into_iter().map(i32::from).collect(),
        TensorData::Int32(v) => contents.int_contents = v,
        TensorData::Int64(v) => contents.int64_contents = v,
        TensorData::Fp32(v) => contents.fp32_contents = v,
        TensorData::Fp64(v) => contents.fp64_contents = v,
        TensorData::Bytes(v) => {
            contents.bytes_contents = v.into_iter().map(bytes::Bytes::from).collect()
        }
        TensorData::Fp16(_) | TensorData::Bf16(_) => return None,
    }
    Some(contents)
}

/// A `parameters` map as wirespeed's [`Parameters`], sorted by key so its
/// order does not depend on hashing. The error names a parameter with no
/// value.
pub fn parameters_from_map(map: HashMap<String, InferParameter>) -> Result<Parameters, String> {
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let value = match value.parameter_choice {
            Some(ParameterChoice::BoolParam(b)) => ParameterValue::Bool(b),
            Some(ParameterChoice::Int64Param(i)) => ParameterValue::Int(i),
            Some(ParameterChoice::StringParam(s)) => ParameterValue::String(s),
            Some(ParameterChoice::DoubleParam(x)) => ParameterValue::Float(x),
            Some(ParameterChoice::Uint64Param(u)) => match i64::try_from(u) {
                Ok(i) => ParameterValue::Int(i),
                Err(_) => ParameterValue::Float(u as f64),
            },
            None => return Err(format!("parameter '{key}' has no value")),
        };
        out.push((key, value));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// [`Parameters`] as a message's `parameters` map, but for the server's own
/// (`$` keys: [`wirespeed_core::WRITTEN_SHAPE`], ...).
pub fn parameters_to_map(parameters: &Parameters) -> HashMap<String, InferParameter> {
    parameters
        .iter()
        .filter(|(key, _)| !key.starts_with('$'))
        .map(|(key, value)| {
            let choice = match value {
                ParameterValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParameterValue::Int(i) => ParameterChoice::Int64Param(*i),
                ParameterValue::Float(x) => ParameterChoice::DoubleParam(*x),
                ParameterValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            let parameter = InferParameter {
                parameter_choice: Some(choice),
            };
            (key.clone(), parameter)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_go_both_ways() {
        let parameters: Parameters = vec![
            ("a".into(), ParameterValue::Bool(true)),
            ("b".into(), ParameterValue::Int(-3)),
            ("c".into(), ParameterValue::Float(0.5)),
            ("d".into(), ParameterValue::String("x".into())),
        ];
        let back = parameters_from_map(parameters_to_map(&parameters)).unwrap();
        assert_eq!(back, parameters);
    }

    #[test]
    fn contents_must_be_in_the_datatypes_field() {
        let contents = InferTensorContents {
            fp64_contents: vec![1.0],
            ..Default::default()
        };
        let e = typed_contents(DataType::Fp32, 1, contents, &RequestLimits::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("fp64_contents holds values"), "{e}");
    }
}
