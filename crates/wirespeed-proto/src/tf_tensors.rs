//! Between TF Serving's `TensorProto` and wirespeed's tensors.
//!
//! A request's tensor carries either `tensor_content`, every element's raw
//! bytes, or the typed `*_val` field of its `dtype`. Raw bytes are copied
//! once, checked against the shape first (`RawFiller`). Typed values move
//! into the tensor. They follow TensorFlow's own reading (`Tensor::FromProto`):
//! - no value means every element is zero (or empty);
//! - fewer values than elements repeat the last one, so one value fills the
//!   tensor;
//! - values past the element count are ignored.
//!
//! The shape is taken from the request's budget before anything is
//! allocated, so a 10^12-element shape is refused, not allocated. Answers
//! carry values in the typed field of their type, as TF Serving writes them
//! by default (TensorFlow's `AsProtoField`: 8- and 16-bit integers in
//! `int_val`, halves as bit patterns in `half_val`), or, when asked, numbers
//! in `tensor_content` (the tensor's own buffer, not copied); strings are
//! always in `string_val`.

use wirespeed_core::raw::{from_raw, into_raw, raw_size};
use wirespeed_core::{bf16, f16, DataType, RequestLimits, Tensor, TensorBudget, TensorData};

use crate::tensorflow::{
    tensor_shape_proto::Dim, DataType as TfType, TensorProto, TensorShapeProto,
};
use crate::tensors::{narrow, ContentsError};

/// wirespeed's datatype of TensorFlow's `dtype`, or why there is none
/// (worded to follow "input 'x' ").
pub fn datatype(dtype: i32) -> Result<DataType, String> {
    let tf = TfType::try_from(dtype)
        .map_err(|_| format!("has dtype {dtype}, which is not a TensorFlow type"))?;
    Ok(match tf {
        TfType::DtFloat => DataType::Fp32,
        TfType::DtDouble => DataType::Fp64,
        TfType::DtHalf => DataType::Fp16,
        TfType::DtBfloat16 => DataType::Bf16,
        TfType::DtInt8 => DataType::Int8,
        TfType::DtInt16 => DataType::Int16,
        TfType::DtInt32 => DataType::Int32,
        TfType::DtInt64 => DataType::Int64,
        TfType::DtUint8 => DataType::Uint8,
        TfType::DtUint16 => DataType::Uint16,
        TfType::DtUint32 => DataType::Uint32,
        TfType::DtUint64 => DataType::Uint64,
        TfType::DtBool => DataType::Bool,
        TfType::DtString => DataType::Bytes,
        TfType::DtInvalid => return Err("has no dtype (DT_INVALID)".into()),
        other => {
            return Err(format!(
                "is {}, which wirespeed does not serve",
                other.as_str_name()
            ))
        }
    })
}

/// TensorFlow's `dtype` of `datatype`.
pub fn tf_datatype(datatype: DataType) -> TfType {
    match datatype {
        DataType::Fp32 => TfType::DtFloat,
        DataType::Fp64 => TfType::DtDouble,
        DataType::Fp16 => TfType::DtHalf,
        DataType::Bf16 => TfType::DtBfloat16,
        DataType::Int8 => TfType::DtInt8,
        DataType::Int16 => TfType::DtInt16,
        DataType::Int32 => TfType::DtInt32,
        DataType::Int64 => TfType::DtInt64,
        DataType::Uint8 => TfType::DtUint8,
        DataType::Uint16 => TfType::DtUint16,
        DataType::Uint32 => TfType::DtUint32,
        DataType::Uint64 => TfType::DtUint64,
        DataType::Bool => TfType::DtBool,
        DataType::Bytes => TfType::DtString,
    }
}

