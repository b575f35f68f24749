//! Decoder limits and switches.

use wirespeed_core::{CpuPool, RequestLimits};

/// Limits and switches for decoding one request. Every limit is checked
/// before the memory it guards is allocated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DecodeOptions {
    /// The request limits, the same for every protocol.
    pub limits: RequestLimits,
    /// Refuse `NaN`, `Infinity` and `-Infinity` (which Python's `json.dumps`
    /// writes, and which are accepted by default for float datatypes).
    pub strict: bool,
    /// The pool whose threads help decode one large run of FP32/FP64 values
    /// (runs of at least [`PARALLEL_MIN_BYTES`](crate::PARALLEL_MIN_BYTES)
    /// in one chunk), together with the calling thread. Without one, every
    /// run is decoded on the calling thread.
    pub pool: Option<CpuPool>,
    /// A V2 BYTES input's last dimension may be its elements' length in
    /// bytes, as MLServer's clients write it (`[59]` for one string of 59
    /// bytes): the tensor is shaped without it, and the shape as written
    /// goes to the model in the input's parameters
    /// ([`wirespeed_core::WRITTEN_SHAPE`]). For MLServer's runtimes.
    pub bytes_length_dimension: bool,
}
