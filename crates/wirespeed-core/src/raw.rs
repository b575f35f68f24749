//! Tensors as raw bytes: the layout that Triton's binary tensor data
//! extension, gRPC's `raw_input_contents`/`raw_output_contents` and a raw
//! HTTP body all share.
//!
//! Elements are little-endian, row-major, with no padding. A BOOL is one byte
//! (0 or 1). A BYTES element is a 4-byte little-endian length and then its
//! bytes.
//!
//! [`RawFiller`] takes those bytes in chunks of any size, as they arrive,
//! and copies each chunk once, straight into the typed buffer: one
//! `memcpy` per chunk where the chunk is aligned for the type (`bytemuck`),
//! else the room zeroed and then copied; never the whole buffer zeroed
//! first. Every size is checked before the buffer is allocated.

use bytemuck::Pod;

use crate::{DataType, Error, LimitError, TensorData};

#[cfg(not(target_endian = "little"))]
compile_error!("the raw tensor layout is little-endian; wirespeed copies it as is and needs a little-endian target");

/// Bytes a tensor of `count` fixed-size elements takes, or `None` for BYTES
/// (whose size depends on the values) or on overflow.
pub fn raw_size(datatype: DataType, count: usize) -> Option<usize> {
    datatype.element_size()?.checked_mul(count)
}

/// Why raw bytes do not make the tensor they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawError {
    /// The bytes do not fit the datatype and shape they were sent with.
    #[error("{0}")]
    Invalid(String),
    /// An element is over the request limits.
    #[error("{0}")]
    Limit(LimitError),
}

impl RawError {
    /// The error for the client, about input `name`, of the kind this is:
    /// [`ErrorKind::InvalidInput`] or [`ErrorKind::LimitExceeded`].
    pub fn for_input(self, name: &str) -> Error {
        match self {
            RawError::Invalid(m) => Error::invalid_input(format!("input '{name}': {m}")),
            RawError::Limit(e) => e.in_input(name).into(),
        }
    }
}

enum Fill {
    /// A fixed-size type: the buffer, its room allocated whole and its
    /// elements pushed as they arrive, and the first bytes of an element a
    /// chunk cut.
    Fixed {
        data: TensorData,
        carry: [u8; 8],
        carry_len: usize,
    },
    /// BYTES: elements so far, the one in progress, and the length prefix in progress.
    Bytes {
        elements: Vec<Vec<u8>>,
        current: Option<(Vec<u8>, usize)>,
        prefix: [u8; 4],
        prefix_len: usize,
        max_element: usize,
    },
}

/// Builds one tensor from its raw bytes, fed in chunks.
pub struct RawFiller {
    datatype: DataType,
    count: usize,
    size: usize,
    received: usize,
    fill: Fill,
}

impl RawFiller {
    /// A filler for `count` elements of `datatype` that arrive as exactly
    /// `size` bytes. BYTES elements may be at most `max_element` bytes each.
    ///
    /// For fixed-size types `size` must equal `count` times the element
    /// size; this is checked here, before anything is allocated.
    pub fn new(
        datatype: DataType,
        count: usize,
        size: usize,
        max_element: usize,
    ) -> Result<RawFiller, RawError> {
        let fill = match raw_size(datatype, count) {
            Some(expected) if expected == size => {
                let mut data = TensorData::with_capacity(stored_as(datatype), count);
                // Filled whole: a large buffer's pages are made resident
                // at once rather than faulted in one by one.
                let (spare, len) = data.spare();
                crate::pages::populate(spare, len);
                Fill::Fixed {
                    data,
                    carry: [0; 8],
                    carry_len: 0,
                }
            }
            Some(expected) => {
                return Err(RawError::Invalid(format!(
                    "{count} {datatype} elements take {expected} bytes, but {size} were declared"
                )))
            }
            None if datatype == DataType::Bytes => {
                // Each element takes at least its 4-byte length.
                if count.checked_mul(4).is_none_or(|least| least > size) {
                    return Err(RawError::Invalid(format!(
                        "{count} BYTES elements take at least {} bytes, but {size} were declared",
                        count.saturating_mul(4)
                    )));
                }
                Fill::Bytes {
                    elements: Vec::with_capacity(count),
                    current: None,
                    prefix: [0; 4],
                    prefix_len: 0,
                    max_element,
                }
            }
            None => {
                return Err(RawError::Invalid(format!(
                    "{count} {datatype} elements have more bytes than can be counted"
                )))
            }
        };
        Ok(RawFiller {
            datatype,
            count,
            size,
            received: 0,
            fill,
        })
    }

