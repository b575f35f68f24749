//! wirespeed's serving engine: what every protocol shares once a request
//! is decoded. A front end (the server's `protocols/`) is a
//! [`pipeline::Codec`]: it decodes its protocol's request and encodes the
//! answer, and [`Engine::infer`] does everything in between, once for all
//! of them.
//!
//! ```
//! use wirespeed_core::{Tensor, TensorData};
//! use wirespeed_engine::cache::ResponseCache;
//!
//! // The response cache: an answer kept under the hash of its request, for
//! // the model as it is loaded now.
//! let cache = ResponseCache::new(1 << 20);
//! let inputs = [Tensor::new("x", vec![2], TensorData::Fp32(vec![1.0, 2.0]))];
//! let key = cache.key(7, &inputs, &[], &Vec::new(), &[]);
//! assert!(cache.get(&key).is_none());
//! cache.insert(key, vec![Tensor::new("y", vec![1], TensorData::Fp32(vec![3.0]))]);
//! assert_eq!(cache.get(&key).unwrap()[0].name, "y");
//! // Unloading the model drops its answers.
//! cache.drop_load(7);
//! assert!(cache.get(&key).is_none());
//! ```
//!
//! - `pipeline.rs`: the one path of an infer request, and the `Codec` seam;
//! - `served.rs`: the served models, each with its scheduler and response
//!   cache (`cache.rs`); `readiness.rs`, whether they can answer;
//! - `composite.rs`: the models that answer through others (ensembles,
//!   inference graphs, applications), each run through its own
//!   `Composite::run` with the `ModelCaller` every one shares; models
//!   calling models (`calls.rs`, BLS: the server's `ModelCaller`);
//! - `stream.rs`: a decoupled model's stream of responses; `sequences.rs`:
//!   a stateful model's sequences;
//! - `reserved_parameters.rs` (the request parameters that ask the
//!   server, not the model), `classification.rs`, `regions.rs`
//!   (shared-memory regions);
//! - `timing.rs`, `traces.rs`, `statistics.rs`, `metrics/`: what is
//!   measured of each request;
//! - `model_control/`: the model repository while serving (`load_request.rs`: a load request's parameters and files);
//!   `upstream_server.rs`: the models of an upstream server.
//!
//! Nothing here knows a protocol or a socket; the server's
//! `tests/it/layers.rs` checks this crate's manifest for it.

pub mod cache;
pub mod calls;
pub mod classification;
pub mod composite;
pub mod counting;
pub mod metrics;
pub mod model_control;
pub mod pipeline;
pub mod readiness;
pub mod regions;
pub mod reserved_parameters;
pub mod sequences;
pub mod served;
pub mod statistics;
pub mod stream;
pub mod timing;
pub mod traces;
#[cfg(feature = "upstream")]
pub mod upstream_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wirespeed_core::CpuPool;
use wirespeed_json::DecodeOptions;

use metrics::Traffic;
use readiness::Readiness;
use regions::SharedMemory;
use served::{ServedModel, ServedModels};
use traces::Traces;

/// The engine: what the pipeline and every protocol's codecs share, the
/// narrow handle a request is served through, whatever it came in.
pub struct Engine {
    /// The served models, each with its scheduler.
    pub models: Arc<ServedModels>,
    /// The server's part of readiness.
    pub readiness: Arc<Readiness>,
    /// The one CPU pool: model compute, large decodes and their helpers.
    pub pool: CpuPool,
    /// The request limits, the switches of the JSON decoders and the CPU
    /// pool their helpers run on.
    pub decode_options: DecodeOptions,
    /// A request's deadline from its start, unless its client's is sooner.
    pub request_timeout: Duration,
    /// The registered system shared-memory regions.
    pub shared_memory: SharedMemory,
    /// OpenTelemetry traces, when exported.
    pub traces: Option<Traces>,
    /// The server's own counters, when metrics are on.
    pub traffic: Option<Arc<Traffic>>,
    /// How models call models (BLS); the models' registry holds it weakly.
    pub calls: Arc<calls::Calls>,
    /// Numbers requests for error messages and the log.
    request_ids: AtomicU64,
}

impl Engine {
    /// The handle over its parts; requests are numbered from 1.
    pub fn new(
        models: Arc<ServedModels>,
        readiness: Arc<Readiness>,
        pool: CpuPool,
        decode_options: DecodeOptions,
        request_timeout: Duration,
        traces: Option<Traces>,
        traffic: Option<Arc<Traffic>>,
    ) -> Engine {
        let calls = Arc::new(calls::Calls::new(&models));
        Engine {
            models,
            readiness,
            pool,
            decode_options,
            request_timeout,
            shared_memory: SharedMemory::default(),
            traces,
            traffic,
            calls,
            request_ids: AtomicU64::new(1),
        }
    }

    /// The next request's number.
    pub fn next_request_id(&self) -> u64 {
        self.request_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Ready while serving with every model ready, as Triton's and
    /// KServe's server readiness mean.
    pub fn server_ready(&self) -> bool {
        self.readiness.server_ready(&self.models)
    }

    /// Whether `served` can answer now, or why not.
    pub fn model_ready(&self, served: &ServedModel) -> Result<(), String> {
        self.readiness.model_ready(served)
    }
}
