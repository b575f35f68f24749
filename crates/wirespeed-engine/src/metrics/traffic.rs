//! What the server as a whole sees, apart from any model: infer requests
//! and the bytes decoded by protocol, and the requests refused at a limit
//! before any model saw them.

use std::sync::atomic::{AtomicU64, Ordering};

use wirespeed_core::ErrorKind;

use super::shards::Shards;

/// The protocol an infer request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InferProtocol {
    /// Open Inference Protocol (V2) over REST.
    V2Rest = 0,
    /// Open Inference Protocol (V2) over gRPC.
    V2Grpc = 1,
    /// TF Serving's REST API.
    TfServing = 2,
    /// Clipper's REST API.
    Clipper = 3,
    /// TF Serving's gRPC API.
    TfServingGrpc = 4,
    /// The OpenAI-compatible API.
    OpenAi = 5,
}

impl InferProtocol {
    /// Every protocol, in the order of their numbers.
    pub const ALL: [InferProtocol; 6] = [
        InferProtocol::V2Rest,
        InferProtocol::V2Grpc,
        InferProtocol::TfServing,
        InferProtocol::Clipper,
        InferProtocol::TfServingGrpc,
        InferProtocol::OpenAi,
    ];

    /// Its name as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            InferProtocol::V2Rest => "v2_rest",
            InferProtocol::V2Grpc => "v2_grpc",
            InferProtocol::TfServing => "tfserving",
            InferProtocol::Clipper => "clipper",
            InferProtocol::TfServingGrpc => "tfserving_grpc",
            InferProtocol::OpenAi => "openai",
        }
    }
}

/// A limit a request was refused at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request line and headers (431).
    Headers = 0,
    /// The body or gRPC message size (413).
    Body = 1,
    /// Elements, tensor bytes, strings, depth, inputs (400).
    RequestLimits = 2,
    /// The body did not arrive in time (408).
    Timeout = 3,
}

impl Refusal {
    /// Every refusal, in the order of their numbers.
    pub const ALL: [Refusal; 4] = [
        Refusal::Headers,
        Refusal::Body,
        Refusal::RequestLimits,
        Refusal::Timeout,
    ];

    /// The refusal an error of `kind` is, if it is one.
    pub fn of(kind: ErrorKind) -> Option<Refusal> {
        match kind {
            ErrorKind::HeadersTooLarge => Some(Refusal::Headers),
            ErrorKind::PayloadTooLarge => Some(Refusal::Body),
            ErrorKind::LimitExceeded => Some(Refusal::RequestLimits),
            ErrorKind::Timeout => Some(Refusal::Timeout),
            _ => None,
        }
    }

    /// Its name as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Headers => "headers",
            Refusal::Body => "body",
            Refusal::RequestLimits => "request_limits",
            Refusal::Timeout => "body_timeout",
        }
    }
}

const PROTOCOLS: usize = InferProtocol::ALL.len();

/// The server's own counters.
#[derive(Default)]
pub struct Traffic {
    /// Per protocol: requests, then bytes decoded. Counted on every infer
    /// request, so sharded.
    requests: Shards<{ 2 * PROTOCOLS }>,
    refused: [AtomicU64; Refusal::ALL.len()],
}

impl Traffic {
    /// Counts an infer request of `protocol` whose body or message was
    /// `bytes` long.
    #[inline]
    pub fn request(&self, protocol: InferProtocol, bytes: u64) {
        self.requests.add(protocol as usize, 1);
        self.requests.add(PROTOCOLS + protocol as usize, bytes);
    }

    /// Counts a request refused with an error of `kind`, if that is a
    /// limit.
    pub fn refused(&self, kind: ErrorKind) {
        if let Some(refusal) = Refusal::of(kind) {
            self.refused[refusal as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The infer requests of `protocol` so far.
    pub fn requests(&self, protocol: InferProtocol) -> u64 {
        self.requests.get(protocol as usize)
    }

    /// The body or message bytes of `protocol`'s infer requests so far.
    pub fn decoded_bytes(&self, protocol: InferProtocol) -> u64 {
        self.requests.get(PROTOCOLS + protocol as usize)
    }

    /// The requests refused at `refusal` so far.
    pub fn refusals(&self, refusal: Refusal) -> u64 {
        self.refused[refusal as usize].load(Ordering::Relaxed)
    }
}