    /// Bytes still expected.
    pub fn remaining(&self) -> usize {
        self.size - self.received
    }

    /// For a fixed-size datatype with nothing received yet, hands `copy`
    /// the tensor's whole memory to fill with its raw bytes in one go, and
    /// returns true; otherwise (BYTES, or bytes already pushed) does
    /// nothing and returns false, and the bytes go through
    /// [`push`](Self::push). `copy` must fill every byte.
    pub fn fill_whole(&mut self, copy: impl FnOnce(&mut [u8])) -> bool {
        let Fill::Fixed { data, .. } = &mut self.fill else {
            return false;
        };
        if self.received != 0 {
            return false;
        }
        zero_fill(data, self.count);
        copy(bytes_of_mut(data));
        self.received = self.size;
        true
    }

    /// Copies `chunk` into the tensor. The chunk must not run past the
    /// declared size; take at most [`remaining`](Self::remaining) bytes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), RawError> {
        assert!(
            chunk.len() <= self.remaining(),
            "a chunk runs past the tensor"
        );
        self.received += chunk.len();
        match &mut self.fill {
            Fill::Fixed {
                data,
                carry,
                carry_len,
            } => {
                let size = self.datatype.element_size().expect("a fixed size");
                let mut rest = chunk;
                if *carry_len > 0 {
                    let take = (size - *carry_len).min(rest.len());
                    carry[*carry_len..*carry_len + take].copy_from_slice(&rest[..take]);
                    *carry_len += take;
                    rest = &rest[take..];
                    if *carry_len < size {
                        return Ok(());
                    }
                    extend(data, &carry[..size]);
                    *carry_len = 0;
                }
                let whole = rest.len() / size * size;
                extend(data, &rest[..whole]);
                let left = &rest[whole..];
                carry[..left.len()].copy_from_slice(left);
                *carry_len = left.len();
                Ok(())
            }
            Fill::Bytes {
                elements,
                current,
                prefix,
                prefix_len,
                max_element,
            } => {
                let mut rest = chunk;
                while !rest.is_empty() {
                    if let Some((element, want)) = current {
                        let take = (*want - element.len()).min(rest.len());
                        element.extend_from_slice(&rest[..take]);
                        rest = &rest[take..];
                        if element.len() == *want {
                            let (done, _) = current.take().expect("checked above");
                            elements.push(done);
                        }
                        continue;
                    }
                    let take = (4 - *prefix_len).min(rest.len());
                    prefix[*prefix_len..*prefix_len + take].copy_from_slice(&rest[..take]);
                    *prefix_len += take;
                    rest = &rest[take..];
                    if *prefix_len < 4 {
                        break;
                    }
                    *prefix_len = 0;
                    let len = u32::from_le_bytes(*prefix) as usize;
                    if elements.len() == self.count {
                        return Err(RawError::Invalid(format!(
                            "the BYTES data holds more than the {} elements of the shape",
                            self.count
                        )));
                    }
                    if len > *max_element {
                        return Err(RawError::Limit(LimitError::string_over(*max_element)));
                    }
                    // The declared size bounds this allocation: it cannot be
                    // larger than what is left of the tensor's bytes.
                    if len > self.size - self.received + rest.len() {
                        return Err(RawError::Invalid(format!(
                            "BYTES element {} claims {len} bytes, past the end of the tensor's data",
                            elements.len()
                        )));
                    }
                    if len == 0 {
                        elements.push(Vec::new());
                    } else {
                        *current = Some((Vec::with_capacity(len), len));
                    }
                }
                Ok(())
            }
        }
    }

    /// The tensor, once every declared byte has arrived.
    pub fn finish(self) -> Result<TensorData, RawError> {
        if self.received != self.size {
            return Err(RawError::Invalid(format!(
                "{} of the tensor's {} bytes arrived",
                self.received, self.size
            )));
        }
        match self.fill {
            Fill::Fixed { data, .. } => match data {
                TensorData::Uint8(bytes) if self.datatype == DataType::Bool => bools(bytes),
                data => Ok(data),
            },
            Fill::Bytes {
                elements,
                current,
                prefix_len,
                ..
            } => {
                if current.is_some() || prefix_len != 0 || elements.len() != self.count {
                    return Err(RawError::Invalid(format!(
                        "the BYTES data holds {} complete elements, but the shape has {}",
                        elements.len(),
                        self.count
                    )));
                }
                Ok(TensorData::Bytes(elements))
            }
        }
    }
}

