//! Typed, contiguous tensor buffers.

use half::{bf16, f16};

use crate::DataType;

/// A tensor's elements, row-major, in the buffer type its datatype implies.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// `BOOL`
    Bool(Vec<bool>),
    /// `UINT8`
    Uint8(Vec<u8>),
    /// `UINT16`
    Uint16(Vec<u16>),
    /// `UINT32`
    Uint32(Vec<u32>),
    /// `UINT64`
    Uint64(Vec<u64>),
    /// `INT8`
    Int8(Vec<i8>),
    /// `INT16`
    Int16(Vec<i16>),
    /// `INT32`
    Int32(Vec<i32>),
    /// `INT64`
    Int64(Vec<i64>),
    /// `FP16`
    Fp16(Vec<f16>),
    /// `FP32`
    Fp32(Vec<f32>),
    /// `FP64`
    Fp64(Vec<f64>),
    /// `BF16`
    Bf16(Vec<bf16>),
    /// `BYTES`: one owned byte string per element.
    Bytes(Vec<Vec<u8>>),
}

/// Applies `$body` to the inner vector of every variant.
macro_rules! each_variant {
    ($value:expr, $v:ident => $body:expr) => {
        match $value {
            TensorData::Bool($v) => $body,
            TensorData::Uint8($v) => $body,
            TensorData::Uint16($v) => $body,
            TensorData::Uint32($v) => $body,
            TensorData::Uint64($v) => $body,
            TensorData::Int8($v) => $body,
            TensorData::Int16($v) => $body,
            TensorData::Int32($v) => $body,
            TensorData::Int64($v) => $body,
            TensorData::Fp16($v) => $body,
            TensorData::Fp32($v) => $body,
            TensorData::Fp64($v) => $body,
            TensorData::Bf16($v) => $body,
            TensorData::Bytes($v) => $body,
        }
    };
}

