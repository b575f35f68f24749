//! Building one input tensor from `data`: values go straight into the typed
//! buffer, and flat or nested layout is checked against the shape as the
//! arrays open and close.

use wirespeed_core::{format_shape, DataType, TensorData};

use crate::number::{self, IntError, Shape};
use crate::parallel::Scratch;
use crate::Category;

/// A scalar JSON value inside `data`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'a> {
    /// A grammar-unchecked bare number token.
    Number(&'a [u8]),
    /// A decoded string.
    String(&'a [u8]),
    Bool(bool),
    Null,
    /// `NaN`, `Infinity` or `-Infinity` (already allowed by the options).
    NonFinite(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Unknown,
    Flat,
    Nested,
}

/// A builder error: category and message; the decoder adds the offset.
pub(crate) type BuildError = (Category, String);

/// One tensor under construction.
pub(crate) struct TensorBuilder {
    pub(crate) data: TensorData,
    shape: Vec<usize>,
    count: usize,
    layout: Layout,
    /// Elements seen so far in the open array at each depth.
    lens: Vec<usize>,
    /// For a shape learned from the data's nesting (TF Serving, Clipper):
    /// the rank once a value shows it, and each dimension once an array at
    /// that depth closes. `count` is then the element limit.
    inferred: Option<Inferred>,
    /// `null` in float data is a missing value, NaN (outside strict mode).
    null_as_nan: bool,
    /// A BYTES tensor's last dimension may be its elements' length
    /// (MLServer's convention, [`wirespeed_core::WRITTEN_SHAPE`]).
    length_dimension: bool,
}

struct Inferred {
    rank: Option<usize>,
    dims: Vec<Option<usize>>,
}

impl TensorBuilder {
    /// A builder for `count` elements of `datatype` in `shape`, with room
    /// reserved for `reserve` of them (the caller bounds it by the body).
    pub(crate) fn new(
        datatype: DataType,
        shape: Vec<usize>,
        count: usize,
        reserve: usize,
    ) -> TensorBuilder {
        let rank = shape.len();
        TensorBuilder {
            data: TensorData::with_capacity(datatype, reserve.min(count)),
            shape,
            count,
            layout: Layout::Unknown,
            lens: vec![0; rank.max(1)],
            inferred: None,
            null_as_nan: false,
            length_dimension: false,
        }
    }

    /// Reads `null` in FP16, FP32, FP64 and BF16 data as NaN, a missing
    /// value, as KServe and MLServer read it and as orjson-based clients
    /// (kserve's among them) write NaN. Other datatypes refuse it still.
    pub(crate) fn with_null_as_nan(mut self, yes: bool) -> TensorBuilder {
        self.null_as_nan = yes;
        self
    }

    /// The shape the builder was made for.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Takes a BYTES tensor whose shape's last dimension is its elements'
    /// length in bytes, as MLServer's clients write one: `finish` then
    /// gives the shape without it.
    pub(crate) fn with_length_dimension(mut self, yes: bool) -> TensorBuilder {
        self.length_dimension = yes;
        self
    }

    /// A builder whose shape comes from how the data nests, which must be
    /// fully nested and rectangular; at most `limit` elements.
    pub(crate) fn inferred(datatype: DataType, limit: usize, reserve: usize) -> TensorBuilder {
        TensorBuilder {
            data: TensorData::with_capacity(datatype, reserve.min(limit)),
            shape: Vec::new(),
            count: limit,
            layout: Layout::Nested,
            lens: vec![0],
            inferred: Some(Inferred {
                rank: None,
                dims: Vec::new(),
            }),
            null_as_nan: false,
            length_dimension: false,
        }
    }

    pub(crate) fn datatype(&self) -> DataType {
        self.data.datatype()
    }

    /// Whether a scalar at `depth` (0 = inside the outer array) is an element.
    pub(crate) fn scalars_allowed_at(&self, depth: usize) -> bool {
        if let Some(inferred) = &self.inferred {
            return inferred.rank.is_none_or(|rank| depth + 1 == rank);
        }
        match self.layout {
            Layout::Unknown => depth == 0,
            Layout::Flat => depth == 0,
            Layout::Nested => depth + 1 == self.shape.len(),
        }
    }

    /// An array opens inside the array at `depth`.
    pub(crate) fn open_array(&mut self, depth: usize) -> Result<(), BuildError> {
        if let Some(inferred) = &self.inferred {
            if inferred.rank.is_some_and(|rank| depth + 1 >= rank) {
                return Err((
                    Category::Shape,
                    format!(
                        "a list at depth {} where earlier values had {} levels of nesting; the data must be rectangular",
                        depth + 1,
                        inferred.rank.unwrap_or(0)
                    ),
                ));
            }
            if self.lens.len() < depth + 2 {
                self.lens.resize(depth + 2, 0);
            }
            self.lens[depth] += 1;
            self.lens[depth + 1] = 0;
            return Ok(());
        }
        if self.layout == Layout::Flat || depth + 1 >= self.shape.len() {
            return Err((
                Category::Shape,
                format!(
                    "'data' is nested deeper than shape {} allows",
                    format_shape(&self.shape)
                ),
            ));
        }
        self.layout = Layout::Nested;
        self.lens[depth] += 1;
        self.lens[depth + 1] = 0;
        Ok(())
    }

    /// The array at `depth` closes.
    pub(crate) fn close_array(&mut self, depth: usize) -> Result<(), BuildError> {
        if let Some(inferred) = &mut self.inferred {
            let len = self.lens[depth];
            if inferred.dims.len() <= depth {
                inferred.dims.resize(depth + 1, None);
            }
            match inferred.dims[depth] {
                None => inferred.dims[depth] = Some(len),
                Some(first) if first != len => {
                    return Err((
                        Category::Shape,
                        format!("a list at depth {depth} has {len} elements where an earlier one had {first}; the data must be rectangular"),
                    ))
                }
                Some(_) => {}
            }
            return Ok(());
        }
        if self.layout != Layout::Nested {
            // Flat: the total is checked by `finish`.
            return Ok(());
        }
        let (len, expected) = (self.lens[depth], self.shape[depth]);
        if len != expected {
            return Err((
                Category::Shape,
                format!("nested 'data' has {len} elements at depth {depth}, but shape {} needs {expected}", format_shape(&self.shape)),
            ));
        }
        Ok(())
    }

    /// Checks layout and room for one more element at `depth`.
    #[inline]
    fn admit(&mut self, depth: usize) -> Result<(), BuildError> {
        if let Some(inferred) = &mut self.inferred {
            match inferred.rank {
                None => inferred.rank = Some(depth + 1),
                Some(rank) if rank != depth + 1 => {
                    return Err((
                        Category::Shape,
                        format!("a value at depth {depth} where earlier values were at depth {}; the data must be rectangular", rank - 1),
                    ))
                }
                Some(_) => {}
            }
            if self.data.len() == self.count {
                return Err((
                    Category::Limit,
                    format!(
                        "the data has more than the limit of {} elements",
                        self.count
                    ),
                ));
            }
            self.lens[depth] += 1;
            return Ok(());
        }
        if !self.scalars_allowed_at(depth) {
            return Err((
                Category::Shape,
                format!("a value at depth {depth} of 'data' does not fit shape {}; give 'data' flat or nested exactly to the shape", format_shape(&self.shape)),
            ));
        }
        if self.layout == Layout::Unknown {
            self.layout = Layout::Flat;
        }
        if self.data.len() == self.count {
            return Err((
                Category::Shape,
                format!(
                    "'data' has more than the {} elements shape {} holds",
                    self.count,
                    format_shape(&self.shape)
                ),
            ));
        }
        self.lens[depth] += 1;
        Ok(())
    }

    /// Appends one scalar found at `depth`.
    pub(crate) fn push(&mut self, scalar: Scalar<'_>, depth: usize) -> Result<(), BuildError> {
        self.admit(depth)?;
        let datatype = self.datatype();
        let null_as_nan = self.null_as_nan;
        let mismatch = |what: &str| {
            Err((
                Category::Type,
                format!(
                    "expected {} for datatype {datatype}, got {what}",
                    expected_kind(datatype)
                ),
            ))
        };
        // Protobuf's JSON spelling of the non-finite floats, which
        // wirespeed's own V2 answers use for the infinities: valid JSON, so
        // read in strict mode too.
        let float = matches!(
            datatype,
            DataType::Fp32 | DataType::Fp64 | DataType::Fp16 | DataType::Bf16
        );
        let scalar = match scalar {
            Scalar::String(b"NaN") if float => Scalar::NonFinite(f64::NAN),
            Scalar::String(b"Infinity") if float => Scalar::NonFinite(f64::INFINITY),
            Scalar::String(b"-Infinity") if float => Scalar::NonFinite(f64::NEG_INFINITY),
            other => other,
        };
        match (&mut self.data, scalar) {
            (TensorData::Bool(v), Scalar::Bool(b)) => v.push(b),
            (TensorData::Bytes(v), Scalar::String(s)) => v.push(s.to_vec()),
            (data, Scalar::Number(token)) => {
                if matches!(datatype, DataType::Bool | DataType::Bytes) {
                    return mismatch("a number");
                }
                let shape = number::check_grammar(token).map_err(|m| {
                    (
                        Category::Syntax,
                        format!("{m}: {}", String::from_utf8_lossy(token)),
                    )
                })?;
                push_number(data, token, shape)?;
            }
            (data, Scalar::NonFinite(x)) => match data {
                TensorData::Fp32(v) => v.push(x as f32),
                TensorData::Fp64(v) => v.push(x),
                TensorData::Fp16(v) => v.push(half::f16::from_f64(x)),
                TensorData::Bf16(v) => v.push(half::bf16::from_f64(x)),
                _ => return mismatch("a non-finite number"),
            },
            (_, Scalar::Bool(_)) => return mismatch("a bool"),
            (_, Scalar::String(_)) => return mismatch("a string"),
            (data, Scalar::Null) if null_as_nan => match data {
                TensorData::Fp32(v) => v.push(f32::NAN),
                TensorData::Fp64(v) => v.push(f64::NAN),
                TensorData::Fp16(v) => v.push(half::f16::NAN),
                TensorData::Bf16(v) => v.push(half::bf16::NAN),
                _ => return mismatch("null"),
            },
            (_, Scalar::Null) => return mismatch("null"),
        }
        Ok(())
    }

    /// Appends a byte string as one row of a UINT8 tensor, inside the
    /// array at `depth` (Clipper's base64 `bytes` inputs).
    pub(crate) fn push_byte_row(&mut self, bytes: &[u8], depth: usize) -> Result<(), BuildError> {
        self.open_array(depth)?;
        for &byte in bytes {
            self.admit(depth + 1)?;
            let TensorData::Uint8(v) = &mut self.data else {
                return Err((
                    Category::Type,
                    "bytes for a tensor that is not UINT8".to_owned(),
                ));
            };
            v.push(byte);
        }
        self.close_array(depth + 1)
    }

    /// Opens a run of floats at `depth` for the hot path: the buffer, how
    /// many more elements fit, and how many more the open row should hold
    /// (the same, for flat data or a row of unknown length), or `None` when
    /// scalars do not belong here (the general path then words the error).
    /// Close it with [`end_run`](Self::end_run).
    #[inline]
    pub(crate) fn float_run<T: Float>(
        &mut self,
        depth: usize,
    ) -> Option<(&mut Vec<T>, usize, usize)> {
        if !self.scalars_allowed_at(depth) {
            return None;
        }
        let room = self.count - self.data.len();
        let row_len = match (&self.inferred, self.layout) {
            (Some(inferred), _) => inferred.dims.get(depth).copied().flatten(),
            (None, Layout::Nested) => self.shape.get(depth).copied(),
            (None, _) => None,
        };
        let row_room = row_len.map_or(room, |len| {
            len.saturating_sub(self.lens.get(depth).copied().unwrap_or(0))
                .min(room)
        });
        T::buffer(&mut self.data).map(|v| (v, room, row_room))
    }

    /// Counts `n` elements added at `depth` by a run; the first one fixes an
    /// undecided layout as flat.
    #[inline]
    pub(crate) fn end_run(&mut self, depth: usize, n: usize) {
        if n > 0 && self.layout == Layout::Unknown {
            self.layout = Layout::Flat;
        }
        if let Some(inferred) = &mut self.inferred {
            if n > 0 && inferred.rank.is_none() {
                inferred.rank = Some(depth + 1);
            }
        }
        self.lens[depth] += n;
    }

    /// The finished buffer, once every element is there.
    pub(crate) fn finish(self) -> Result<(Vec<usize>, TensorData), BuildError> {
        if let Some(inferred) = self.inferred {
            let rank = inferred.rank.unwrap_or(inferred.dims.len());
            let shape: Vec<usize> = (0..rank)
                .map(|d| inferred.dims.get(d).copied().flatten().unwrap_or(0))
                .collect();
            let count: usize = shape.iter().product();
            if count != self.data.len() {
                return Err((
                    Category::Shape,
                    format!(
                        "the data has {} elements, which do not fill shape {}",
                        self.data.len(),
                        format_shape(&shape)
                    ),
                ));
            }
            return Ok((shape, self.data));
        }
        if self.data.len() != self.count && self.length_dimension {
            if let (TensorData::Bytes(_), Some((_, outer))) = (&self.data, self.shape.split_last())
            {
                if outer.iter().product::<usize>() == self.data.len() {
                    let shape = outer.to_vec();
                    return Ok((shape, self.data));
                }
            }
        }
        if self.data.len() != self.count {
            return Err((
                Category::Shape,
                format!(
                    "shape {} holds {} elements, but 'data' has {}",
                    format_shape(&self.shape),
                    self.count,
                    self.data.len()
                ),
            ));
        }
        Ok((self.shape, self.data))
    }
}

/// `f32` and `f64`, for the float hot path.
pub(crate) trait Float: Copy + Default + Send + 'static {
    /// From a one-pass decimal when that is certainly exact.
    fn from_decimal(d: number::Decimal) -> Option<Self>;
    /// From what [`number::plain_parts`] read (at most 18 digits, a
    /// negative exponent), and whether that is certainly exact; the value is
    /// meaningless when it is not.
    fn from_plain(d: number::Decimal) -> (Self, bool);
    /// From a grammar-checked token, exactly.
    fn from_token(token: &[u8]) -> Self;
    /// The buffer, if `data` holds this type.
    fn buffer(data: &mut TensorData) -> Option<&mut Vec<Self>>;
    /// The parallel decoder's helper buffers of this type.
    fn scratch() -> &'static Scratch<Self>;
}

impl Float for f32 {
    fn scratch() -> &'static Scratch<f32> {
        static SCRATCH: Scratch<f32> = Scratch::new();
        &SCRATCH
    }
    #[inline(always)]
    fn from_decimal(d: number::Decimal) -> Option<f32> {
        d.to_f32()
    }
    #[inline(always)]
    fn from_plain(d: number::Decimal) -> (f32, bool) {
        d.plain_to_f32()
    }
    fn from_token(token: &[u8]) -> f32 {
        number::to_f32(token)
    }
    #[inline(always)]
    fn buffer(data: &mut TensorData) -> Option<&mut Vec<f32>> {
        match data {
            TensorData::Fp32(v) => Some(v),
            _ => None,
        }
    }
}

