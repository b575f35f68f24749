//! What every protocol shares once a request is decoded: the one pipeline
//! (`pipeline.rs`), the served models and their schedulers (`served.rs`),
//! the models that answer through others (`composite/`: ensembles,
//! inference graphs, applications), models calling models (`calls.rs`),
//! a decoupled model's stream of responses (`stream.rs`), a stateful
//! model's sequences (`sequences.rs`),
//! the stage timings, traces, reserved
//! parameters and classification; the
//! statistics and metrics counters; the shared-memory regions; the model
//! repository while serving (`model_control.rs`) and the upstream's models
//! (`fronting.rs`). Nothing here knows a protocol or a socket.

pub(crate) mod cache;
pub(crate) mod calls;
pub(crate) mod classification;
pub(crate) mod composite;
#[cfg(feature = "upstream")]
pub(crate) mod fronting;
pub(crate) mod metrics;
pub(crate) mod model_control;
pub(crate) mod pipeline;
pub(crate) mod readiness;
pub(crate) mod regions;
pub(crate) mod reserved;
pub(crate) mod sequences;
pub(crate) mod served;
pub(crate) mod statistics;
pub(crate) mod stream;
pub(crate) mod timing;
pub(crate) mod traces;

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

/// What the pipeline and every protocol's codecs share: the narrow handle
/// a request is served through, whatever it came in.
pub(crate) struct Serving {
    /// The served models, each with its scheduler.
    pub(crate) models: Arc<ServedModels>,
    /// The server's part of readiness.
    pub(crate) readiness: Arc<Readiness>,
    /// The one CPU pool: model compute, large decodes and their helpers.
    pub(crate) pool: CpuPool,
    /// The request limits, the switches of the JSON decoders and the CPU
    /// pool their helpers run on.
    pub(crate) decode_options: DecodeOptions,
    /// A request's deadline from its start, unless its client's is sooner.
    pub(crate) request_timeout: Duration,
    /// The registered system shared-memory regions.
    pub(crate) shared_memory: SharedMemory,
    /// OpenTelemetry traces, when exported.
    pub(crate) traces: Option<Traces>,
    /// The server's own counters, when metrics are on.
    pub(crate) traffic: Option<Arc<Traffic>>,
    /// How models call models (BLS); the models' registry holds it weakly.
    pub(crate) calls: Arc<calls::Calls>,
    /// Numbers requests for error messages and the log.
    request_ids: AtomicU64,
}

impl Serving {
    /// The handle over its parts; requests are numbered from 1.
    pub(crate) fn new(
        models: Arc<ServedModels>,
        readiness: Arc<Readiness>,
        pool: CpuPool,
        decode_options: DecodeOptions,
        request_timeout: Duration,
        traces: Option<Traces>,
        traffic: Option<Arc<Traffic>>,
    ) -> Serving {
        let calls = Arc::new(calls::Calls::new(&models));
        Serving {
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
    pub(crate) fn next_request_id(&self) -> u64 {
        self.request_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Ready while serving with every model ready, as Triton's and
    /// KServe's server readiness mean.
    pub(crate) fn server_ready(&self) -> bool {
        self.readiness.server_ready(&self.models)
    }

    /// Whether `served` can answer now, or why not.
    pub(crate) fn model_ready(&self, served: &ServedModel) -> Result<(), String> {
        self.readiness.model_ready(served)
    }
}