/// How many elements raw BYTES data holds (each a 4-byte little-endian
/// length, then its bytes), or `None` when it does not end on an element.
pub fn bytes_elements(bytes: &[u8]) -> Option<usize> {
    let mut rest = bytes;
    let mut count = 0;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        rest = tail.get(len..)?;
        count += 1;
    }
    Some(count)
}

/// Builds a tensor from all of its raw bytes at once.
pub fn from_raw(
    datatype: DataType,
    count: usize,
    bytes: &[u8],
    max_element: usize,
) -> Result<TensorData, RawError> {
    from_pieces(datatype, count, &[bytes], max_element)
}

/// Builds a tensor from all of its raw bytes, in the pieces they lie in
/// (the frames a gRPC message arrived in), each copied once.
pub fn from_pieces(
    datatype: DataType,
    count: usize,
    pieces: &[impl AsRef<[u8]>],
    max_element: usize,
) -> Result<TensorData, RawError> {
    let size = pieces.iter().map(|piece| piece.as_ref().len()).sum();
    let mut filler = RawFiller::new(datatype, count, size, max_element)?;
    for piece in pieces {
        filler.push(piece.as_ref())?;
    }
    filler.finish()
}

/// Bytes `data` takes in raw form.
pub fn raw_len(data: &TensorData) -> usize {
    match data {
        TensorData::Bytes(v) => v.iter().map(|e| 4 + e.len()).sum(),
        data => raw_size(data.datatype(), data.len()).expect("fixed-size data has a size"),
    }
}

/// The raw form of `data` as it lies in memory, for the types whose
/// memory is their raw form (every fixed-size type but BOOL; the target is
/// little-endian): no copy to make.
pub fn raw_bytes(data: &TensorData) -> Option<&[u8]> {
    Some(match data {
        TensorData::Uint8(v) => bytemuck::cast_slice(v),
        TensorData::Uint16(v) => bytemuck::cast_slice(v),
        TensorData::Uint32(v) => bytemuck::cast_slice(v),
        TensorData::Uint64(v) => bytemuck::cast_slice(v),
        TensorData::Int8(v) => bytemuck::cast_slice(v),
        TensorData::Int16(v) => bytemuck::cast_slice(v),
        TensorData::Int32(v) => bytemuck::cast_slice(v),
        TensorData::Int64(v) => bytemuck::cast_slice(v),
        TensorData::Fp16(v) => bytemuck::cast_slice(v),
        TensorData::Fp32(v) => bytemuck::cast_slice(v),
        TensorData::Fp64(v) => bytemuck::cast_slice(v),
        TensorData::Bf16(v) => bytemuck::cast_slice(v),
        TensorData::Bool(_) | TensorData::Bytes(_) => return None,
    })
}

/// A tensor's buffer, owned by the `Bytes` that sends it.
struct Owned(TensorData);

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        raw_bytes(&self.0).unwrap_or_default()
    }
}

/// A tensor's raw form as `Bytes`, to send: its own buffer where its memory
/// is its raw form (every fixed-size type but BOOL, no copy), else written
/// out once.
pub fn into_raw(data: TensorData) -> bytes::Bytes {
    if raw_bytes(&data).is_some() {
        bytes::Bytes::from_owner(Owned(data))
    } else {
        let mut out = Vec::with_capacity(raw_len(&data));
        write_raw(&data, &mut out);
        bytes::Bytes::from(out)
    }
}