impl Float for f64 {
    fn scratch() -> &'static Scratch<f64> {
        static SCRATCH: Scratch<f64> = Scratch::new();
        &SCRATCH
    }
    #[inline(always)]
    fn from_decimal(d: number::Decimal) -> Option<f64> {
        d.to_f64()
    }
    #[inline(always)]
    fn from_plain(d: number::Decimal) -> (f64, bool) {
        d.to_f64().map_or((0.0, false), |v| (v, true))
    }
    fn from_token(token: &[u8]) -> f64 {
        number::to_f64(token)
    }
    #[inline(always)]
    fn buffer(data: &mut TensorData) -> Option<&mut Vec<f64>> {
        match data {
            TensorData::Fp64(v) => Some(v),
            _ => None,
        }
    }
}

fn expected_kind(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "true or false",
        DataType::Bytes => "a string",
        DataType::Fp16 | DataType::Fp32 | DataType::Fp64 | DataType::Bf16 => "a number",
        _ => "an integer",
    }
}

fn push_number(data: &mut TensorData, token: &[u8], shape: Shape) -> Result<(), BuildError> {
    fn int<T: TryFrom<i128>>(
        v: &mut Vec<T>,
        token: &[u8],
        shape: Shape,
        dt: DataType,
    ) -> Result<(), BuildError> {
        let value = number::to_int::<T>(token, shape).map_err(|e| {
            let text = String::from_utf8_lossy(token);
            match e {
                IntError::NotInteger => (
                    Category::Type,
                    format!("expected an integer for datatype {dt}, got {text}"),
                ),
                IntError::OutOfRange => (
                    Category::Range,
                    format!("{text} is out of range for datatype {dt}"),
                ),
            }
        })?;
        v.push(value);
        Ok(())
    }
    let dt = data.datatype();
    match data {
        TensorData::Fp32(v) => v.push(number::to_f32(token)),
        TensorData::Fp64(v) => v.push(number::to_f64(token)),
        TensorData::Fp16(v) => v.push(number::to_f16(token)),
        TensorData::Bf16(v) => v.push(number::to_bf16(token)),
        TensorData::Uint8(v) => int(v, token, shape, dt)?,
        TensorData::Uint16(v) => int(v, token, shape, dt)?,
        TensorData::Uint32(v) => int(v, token, shape, dt)?,
        TensorData::Uint64(v) => int(v, token, shape, dt)?,
        TensorData::Int8(v) => int(v, token, shape, dt)?,
        TensorData::Int16(v) => int(v, token, shape, dt)?,
        TensorData::Int32(v) => int(v, token, shape, dt)?,
        TensorData::Int64(v) => int(v, token, shape, dt)?,
        TensorData::Bool(_) | TensorData::Bytes(_) => unreachable!("checked by the caller"),
    }
    Ok(())
}