/// A shape as wirespeed's dimensions: every size known and not negative.
pub fn shape(proto: Option<&TensorShapeProto>) -> Result<Vec<usize>, String> {
    let Some(proto) = proto else {
        return Ok(Vec::new()); // a scalar
    };
    if proto.unknown_rank {
        return Err("has a tensor_shape of unknown rank; a request's shape must be known".into());
    }
    proto
        .dim
        .iter()
        .map(|d| {
            usize::try_from(d.size).map_err(|_| {
                format!(
                    "has dimension {} in its tensor_shape; a request's sizes must be known",
                    d.size
                )
            })
        })
        .collect()
}

/// The datatype, shape and elements of `proto`, under the request's
/// `limits` and `budget`.
pub fn tensor_data(
    proto: TensorProto,
    limits: &RequestLimits,
    budget: &mut TensorBudget,
) -> Result<(DataType, Vec<usize>, TensorData), ContentsError> {
    let mismatch = |m: String| ContentsError::Mismatch(m);
    let datatype = datatype(proto.dtype).map_err(mismatch)?;
    let shape = shape(proto.tensor_shape.as_ref()).map_err(mismatch)?;
    let count = budget
        .take_shape(limits, datatype, &shape)
        .map_err(ContentsError::Limit)?;
    let filled: Vec<&str> = [
        ("half_val", proto.half_val.len()),
        ("float_val", proto.float_val.len()),
        ("double_val", proto.double_val.len()),
        ("int_val", proto.int_val.len()),
        ("string_val", proto.string_val.len()),
        ("scomplex_val", proto.scomplex_val.len()),
        ("int64_val", proto.int64_val.len()),
        ("bool_val", proto.bool_val.len()),
        ("dcomplex_val", proto.dcomplex_val.len()),
        ("uint32_val", proto.uint32_val.len()),
        ("uint64_val", proto.uint64_val.len()),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .map(|(field, _)| field)
    .collect();
    if !proto.tensor_content.is_empty() {
        if datatype == DataType::Bytes {
            return Err(mismatch(
                "is DT_STRING, whose values go in string_val, but tensor_content holds bytes"
                    .into(),
            ));
        }
        if let Some(field) = filled.first() {
            return Err(mismatch(format!(
                "has both tensor_content and {field}; send one of them"
            )));
        }
        let want = raw_size(datatype, count).unwrap_or(usize::MAX);
        if proto.tensor_content.len() != want {
            return Err(mismatch(format!(
                "has shape {} of {datatype}, which takes {want} bytes, but tensor_content holds {}",
                wirespeed_core::format_shape(&shape),
                proto.tensor_content.len()
            )));
        }
        let data = from_raw(
            datatype,
            count,
            &proto.tensor_content,
            limits.max_string_bytes,
        )
        .map_err(|e| mismatch(e.for_input("tensor_content").message().to_owned()))?;
        return Ok((datatype, shape, data));
    }
    let field = match datatype {
        DataType::Fp32 => "float_val",
        DataType::Fp64 => "double_val",
        DataType::Fp16 | DataType::Bf16 => "half_val",
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Uint8 | DataType::Uint16 => {
            "int_val"
        }
        DataType::Int64 => "int64_val",
        DataType::Uint32 => "uint32_val",
        DataType::Uint64 => "uint64_val",
        DataType::Bool => "bool_val",
        DataType::Bytes => "string_val",
    };
    if let Some(other) = filled.iter().find(|f| **f != field) {
        return Err(mismatch(format!(
            "is {}, whose values go in {field}, but {other} holds values",
            tf_datatype(datatype).as_str_name()
        )));
    }
    let data = typed_values(proto, datatype, count, limits, budget)?;
    Ok((datatype, shape, data))
}

/// A proto's typed values (its `*_val` field of `datatype`) as `count`
/// elements; strings held to the request's limits first.
fn typed_values(
    proto: TensorProto,
    datatype: DataType,
    count: usize,
    limits: &RequestLimits,
    budget: &mut TensorBudget,
) -> Result<TensorData, ContentsError> {
    Ok(match datatype {
        DataType::Fp32 => TensorData::Fp32(fill(proto.float_val, count)),
        DataType::Fp64 => TensorData::Fp64(fill(proto.double_val, count)),
        DataType::Int32 => TensorData::Int32(fill(proto.int_val, count)),
        DataType::Int64 => TensorData::Int64(fill(proto.int64_val, count)),
        DataType::Uint32 => TensorData::Uint32(fill(proto.uint32_val, count)),
        DataType::Uint64 => TensorData::Uint64(fill(proto.uint64_val, count)),
        DataType::Bool => TensorData::Bool(fill(proto.bool_val, count)),
        DataType::Int8 => TensorData::Int8(fill(narrow(datatype, proto.int_val)?, count)),
        DataType::Int16 => TensorData::Int16(fill(narrow(datatype, proto.int_val)?, count)),
        DataType::Uint8 => TensorData::Uint8(fill(narrow(datatype, proto.int_val)?, count)),
        DataType::Uint16 => TensorData::Uint16(fill(narrow(datatype, proto.int_val)?, count)),
        DataType::Fp16 => TensorData::Fp16(fill(
            halves(datatype, proto.half_val)?
                .into_iter()
                .map(f16::from_bits)
                .collect(),
            count,
        )),
        DataType::Bf16 => TensorData::Bf16(fill(
            halves(datatype, proto.half_val)?
                .into_iter()
                .map(bf16::from_bits)
                .collect(),
            count,
        )),
        DataType::Bytes => {
            for s in &proto.string_val {
                limits.check_string(s.len()).map_err(ContentsError::Limit)?;
            }
            // What the filled tensor will hold: one string repeated to
            // every element must fit the limit before it is repeated.
            let kept = proto.string_val.len().min(count);
            let repeated = count - kept;
            let last = proto.string_val.last().map_or(0, Vec::len);
            let bytes = proto.string_val[..kept]
                .iter()
                .map(Vec::len)
                .fold(0usize, usize::saturating_add)
                .saturating_add(repeated.saturating_mul(last));
            budget
                .take_string_bytes(limits, bytes)
                .map_err(ContentsError::Limit)?;
            TensorData::Bytes(fill(proto.string_val, count))
        }
    })
}

/// `values` made `count` long as TensorFlow reads a proto: none means
/// defaults, too few repeat the last, too many are cut.
fn fill<T: Clone + Default>(mut values: Vec<T>, count: usize) -> Vec<T> {
    match values.last().cloned() {
        None => vec![T::default(); count],
        Some(last) => {
            values.resize(count, last);
            values
        }
    }
}

/// `half_val`'s values as 16-bit patterns.
fn halves(datatype: DataType, values: Vec<i32>) -> Result<Vec<u16>, ContentsError> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            u16::try_from(v).map_err(|_| {
                ContentsError::Mismatch(format!(
                    "has half_val element {i} ({v}), not the 16 bits of a {datatype}"
                ))
            })
        })
        .collect()
}

