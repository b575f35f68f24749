//! The Open Inference Protocol's tensor datatypes.

use std::fmt;
use std::str::FromStr;

/// A tensor element type, spelled on the wire as the V2 protocol spells it
/// (`"FP32"`, `"INT64"`, `"BYTES"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `true` / `false`.
    Bool,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Unsigned 32-bit integer.
    Uint32,
    /// Unsigned 64-bit integer.
    Uint64,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// IEEE 754 half precision.
    Fp16,
    /// IEEE 754 single precision.
    Fp32,
    /// IEEE 754 double precision.
    Fp64,
    /// bfloat16.
    Bf16,
    /// Variable-length byte strings.
    Bytes,
}

impl DataType {
    /// Every datatype, in the order the spec lists them.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bf16,
        DataType::Bytes,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bf16 => "BF16",
            DataType::Bytes => "BYTES",
        }
    }

    /// Bytes per element, or `None` for variable-length `BYTES`.
    pub const fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a datatype name the protocol does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown datatype '{0}'; expected one of BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BF16, BYTES")]
pub struct UnknownDataType(pub String);

impl FromStr for DataType {
    type Err = UnknownDataType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DataType::ALL
            .into_iter()
            .find(|dt| dt.as_str() == s)
            .ok_or_else(|| UnknownDataType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_datatype_round_trips_through_its_wire_name() {
        for dt in DataType::ALL {
            assert_eq!(dt.as_str().parse::<DataType>(), Ok(dt));
        }
    }

    #[test]
    fn lower_case_and_unknown_names_are_refused() {
        assert!("fp32".parse::<DataType>().is_err());
        assert!("FLOAT".parse::<DataType>().is_err());
    }
}
