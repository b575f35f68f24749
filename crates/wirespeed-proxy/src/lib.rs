//! The transcoding proxy: an HTTP/JSON face on a user's gRPC services
//! (`wirespeed proxy`, or a server with a transcoding config, whose REST
//! requests that name none of its own endpoints come here). A request is
//! looked up in the services' routes
//! (`wirespeed_transcode::Routes`), its JSON body is encoded as the
//! method's request while it arrives, path variables and query
//! parameters are appended, and the call goes to the upstream through
//! the same client pool as upstream models (`wirespeed_upstream`). The
//! answer's message is printed as JSON straight from its bytes (or just
//! its `response_body` field).
//!
//! ```
//! use wirespeed_proxy::TranscodeConfig;
//!
//! // The services a server transcodes: one [[service]] per upstream.
//! let file = std::env::temp_dir().join(format!("transcode-{}.toml", std::process::id()));
//! std::fs::write(&file, r#"
//!     [[service]]
//!     upstream = ["grpc://10.0.0.5:50051", "grpc://10.0.0.6:50051"]
//!     descriptor_set = "shop.pb"
//!     forward_headers = ["X-Request-Id"]
//!     emit_defaults = true
//! "#).unwrap();
//! let services = TranscodeConfig::from_file(&file).unwrap();
//! std::fs::remove_file(&file).unwrap();
//! assert_eq!(services[0].upstream.len(), 2);
//! // Paths are relative to the file; header names are matched in lowercase.
//! assert_eq!(services[0].descriptor_set.as_deref(), Some(std::env::temp_dir().join("shop.pb").as_path()));
//! assert_eq!(services[0].forward_headers, ["x-request-id"]);
//! assert!(services[0].print.emit_defaults);
//! ```
//!
//! The crate: [`Transcoder`] (here) holds one [`Backend`](backend.rs) per
//! upstream; `call.rs` answers one request; `status.rs` maps every error
//! through one table of gRPC codes; `reflection.rs` asks an upstream for
//! its services; `config.rs` is [`TranscodeConfig`].
//!
//! Streaming methods (`streaming.rs`): a client stream's body (a JSON
//! array of messages, or newline-delimited ones) is sent message by
//! message as it is read; a server stream's answers are printed as they
//! come, as a JSON array, NDJSON or server-sent events by `Accept`.
//!
//! Errors: a route or body the services do not take is a 4xx with
//! `google.rpc.Status` JSON (`code`, `message`, `details`); the
//! upstream's gRPC status becomes the HTTP status by `google.rpc.Code`'s
//! table, its `grpc-status-details-bin` the `details`. A `grpc-timeout`
//! request header (gRPC's format: `5S`, `200m`) becomes the call's
//! deadline. Metadata: request headers named in the config, and any
//! `Grpc-Metadata-<key>` header, go on as gRPC metadata; the answer's
//! metadata comes back as headers of the same names (configured ones) or
//! `Grpc-Metadata-<key>`, and a unary answer's trailers as
//! `Grpc-Trailer-<key>`.

mod backend;
mod call;
mod config;
mod field_mask;
mod http_body;
mod reflection;
mod status;
mod streaming;

use std::sync::Weak;
use std::time::Instant;

use hyper::{Request, Response};
use wirespeed_http::RequestBody;
use wirespeed_http::{Body, BodyLimits};

use backend::Backend;
pub use config::TranscodeConfig;
pub use wirespeed_transcode::PrintOptions;

/// Every transcoded service, each with its upstream, searched in order.
pub struct Transcoder {
    pub(crate) backends: Vec<Backend>,
    pub(crate) limits: ProxyLimits,
}

/// What a request may be.
#[derive(Debug, Clone, Copy)]
pub struct ProxyLimits {
    /// Its body's size (which also bounds each message it encodes) and
    /// times; the total time is also the longest any wait for the
    /// upstream may take.
    pub body: BodyLimits,
    /// The deepest nesting of its JSON.
    pub max_depth: usize,
}

impl Transcoder {
    /// Learns every upstream's services (from its descriptor set or by
    /// reflection) and compiles their routes; an error says which and why.
    pub async fn load(
        configs: &[TranscodeConfig],
        limits: ProxyLimits,
    ) -> Result<Transcoder, String> {
        let mut backends = Vec::with_capacity(configs.len());
        for config in configs {
            backends.push(Backend::load(config).await?);
        }
        Ok(Transcoder { backends, limits })
    }

    /// The answer to `request`: the gRPC call's, printed as JSON, or the
    /// `google.rpc.Status` of what went wrong.
    pub async fn answer(&self, request: Request<RequestBody>) -> Response<Body> {
        call::answer(self, request).await
    }

    /// Whether a route of the services has `path`, for `method` or another
    /// (which the route's 405 answers): such a request is the services',
    /// before any endpoint of the server's own at the same path.
    pub fn routes(&self, method: &hyper::Method, path: &str) -> bool {
        self.backends.iter().any(|backend| {
            !matches!(
                backend.services().routes.find(method.as_str(), path),
                Err(wirespeed_transcode::NotFound::Path)
            )
        })
    }
}

/// Asks the reflection of each upstream served by reflection again at its
/// `reflect_every`, while the server lives, so that a redeployed upstream's
/// new or changed methods are routed without a restart.
pub async fn reflect_again(transcoder: Weak<Transcoder>) {
    let period = {
        let Some(transcoder) = transcoder.upgrade() else {
            return;
        };
        let periods = transcoder
            .backends
            .iter()
            .filter(|b| b.config.descriptor_set.is_none())
            .filter_map(|b| b.config.reflect_every);
        match periods.min() {
            Some(period) => period,
            None => return,
        }
    };
    // Each was asked when it loaded.
    let mut asked_at = Vec::new();
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(transcoder) = transcoder.upgrade() else {
            return;
        };
        asked_at.resize(transcoder.backends.len(), Instant::now() - period);
        for (backend, asked) in transcoder.backends.iter().zip(asked_at.iter_mut()) {
            let Some(every) = backend.config.reflect_every else {
                continue;
            };
            // Due when within half a tick of its period.
            if backend.config.descriptor_set.is_some() || asked.elapsed() + period / 2 < every {
                continue;
            }
            *asked = Instant::now();
            backend.reflect_again().await;
        }
    }
}