/// Appends the raw form of `data` to `out`.
pub fn write_raw(data: &TensorData, out: &mut Vec<u8>) {
    fn pod<T: Pod>(out: &mut Vec<u8>, v: &[T]) {
        out.extend_from_slice(bytemuck::cast_slice(v));
    }
    match data {
        TensorData::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        TensorData::Uint8(v) => pod(out, v),
        TensorData::Uint16(v) => pod(out, v),
        TensorData::Uint32(v) => pod(out, v),
        TensorData::Uint64(v) => pod(out, v),
        TensorData::Int8(v) => pod(out, v),
        TensorData::Int16(v) => pod(out, v),
        TensorData::Int32(v) => pod(out, v),
        TensorData::Int64(v) => pod(out, v),
        TensorData::Fp16(v) => pod(out, v),
        TensorData::Fp32(v) => pod(out, v),
        TensorData::Fp64(v) => pod(out, v),
        TensorData::Bf16(v) => pod(out, v),
        TensorData::Bytes(v) => {
            for element in v {
                let len = u32::try_from(element.len()).expect("a BYTES element is under 4 GiB");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(element);
            }
        }
    }
}

/// The type a fixed-size `datatype` is filled as: BOOL is read as bytes and
/// checked at the end.
fn stored_as(datatype: DataType) -> DataType {
    match datatype {
        DataType::Bool => DataType::Uint8,
        other => other,
    }
}

/// Appends the elements `bytes` holds (whole elements, raw form) to `data`:
/// one copy where the bytes are aligned for the type, else zeroed room and
/// a copy.
fn extend(data: &mut TensorData, bytes: &[u8]) {
    fn pod<T: Pod>(v: &mut Vec<T>, bytes: &[u8]) {
        match bytemuck::try_cast_slice::<u8, T>(bytes) {
            Ok(elements) => v.extend_from_slice(elements),
            Err(_) => {
                // Zeroed, then copied as bytes: two passes of `memset` and
                // `memcpy` cost less than a read per element. (One
                // `memcpy` into the spare room, unsafe, measured no
                // faster on a 1 MB tensor: the first pass over the fresh
                // room pays the cache misses, whichever it is.)
                let from = v.len();
                v.resize(from + bytes.len() / std::mem::size_of::<T>(), T::zeroed());
                bytemuck::cast_slice_mut::<T, u8>(&mut v[from..]).copy_from_slice(bytes);
            }
        }
    }
    match data {
        TensorData::Uint8(v) => v.extend_from_slice(bytes),
        TensorData::Uint16(v) => pod(v, bytes),
        TensorData::Uint32(v) => pod(v, bytes),
        TensorData::Uint64(v) => pod(v, bytes),
        TensorData::Int8(v) => pod(v, bytes),
        TensorData::Int16(v) => pod(v, bytes),
        TensorData::Int32(v) => pod(v, bytes),
        TensorData::Int64(v) => pod(v, bytes),
        TensorData::Fp16(v) => pod(v, bytes),
        TensorData::Fp32(v) => pod(v, bytes),
        TensorData::Fp64(v) => pod(v, bytes),
        TensorData::Bf16(v) => pod(v, bytes),
        TensorData::Bool(_) | TensorData::Bytes(_) => unreachable!("never a fill buffer"),
    }
}

/// Fills `data`'s room with zeros up to `count` elements, in place: the
/// buffer whole, for a copy that writes every byte of it at once.
fn zero_fill(data: &mut TensorData, count: usize) {
    fn zeros<T: Pod>(v: &mut Vec<T>, count: usize) {
        v.resize(count, T::zeroed());
    }
    match data {
        TensorData::Uint8(v) => zeros(v, count),
        TensorData::Uint16(v) => zeros(v, count),
        TensorData::Uint32(v) => zeros(v, count),
        TensorData::Uint64(v) => zeros(v, count),
        TensorData::Int8(v) => zeros(v, count),
        TensorData::Int16(v) => zeros(v, count),
        TensorData::Int32(v) => zeros(v, count),
        TensorData::Int64(v) => zeros(v, count),
        TensorData::Fp16(v) => zeros(v, count),
        TensorData::Fp32(v) => zeros(v, count),
        TensorData::Fp64(v) => zeros(v, count),
        TensorData::Bf16(v) => zeros(v, count),
        TensorData::Bool(_) | TensorData::Bytes(_) => unreachable!("never a fill buffer"),
    }
}