impl TensorData {
    /// The datatype this buffer holds.
    pub fn datatype(&self) -> DataType {
        match self {
            TensorData::Bool(_) => DataType::Bool,
            TensorData::Uint8(_) => DataType::Uint8,
            TensorData::Uint16(_) => DataType::Uint16,
            TensorData::Uint32(_) => DataType::Uint32,
            TensorData::Uint64(_) => DataType::Uint64,
            TensorData::Int8(_) => DataType::Int8,
            TensorData::Int16(_) => DataType::Int16,
            TensorData::Int32(_) => DataType::Int32,
            TensorData::Int64(_) => DataType::Int64,
            TensorData::Fp16(_) => DataType::Fp16,
            TensorData::Fp32(_) => DataType::Fp32,
            TensorData::Fp64(_) => DataType::Fp64,
            TensorData::Bf16(_) => DataType::Bf16,
            TensorData::Bytes(_) => DataType::Bytes,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        each_variant!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numbers cast to `to`, as numpy's `astype` casts them, when `to`
    /// is `FP32` or `FP64` and these are numbers or bools; `None` else.
    pub fn cast_number(&self, to: DataType) -> Option<TensorData> {
        fn all<T: Copy, U>(v: &[T], f: impl Fn(T) -> U) -> Vec<U> {
            v.iter().map(|&x| f(x)).collect()
        }
        macro_rules! to_float {
            ($ty:ty, $variant:ident) => {
                Some(TensorData::$variant(match self {
                    TensorData::Bool(v) => all(v, |x| u8::from(x) as $ty),
                    TensorData::Uint8(v) => all(v, |x| x as $ty),
                    TensorData::Uint16(v) => all(v, |x| x as $ty),
                    TensorData::Uint32(v) => all(v, |x| x as $ty),
                    TensorData::Uint64(v) => all(v, |x| x as $ty),
                    TensorData::Int8(v) => all(v, |x| x as $ty),
                    TensorData::Int16(v) => all(v, |x| x as $ty),
                    TensorData::Int32(v) => all(v, |x| x as $ty),
                    TensorData::Int64(v) => all(v, |x| x as $ty),
                    TensorData::Fp16(v) => all(v, |x| x.to_f64() as $ty),
                    TensorData::Fp32(v) => all(v, |x| x as $ty),
                    TensorData::Fp64(v) => all(v, |x| x as $ty),
                    TensorData::Bf16(v) => all(v, |x| x.to_f64() as $ty),
                    TensorData::Bytes(_) => return None,
                }))
            };
        }
        match to {
            DataType::Fp32 => to_float!(f32, Fp32),
            DataType::Fp64 => to_float!(f64, Fp64),
            _ => None,
        }
    }

    /// Where its spare capacity starts, and its bytes: the room a filler
    /// writes into.
    pub(crate) fn spare(&mut self) -> (*const u8, usize) {
        each_variant!(self, v => {
            let spare = v.spare_capacity_mut();
            (spare.as_ptr().cast::<u8>(), std::mem::size_of_val(spare))
        })
    }

    /// An empty buffer of `datatype`, with room for `capacity` elements. A
    /// large one is placed in the shared heap (`shared_heap`), where a
    /// Python worker reads it without a copy.
    pub fn with_capacity(datatype: DataType, capacity: usize) -> TensorData {
        let bytes = datatype
            .element_size()
            .map(|size| size.saturating_mul(capacity));
        if bytes.is_some_and(|b| b >= crate::shared_heap::MIN_BYTES) {
            return crate::shared_heap::shareable(|| Self::allocate(datatype, capacity));
        }
        Self::allocate(datatype, capacity)
    }

    fn allocate(datatype: DataType, capacity: usize) -> TensorData {
        match datatype {
            DataType::Bool => TensorData::Bool(Vec::with_capacity(capacity)),
            DataType::Uint8 => TensorData::Uint8(Vec::with_capacity(capacity)),
            DataType::Uint16 => TensorData::Uint16(Vec::with_capacity(capacity)),
            DataType::Uint32 => TensorData::Uint32(Vec::with_capacity(capacity)),
            DataType::Uint64 => TensorData::Uint64(Vec::with_capacity(capacity)),
            DataType::Int8 => TensorData::Int8(Vec::with_capacity(capacity)),
            DataType::Int16 => TensorData::Int16(Vec::with_capacity(capacity)),
            DataType::Int32 => TensorData::Int32(Vec::with_capacity(capacity)),
            DataType::Int64 => TensorData::Int64(Vec::with_capacity(capacity)),
            DataType::Fp16 => TensorData::Fp16(Vec::with_capacity(capacity)),
            DataType::Fp32 => TensorData::Fp32(Vec::with_capacity(capacity)),
            DataType::Fp64 => TensorData::Fp64(Vec::with_capacity(capacity)),
            DataType::Bf16 => TensorData::Bf16(Vec::with_capacity(capacity)),
            DataType::Bytes => TensorData::Bytes(Vec::with_capacity(capacity)),
        }
    }
}

/// A named tensor with a concrete shape: an input as decoded from a request,
/// or an output as produced by a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// The tensor's name, as the model metadata declares it.
    pub name: String,
    /// Concrete dimensions; their product is `data.len()`.
    pub shape: Vec<usize>,
    /// The elements.
    pub data: TensorData,
    /// Its own `parameters`, as an output answers them (MLServer's
    /// `content_type`); empty for most.
    pub parameters: crate::Parameters,
}

impl Tensor {
    /// A tensor without parameters.
    pub fn new(name: impl Into<String>, shape: Vec<usize>, data: TensorData) -> Tensor {
        Tensor {
            name: name.into(),
            shape,
            data,
            parameters: Vec::new(),
        }
    }

    /// The datatype of the elements.
    pub fn datatype(&self) -> DataType {
        self.data.datatype()
    }
}

/// The product of `shape`, or `None` if it overflows `usize`.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_capacity_gives_an_empty_buffer_of_the_datatype() {
        for dt in DataType::ALL {
            let data = TensorData::with_capacity(dt, 4);
            assert_eq!(data.datatype(), dt);
            assert!(data.is_empty());
        }
    }

    #[test]
    fn element_count_detects_overflow() {
        assert_eq!(element_count(&[2, 3, 4]), Some(24));
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[usize::MAX, 2]), None);
    }
}
