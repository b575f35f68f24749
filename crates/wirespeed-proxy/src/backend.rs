//! One upstream and what the proxy knows of its services: their routes
//! and descriptors, from a descriptor set or the upstream's reflection
//! (asked again while serving), and how request headers become gRPC
//! metadata and the answer's metadata becomes headers.

use std::sync::{Arc, RwLock};

use hyper::header::{HeaderMap, HeaderName};
use hyper::Response;
use prost_reflect::DescriptorPool;
use wirespeed_http::{json_response, Body};
use wirespeed_transcode::{status_json, with_rpc_types, Routes};
use wirespeed_upstream::{Address, Probe, Upstream, UpstreamError, UpstreamOptions};

use crate::config::TranscodeConfig;
use crate::reflection;
use crate::status::CallFailure;

/// One upstream and what the proxy knows of its services.
pub(crate) struct Backend {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) config: TranscodeConfig,
    /// Replaced when reflection says the services changed.
    services: RwLock<Arc<Services>>,
}

/// An upstream's services, as a descriptor set or reflection gave them.
pub(crate) struct Services {
    pub(crate) routes: Routes,
    /// The services' descriptors with google.rpc's error details, for
    /// the details of an error status.
    pub(crate) pool: DescriptorPool,
    /// The descriptors' fingerprint, to see a change.
    fingerprint: u64,
}

impl Services {
    fn new(pool: &DescriptorPool, config: &TranscodeConfig) -> Result<Services, String> {
        use std::hash::{Hash, Hasher};
        let routes = Routes::from_pool(pool, &config.services)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        pool.encode_to_vec().hash(&mut hasher);
        Ok(Services {
            routes,
            pool: with_rpc_types(pool),
            fingerprint: hasher.finish(),
        })
    }
}

impl Backend {
    pub(crate) async fn load(config: &TranscodeConfig) -> Result<Backend, String> {
        let addresses = config
            .upstream
            .iter()
            .map(|u| u.parse::<Address>())
            .collect::<Result<Vec<_>, _>>()?;
        // Any gRPC service: an ejected replica is probed by gRPC's own
        // health check, not the inference protocol's.
        let options = UpstreamOptions {
            probe: Probe::GrpcHealth,
            ..UpstreamOptions::default()
        };
        let upstream = Upstream::new(addresses, options)?;
        let pool = match &config.descriptor_set {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    format!("cannot read the descriptor set {}: {e}", path.display())
                })?;
                DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
                    format!(
                        "{} is not a FileDescriptorSet (make one with protoc --include_imports --descriptor_set_out): {e}",
                        path.display()
                    )
                })?
            }
            None => reflection::descriptors(&upstream, &config.services)
                .await
                .map_err(|e| {
                    format!(
                        "cannot learn {}'s services by reflection: {e}",
                        upstream.describe()
                    )
                })?,
        };
        let services = Services::new(&pool, config)?;
        tracing::info!(
            routes = services.routes.routes().len(),
            upstream = upstream.describe(),
            "transcoding HTTP/JSON to gRPC"
        );
        Ok(Backend {
            upstream,
            config: config.clone(),
            services: RwLock::new(Arc::new(services)),
        })
    }

    /// What is known of the services now.
    pub(crate) fn services(&self) -> Arc<Services> {
        Arc::clone(&self.services.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Asks the upstream's reflection again, and rebuilds the routes if
    /// its services changed; on any failure the routes stay as they are.
    pub(crate) async fn reflect_again(&self) {
        let asked = reflection::descriptors(&self.upstream, &self.config.services).await;
        let pool = match asked {
            Ok(pool) => pool,
            Err(e) => {
                tracing::warn!(
                    upstream = self.upstream.describe(),
                    error = %e,
                    "cannot ask the upstream's reflection again; the routes stay as they were"
                );
                return;
            }
        };
        let services = match Services::new(&pool, &self.config) {
            Ok(services) => services,
            Err(e) => {
                tracing::warn!(
                    upstream = self.upstream.describe(),
                    error = %e,
                    "the upstream's services changed into ones that cannot be routed; the routes stay as they were"
                );
                return;
            }
        };
        if services.fingerprint == self.services().fingerprint {
            return;
        }
        tracing::info!(
            upstream = self.upstream.describe(),
            routes = services.routes.routes().len(),
            "the upstream's services changed; routes rebuilt from its reflection"
        );
        *self.services.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(services);
    }

    /// The error answer for a failed call, with the upstream's details
    /// (`grpc-status-details-bin`) printed through the services'
    /// descriptors.
    pub(crate) fn call_error(
        &self,
        services: &Services,
        e: &UpstreamError,
        details: Option<&[u8]>,
    ) -> Response<Body> {
        let failure = CallFailure::of_call(e);
        let mut out = Vec::with_capacity(64 + failure.message.len());
        status_json(
            failure.number,
            &failure.message,
            details,
            &services.pool,
            &self.config.print,
            &mut out,
        );
        json_response(failure.http_status(), out)
    }

    /// The gRPC metadata of a request: the configured headers, and
    /// `Grpc-Metadata-<key>` ones as `<key>`.
    pub(crate) fn metadata(&self, headers: &HeaderMap) -> HeaderMap {
        let mut metadata = HeaderMap::new();
        for name in &self.config.forward_headers {
            if let Ok(header) = name.parse::<HeaderName>() {
                for value in headers.get_all(name.as_str()) {
                    metadata.append(header.clone(), value.clone());
                }
            }
        }
        for (name, value) in headers {
            let Some(key) = name.as_str().strip_prefix(METADATA_PREFIX) else {
                continue;
            };
            if let Ok(key) = key.parse::<HeaderName>() {
                if !is_reserved(key.as_str()) {
                    metadata.append(key, value.clone());
                }
            }
        }
        metadata
    }

    /// Adds the answer's metadata to `response`: `headers` under their
    /// own names when configured, else `Grpc-Metadata-<key>`; `trailers`
    /// as `Grpc-Trailer-<key>`.
    pub(crate) fn answer_metadata(
        &self,
        response: &mut Response<Body>,
        headers: &HeaderMap,
        trailers: &HeaderMap,
    ) {
        let out = response.headers_mut();
        for (name, value) in headers {
            if is_reserved(name.as_str()) {
                continue;
            }
            if self
                .config
                .forward_headers
                .iter()
                .any(|h| h == name.as_str())
            {
                out.append(name.clone(), value.clone());
            } else if let Ok(named) = format!("{METADATA_PREFIX}{name}").parse::<HeaderName>() {
                out.append(named, value.clone());
            }
        }
        for (name, value) in trailers {
            if is_reserved(name.as_str()) {
                continue;
            }
            if let Ok(named) = format!("grpc-trailer-{name}").parse::<HeaderName>() {
                out.append(named, value.clone());
            }
        }
    }
}

/// The header prefix of gRPC metadata passed through HTTP
/// (grpc-gateway's convention).
const METADATA_PREFIX: &str = "grpc-metadata-";

/// Headers that are HTTP/2's or gRPC's own, never metadata.
fn is_reserved(name: &str) -> bool {
    name.starts_with("grpc-")
        || matches!(
            name,
            "content-type"
                | "content-length"
                | "te"
                | "trailer"
                | "user-agent"
                | "date"
                | "server"
                | "connection"
                | "host"
                | "transfer-encoding"
                | "keep-alive"
                | "upgrade"
        )
}