/// The `TensorProto` of an answer's tensor: numbers in their typed field,
/// or as `tensor_content` (the tensor's own buffer for every type but
/// BOOL) when `content`; strings in `string_val`.
pub fn tensor_proto(tensor: Tensor, content: bool) -> TensorProto {
    let datatype = tensor.datatype();
    let tensor_shape = Some(TensorShapeProto {
        dim: tensor
            .shape
            .iter()
            .map(|&size| Dim {
                size: size as i64,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    });
    let mut proto = TensorProto {
        dtype: tf_datatype(datatype) as i32,
        tensor_shape,
        ..Default::default()
    };
    match tensor.data {
        TensorData::Bytes(strings) => proto.string_val = strings,
        data if content => proto.tensor_content = into_raw(data),
        TensorData::Fp32(v) => proto.float_val = v,
        TensorData::Fp64(v) => proto.double_val = v,
        TensorData::Int32(v) => proto.int_val = v,
        TensorData::Int64(v) => proto.int64_val = v,
        TensorData::Uint32(v) => proto.uint32_val = v,
        TensorData::Uint64(v) => proto.uint64_val = v,
        TensorData::Bool(v) => proto.bool_val = v,
        TensorData::Int8(v) => proto.int_val = v.into_iter().map(i32::from).collect(),
        TensorData::Int16(v) => proto.int_val = v.into_iter().map(i32::from).collect(),
        TensorData::Uint8(v) => proto.int_val = v.into_iter().map(i32::from).collect(),
        TensorData::Uint16(v) => proto.int_val = v.into_iter().map(i32::from).collect(),
        TensorData::Fp16(v) => {
            proto.half_val = v.into_iter().map(|h| i32::from(h.to_bits())).collect()
        }
        TensorData::Bf16(v) => {
            proto.half_val = v.into_iter().map(|h| i32::from(h.to_bits())).collect()
        }
    }
    proto
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn shaped(dims: &[i64]) -> Option<TensorShapeProto> {
        Some(TensorShapeProto {
            dim: dims
                .iter()
                .map(|&size| Dim {
                    size,
                    name: String::new(),
                })
                .collect(),
            unknown_rank: false,
        })
    }

    fn read(proto: TensorProto) -> Result<(DataType, Vec<usize>, TensorData), String> {
        tensor_data(
            proto,
            &RequestLimits::default(),
            &mut TensorBudget::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn typed_values_move_in_and_tensorflow_fills_short_ones() {
        let proto = TensorProto {
            dtype: TfType::DtFloat as i32,
            tensor_shape: shaped(&[2, 2]),
            float_val: vec![1.5, -2.0, 3.0, 4.0],
            ..Default::default()
        };
        assert_eq!(
            read(proto).unwrap(),
            (
                DataType::Fp32,
                vec![2, 2],
                TensorData::Fp32(vec![1.5, -2.0, 3.0, 4.0])
            )
        );
        // One value fills the tensor; none means zeros.
        let one = TensorProto {
            dtype: TfType::DtInt64 as i32,
            tensor_shape: shaped(&[3]),
            int64_val: vec![7],
            ..Default::default()
        };
        assert_eq!(read(one).unwrap().2, TensorData::Int64(vec![7, 7, 7]));
        let none = TensorProto {
            dtype: TfType::DtBool as i32,
            tensor_shape: shaped(&[2]),
            ..Default::default()
        };
        assert_eq!(read(none).unwrap().2, TensorData::Bool(vec![false, false]));
        let strings = TensorProto {
            dtype: TfType::DtString as i32,
            tensor_shape: shaped(&[2]),
            string_val: vec![b"a".to_vec(), b"\xff".to_vec()],
            ..Default::default()
        };
        assert_eq!(
            read(strings).unwrap().2,
            TensorData::Bytes(vec![b"a".to_vec(), b"\xff".to_vec()])
        );
        let half = TensorProto {
            dtype: TfType::DtHalf as i32,
            tensor_shape: shaped(&[1]),
            half_val: vec![i32::from(f16::from_f32(1.5).to_bits())],
            ..Default::default()
        };
        assert_eq!(
            read(half).unwrap().2,
            TensorData::Fp16(vec![f16::from_f32(1.5)])
        );
        let scalar = TensorProto {
            dtype: TfType::DtInt8 as i32,
            int_val: vec![-5],
            ..Default::default()
        };
        assert_eq!(
            read(scalar).unwrap(),
            (DataType::Int8, vec![], TensorData::Int8(vec![-5]))
        );
    }

    #[test]
    fn tensor_content_is_read_raw_and_answers_round_trip() {
        for tensor in [
            Tensor {
                name: "a".into(),
                shape: vec![2, 3],
                data: TensorData::Fp32(vec![0.5, 1.0, -2.0, 3.25, f32::MAX, 0.0]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "b".into(),
                shape: vec![3],
                data: TensorData::Bool(vec![true, false, true]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "c".into(),
                shape: vec![2],
                data: TensorData::Uint64(vec![u64::MAX, 1]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "d".into(),
                shape: vec![2],
                data: TensorData::Bytes(vec![b"x".to_vec(), Vec::new()]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "e".into(),
                shape: vec![2],
                data: TensorData::Int8(vec![-128, 127]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "f".into(),
                shape: vec![1],
                data: TensorData::Fp16(vec![f16::from_f32(-0.5)]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "g".into(),
                shape: vec![1],
                data: TensorData::Bf16(vec![bf16::from_f32(3.0)]),
                parameters: Vec::new(),
            },
        ] {
            let expected = (tensor.datatype(), tensor.shape.clone(), tensor.data.clone());
            for content in [false, true] {
                let proto = tensor_proto(tensor.clone(), content);
                let raw = !proto.tensor_content.is_empty();
                assert_eq!(raw, content && tensor.datatype() != DataType::Bytes);
                assert_eq!(read(proto).unwrap(), expected);
            }
        }
    }

    #[test]
    fn hostile_tensors_are_refused_before_anything_is_allocated() {
        let huge = TensorProto {
            dtype: TfType::DtFloat as i32,
            tensor_shape: shaped(&[1_000_000, 1_000_000]),
            float_val: vec![1.0],
            ..Default::default()
        };
        let e = read(huge).unwrap_err();
        assert!(e.contains("over the limits"), "{e}");
        let short = TensorProto {
            dtype: TfType::DtFloat as i32,
            tensor_shape: shaped(&[4]),
            tensor_content: Bytes::from_static(&[0; 12]),
            ..Default::default()
        };
        let e = read(short).unwrap_err();
        assert!(
            e.contains("which takes 16 bytes, but tensor_content holds 12"),
            "{e}"
        );
        let wrong = TensorProto {
            dtype: TfType::DtFloat as i32,
            tensor_shape: shaped(&[1]),
            int64_val: vec![1],
            ..Default::default()
        };
        let e = read(wrong).unwrap_err();
        assert!(
            e.contains("DT_FLOAT, whose values go in float_val, but int64_val"),
            "{e}"
        );
        let range = TensorProto {
            dtype: TfType::DtUint8 as i32,
            tensor_shape: shaped(&[1]),
            int_val: vec![300],
            ..Default::default()
        };
        assert!(read(range)
            .unwrap_err()
            .contains("(300) is out of range for UINT8"));
        // One string standing for 2^24 elements would be 2^24 times its
        // size: refused before it is repeated.
        let repeated = TensorProto {
            dtype: TfType::DtString as i32,
            tensor_shape: shaped(&[1 << 24]),
            string_val: vec![vec![b'x'; 1 << 20]],
            ..Default::default()
        };
        let e = read(repeated).unwrap_err();
        assert!(
            e.contains("bytes of strings") && e.contains("over the limit"),
            "{e}"
        );
        for (dims, unknown, want) in [
            (vec![-1, 2], false, "dimension -1"),
            (vec![], true, "unknown rank"),
        ] {
            let proto = TensorProto {
                dtype: TfType::DtFloat as i32,
                tensor_shape: Some(TensorShapeProto {
                    unknown_rank: unknown,
                    ..shaped(&dims).unwrap()
                }),
                ..Default::default()
            };
            assert!(read(proto).unwrap_err().contains(want));
        }
        for (dtype, want) in [
            (TfType::DtInvalid as i32, "DT_INVALID"),
            (
                TfType::DtComplex64 as i32,
                "is DT_COMPLEX64, which wirespeed does not serve",
            ),
            (999, "has dtype 999"),
        ] {
            let proto = TensorProto {
                dtype,
                ..Default::default()
            };
            let e = read(proto).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
