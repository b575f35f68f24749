//! Decoder limits and switches.

/// Limits and switches for decoding one request. Every limit is checked
/// before the memory it guards is allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Most tensor elements over all inputs of one request.
    pub max_elements: usize,
    /// Most bytes of tensor data over all inputs of one request (elements
    /// times their size; a BYTES element counts its length prefix, 4).
    pub max_tensor_bytes: usize,
    /// Most bytes in one string: a BYTES element, a name, a key, a parameter.
    pub max_string_bytes: usize,
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
    /// Most inputs in one request.
    pub max_inputs: usize,
    /// Refuse `NaN`, `Infinity` and `-Infinity` (which Python's `json.dumps`
    /// writes, and which are accepted by default for float datatypes).
    pub strict: bool,
    /// Threads that may decode one large run of FP32/FP64 values together
    /// (runs of at least [`PARALLEL_MIN_BYTES`](crate::PARALLEL_MIN_BYTES)
    /// in one chunk): the caller's and up to `threads - 1` helpers from the
    /// decoder's pool (one thread fewer than the cores); 1 decodes on the
    /// caller's thread only.
    pub threads: usize,
}

impl Default for DecodeOptions {
    fn default() -> DecodeOptions {
        DecodeOptions {
            // A 64 MiB body holds at most 32 Mi numbers ("0,").
            max_elements: 32 << 20,
            // The elements limit in FP64: no datatype decodes to more.
            max_tensor_bytes: 256 << 20,
            max_string_bytes: 16 << 20,
            max_depth: 64,
            max_inputs: 1024,
            strict: false,
            threads: 1,
        }
    }
}