fn bytes_of_mut(data: &mut TensorData) -> &mut [u8] {
    match data {
        TensorData::Uint8(v) => v,
        TensorData::Uint16(v) => bytemuck::cast_slice_mut(v),
        TensorData::Uint32(v) => bytemuck::cast_slice_mut(v),
        TensorData::Uint64(v) => bytemuck::cast_slice_mut(v),
        TensorData::Int8(v) => bytemuck::cast_slice_mut(v),
        TensorData::Int16(v) => bytemuck::cast_slice_mut(v),
        TensorData::Int32(v) => bytemuck::cast_slice_mut(v),
        TensorData::Int64(v) => bytemuck::cast_slice_mut(v),
        TensorData::Fp16(v) => bytemuck::cast_slice_mut(v),
        TensorData::Fp32(v) => bytemuck::cast_slice_mut(v),
        TensorData::Fp64(v) => bytemuck::cast_slice_mut(v),
        TensorData::Bf16(v) => bytemuck::cast_slice_mut(v),
        TensorData::Bool(_) | TensorData::Bytes(_) => unreachable!("never a fill buffer"),
    }
}

fn bools(bytes: Vec<u8>) -> Result<TensorData, RawError> {
    if let Some(i) = bytes.iter().position(|&b| b > 1) {
        return Err(RawError::Invalid(format!(
            "BOOL element {i} is the byte {}; only 0 and 1 are booleans",
            bytes[i]
        )));
    }
    Ok(TensorData::Bool(
        bytes.into_iter().map(|b| b == 1).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<TensorData> {
        vec![
            TensorData::Bool(vec![true, false, true]),
            TensorData::Uint8(vec![0, 255]),
            TensorData::Uint16(vec![1, 65535]),
            TensorData::Uint32(vec![7, u32::MAX]),
            TensorData::Uint64(vec![u64::MAX, 0]),
            TensorData::Int8(vec![-128, 127]),
            TensorData::Int16(vec![-1, 300]),
            TensorData::Int32(vec![i32::MIN, 5]),
            TensorData::Int64(vec![i64::MIN, i64::MAX]),
            TensorData::Fp16(vec![half::f16::from_f32(1.5), half::f16::NEG_INFINITY]),
            TensorData::Fp32(vec![0.1, -0.0, f32::MAX]),
            TensorData::Fp64(vec![1e300, f64::MIN_POSITIVE]),
            TensorData::Bf16(vec![half::bf16::from_f32(-2.25)]),
            TensorData::Bytes(vec![b"".to_vec(), b"hello".to_vec(), vec![0xff, 0]]),
        ]
    }

    #[test]
    fn every_datatype_round_trips_in_any_chunking() {
        for data in samples() {
            let mut raw = Vec::new();
            write_raw(&data, &mut raw);
            assert_eq!(raw.len(), raw_len(&data));
            for chunk in [1, 2, 3, 5, raw.len().max(1)] {
                let mut filler =
                    RawFiller::new(data.datatype(), data.len(), raw.len(), 1 << 20).unwrap();
                for piece in raw.chunks(chunk) {
                    filler.push(piece).unwrap();
                }
                assert_eq!(filler.finish().unwrap(), data, "chunks of {chunk}");
            }
            // Whole, at an address aligned for no type wider than a byte,
            // as a tensor lies inside a protobuf message.
            let mut shifted = vec![0u8; raw.len() + 1];
            shifted[1..].copy_from_slice(&raw);
            let got = from_raw(data.datatype(), data.len(), &shifted[1..], 1 << 20).unwrap();
            assert_eq!(got, data, "unaligned");
        }
    }

    #[test]
    fn a_whole_fill_writes_the_tensor_in_one_go_and_only_before_any_push() {
        let data = TensorData::Fp32(vec![1.5, -2.0, 3.25]);
        let mut raw = Vec::new();
        write_raw(&data, &mut raw);
        let mut filler = RawFiller::new(DataType::Fp32, 3, raw.len(), 1024).unwrap();
        assert!(filler.fill_whole(|tensor| tensor.copy_from_slice(&raw)));
        assert_eq!(filler.finish().unwrap(), data);
        let mut filler = RawFiller::new(DataType::Bool, 2, 2, 1024).unwrap();
        assert!(filler.fill_whole(|tensor| tensor.copy_from_slice(&[1, 2])));
        assert!(filler.finish().is_err(), "a BOOL byte of 2 is refused");
        let mut filler = RawFiller::new(DataType::Fp32, 3, raw.len(), 1024).unwrap();
        filler.push(&raw[..4]).unwrap();
        assert!(!filler.fill_whole(|_| unreachable!("bytes were pushed already")));
    }

    #[test]
    fn bytes_at_any_alignment_are_read_as_little_endian_elements() {
        let backing: Vec<u8> = (0..=255u8).cycle().take(8 * 1000 + 8).collect();
        for offset in 0..8 {
            let bytes = &backing[offset..offset + 8 * 1000];
            let expected: Vec<f64> = bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let got = from_raw(DataType::Fp64, 1000, bytes, 0).unwrap();
            match got {
                TensorData::Fp64(v) => {
                    assert!(v
                        .iter()
                        .zip(&expected)
                        .all(|(a, b)| a.to_bits() == b.to_bits()))
                }
                other => panic!("{other:?}"),
            }
            let expected: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(
                from_raw(DataType::Uint16, 4000, bytes, 0).unwrap(),
                TensorData::Uint16(expected),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn the_layout_is_little_endian() {
        let mut raw = Vec::new();
        write_raw(&TensorData::Fp32(vec![1.0]), &mut raw);
        assert_eq!(raw, 1.0f32.to_le_bytes());
        raw.clear();
        write_raw(&TensorData::Bytes(vec![b"ab".to_vec()]), &mut raw);
        assert_eq!(raw, [2, 0, 0, 0, b'a', b'b']);
    }

    #[test]
    fn sizes_are_checked_before_allocating() {
        let e = RawFiller::new(DataType::Fp32, 1 << 40, 16, 1024)
            .err()
            .unwrap();
        assert!(e.to_string().contains("were declared"), "{e}");
        let e = RawFiller::new(DataType::Fp32, 3, 8, 1024).err().unwrap();
        assert!(e.to_string().contains("12 bytes"), "{e}");
        let e = RawFiller::new(DataType::Bytes, 10, 8, 1024).err().unwrap();
        assert!(e.to_string().contains("at least 40"), "{e}");
    }

    #[test]
    fn bad_bytes_are_refused() {
        assert!(from_raw(DataType::Bool, 2, &[1, 2], 1024).is_err());
        // A length past the end of the tensor.
        assert!(from_raw(DataType::Bytes, 1, &[9, 0, 0, 0, b'a'], 1024).is_err());
        // An element over the limit.
        let e = from_raw(DataType::Bytes, 1, &[3, 0, 0, 0, 1, 2, 3], 2).unwrap_err();
        assert!(matches!(e, RawError::Limit(_)), "{e:?}");
        assert_eq!(
            e.for_input("x").to_string(),
            "input 'x': a string is longer than the limit of 2 bytes"
        );
        // More elements than the shape.
        assert!(from_raw(DataType::Bytes, 1, &[0, 0, 0, 0, 0, 0, 0, 0], 1024).is_err());
        // Fewer.
        assert!(from_raw(DataType::Bytes, 3, &[0; 12][..8], 1024).is_err());
        // Truncated.
        let mut filler = RawFiller::new(DataType::Int32, 2, 8, 1024).unwrap();
        filler.push(&[0; 5]).unwrap();
        assert!(filler.finish().is_err());
    }
}
