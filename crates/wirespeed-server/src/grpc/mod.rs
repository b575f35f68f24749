//! The Open Inference Protocol over gRPC, on tonic: the `inference.
//! GRPCInferenceService` of `proto/grpc_service.proto` (what tritonclient.grpc
//! and KServe clients call), the standard health service, and reflection so
//! that `grpcurl` can list and call it.
//!
//! `ModelInfer` and `ModelStreamInfer` are codecs of the one pipeline
//! (`infer.rs`, converting in `convert.rs`). Errors carry the gRPC code
//! their kind maps to (`ErrorKind::grpc_code`).

mod convert;
mod infer;
mod tfserving;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status, Streaming};
use tonic_health::server::HealthReporter;
use wirespeed_core::{Error, ErrorKind};
use wirespeed_proto::inference as pb;

use crate::auth::HealthCheck;
use crate::listen::Activity;
use crate::missing::Missing;
use crate::AppState;

use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use wirespeed_proto::tensorflow::serving::model_service_server::ModelServiceServer;
use wirespeed_proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;

/// Requests in flight on one ModelStreamInfer stream before reading pauses.
const STREAM_BACKLOG: usize = 16;

/// The gRPC status for an `error` outside the pipeline (which numbers and
/// logs its own): client errors say what was wrong.
fn status(error: &Error) -> Status {
    infer::status(error, error.public_message())
}

fn not_implemented(missing: Missing) -> Status {
    status(&missing.error())
}

/// The client's deadline, from the `grpc-timeout` header.
fn deadline(metadata: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// A `grpc-timeout` value as gRPC defines it: one to eight digits and a
/// unit (H, M, S, m, u, n). At most 10^8 hours, so any deadline it makes
/// is a valid `Instant`.
pub(crate) fn grpc_timeout(text: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The protocol's empty version means the served one.
fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

struct Inference {
    state: Arc<AppState>,
}

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse {
            ready: self.state.server_ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let request = request.into_inner();
        let served = self
            .state
            .models
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::ModelReadyResponse {
            ready: self.state.model_ready(&served).is_ok(),
        }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "wirespeed".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: crate::EXTENSIONS.iter().map(|&e| e.to_owned()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let request = request.into_inner();
        let model = self
            .state
            .models
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        let m = model.metadata();
        let versions =
            crate::models::versions_named(&self.state, &request.name, version(&request.version));
        let specs = |specs: &[wirespeed_core::TensorSpec]| {
            specs
                .iter()
                .map(|s| pb::model_metadata_response::TensorMetadata {
                    name: s.name.clone(),
                    datatype: s.datatype.as_str().to_owned(),
                    shape: s.shape.clone(),
                })
                .collect()
        };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: m.name.clone(),
            versions,
            platform: m.platform.clone(),
            inputs: specs(&m.inputs),
            outputs: specs(&m.outputs),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let deadline = deadline(request.metadata());
        let trace = crate::traces::incoming(request.metadata().as_ref());
        let answer = infer::model_infer(&self.state, request.into_inner(), deadline, trace);
        // A deadline that passes drops the request where it is: a queued
        // one leaves the queue uncomputed; one computing finishes, holding
        // its slot, and its answer is dropped.
        match deadline {
            Some(after) => tokio::time::timeout(after, answer)
                .await
                .unwrap_or_else(|_| {
                    let e = Error::new(
                        ErrorKind::Timeout,
                        format!("the client's deadline of {after:?} passed before the answer"),
                    );
                    Err(status(&e))
                }),
            None => answer.await,
        }
    }

    async fn model_config(
        &self,
        request: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let request = request.into_inner();
        let model = self
            .state
            .models
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(crate::model_config::model_config(&request.name, &model)),
        }))
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let request = request.into_inner();
        let model_stats =
            crate::statistics::select(&self.state.models, &request.name, version(&request.version))
                .map_err(|e| status(&e))?
                .into_iter()
                .map(|s| s.triton)
                .collect();
        Ok(Response::new(pb::ModelStatisticsResponse { model_stats }))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryStatusResponse>, Status> {
        let name = request.into_inner().name;
        let regions = self
            .state
            .shared_memory
            .status(&name)
            .map_err(|e| status(&e))?
            .iter()
            .map(|r| {
                let region = pb::system_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    key: r.key.clone(),
                    offset: r.offset as u64,
                    byte_size: r.byte_size as u64,
                };
                (r.name.clone(), region)
            })
            .collect();
        Ok(Response::new(pb::SystemSharedMemoryStatusResponse {
            regions,
        }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryRegisterResponse>, Status> {
        let r = request.into_inner();
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        self.state
            .shared_memory
            .register(&r.name, &r.key, size(r.offset), size(r.byte_size))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryUnregisterResponse>, Status> {
        self.state
            .shared_memory
            .unregister(&request.into_inner().name);
        Ok(Response::new(pb::SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryStatusResponse>, Status> {
        let name = request.into_inner().name;
        if !name.is_empty() {
            let e = Error::invalid_input(format!(
                "no CUDA shared memory region '{name}' is registered: this server has no GPU"
            ));
            return Err(status(&e));
        }
        Ok(Response::new(pb::CudaSharedMemoryStatusResponse::default()))
    }

    async fn cuda_shared_memory_register(
        &self,
        _: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryRegisterResponse>, Status> {
        Err(status(&crate::shared_memory::cuda_refused()))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryUnregisterResponse>, Status> {
        // Nothing is ever registered, so nothing is left to unregister.
        Ok(Response::new(pb::CudaSharedMemoryUnregisterResponse {}))
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> Result<Response<pb::RepositoryIndexResponse>, Status> {
        let ready = request.into_inner().ready;
        let models = self
            .state
            .repository
            .index(&self.state, ready)
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version,
                state: e.state.to_owned(),
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(pb::RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        let request = request.into_inner();
        use pb::model_repository_parameter::ParameterChoice;
        let config =
            crate::repository::load_config(request.parameters.iter().map(|(key, value)| {
                let text = match &value.parameter_choice {
                    Some(ParameterChoice::StringParam(text)) => Some(text.as_str()),
                    _ => None,
                };
                (key.as_str(), text)
            }))
            .map_err(|e| status(&e))?;
        self.state
            .repository
            .load(&self.state, &request.model_name, config)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        let request = request.into_inner();
        self.state
            .repository
            .unload(&self.state, &request.model_name)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn trace_setting(
        &self,
        _: Request<pb::TraceSettingRequest>,
    ) -> Result<Response<pb::TraceSettingResponse>, Status> {
        Err(not_implemented(Missing::Trace))
    }

    async fn log_settings(
        &self,
        _: Request<pb::LogSettingsRequest>,
    ) -> Result<Response<pb::LogSettingsResponse>, Status> {
        Err(not_implemented(Missing::Logging))
    }

    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        // The stream's trace context is each of its requests'.
        let trace = crate::traces::incoming(request.metadata().as_ref());
        let mut incoming = request.into_inner();
        let (sender, receiver) = mpsc::channel(STREAM_BACKLOG);
        let state = Arc::clone(&self.state);
        // Requests are answered one at a time, in order. A broken stream
        // (bad framing, too large a message) ends with that status.
        tokio::spawn(async move {
            while let Some(next) = incoming.next().await {
                let reply = match next {
                    Ok(message) => Ok(infer::stream_infer(&state, message, trace.clone()).await),
                    Err(broken) => Err(broken),
                };
                let end = reply.is_err();
                if sender.send(reply).await.is_err() || end {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

/// The gRPC routes shared by every connection.
#[derive(Clone)]
pub(crate) struct GrpcRoutes {
    routes: tonic::service::Routes,
    state: Arc<AppState>,
}

impl GrpcRoutes {
    /// Makes the gRPC service for each new connection.
    pub(crate) fn factory(&self) -> impl Fn(Arc<Activity>) -> GrpcService {
        let routes = self.routes.clone();
        let state = Arc::clone(&self.state);
        move |activity| GrpcService {
            routes: routes.clone(),
            state: Arc::clone(&state),
            activity,
        }
    }
}

/// Builds the inference, health and reflection services, with health
/// SERVING until [`not_serving`].
pub(crate) async fn service(state: Arc<AppState>) -> (GrpcRoutes, HealthReporter) {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<GrpcInferenceServiceServer<Inference>>()
        .await;
    let descriptors = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(wirespeed_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(wirespeed_proto::TF_FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    // grpcurl and other tools speak either version of reflection.
    let v1 = descriptors()
        .build_v1()
        .expect("the bundled descriptors are valid");
    let v1alpha = descriptors()
        .build_v1alpha()
        .expect("the bundled descriptors are valid");
    let inference = GrpcInferenceServiceServer::new(Inference {
        state: Arc::clone(&state),
    })
    .max_decoding_message_size(state.limits.max_grpc_message_bytes)
    .max_encoding_message_size(usize::MAX)
    // tritonclient.grpc's `compression_algorithm`: messages in gzip or
    // deflate are read (the size limit holds for the message
    // decompressed), and a client that compresses its requests gets its
    // answers compressed (`GrpcService::call`).
    .accept_compressed(CompressionEncoding::Gzip)
    .accept_compressed(CompressionEncoding::Deflate)
    .send_compressed(CompressionEncoding::Gzip)
    .send_compressed(CompressionEncoding::Deflate);
    // TF Serving's services, for its clients (port 8500's), on the same
    // listener and under the same message limit.
    let tf = || tfserving::TfServing {
        state: Arc::clone(&state),
    };
    let prediction = PredictionServiceServer::new(tf())
        .max_decoding_message_size(state.limits.max_grpc_message_bytes)
        .max_encoding_message_size(usize::MAX)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    let model_service = ModelServiceServer::new(tf());
    let routes = tonic::service::Routes::new(health_service)
        .add_service(v1)
        .add_service(v1alpha)
        .add_service(inference)
        .add_service(prediction)
        .add_service(model_service)
        .prepare();
    (GrpcRoutes { routes, state }, health)
}

/// Reports NOT_SERVING for the server and the inference service.
pub(crate) async fn not_serving(health: &HealthReporter) {
    health
        .set_not_serving::<GrpcInferenceServiceServer<Inference>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
}

/// The gRPC service of one connection: the bearer-token check, then tonic's
/// routes.
pub(crate) struct GrpcService {
    routes: tonic::service::Routes,
    state: Arc<AppState>,
    activity: Arc<Activity>,
}

/// grpcio and most clients list gzip in `grpc-accept-encoding` on every
/// call, and tonic would then compress every answer: for a large tensor,
/// hundreds of milliseconds the client never asked for. Answers are
/// compressed only for a client that compresses its own messages
/// (`grpc-encoding`), as tritonclient's `compression_algorithm` does; for
/// the others the accepted codings are taken off the request before tonic
/// reads them. Triton, too, answers uncompressed unless told otherwise.
fn answer_uncompressed_unless_compressed(headers: &mut hyper::HeaderMap) {
    let compressed = headers
        .get("grpc-encoding")
        .is_some_and(|coding| coding.as_bytes() != b"identity");
    if !compressed {
        headers.remove("grpc-accept-encoding");
    }
}

/// The body of a `ModelInfer` answer made of the model's default outputs:
/// its trailers say so (`wirespeed-default: true`), beside `grpc-status`.
struct DefaultTrailer {
    body: tonic::body::Body,
}

impl hyper::body::Body for DefaultTrailer {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        polled.map(|frame| {
            frame.map(|frame| {
                frame.map(|frame| match frame.into_trailers() {
                    Ok(mut trailers) => {
                        trailers.insert(
                            crate::http::DEFAULT_ANSWER,
                            hyper::header::HeaderValue::from_static("true"),
                        );
                        hyper::body::Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                })
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The health checks among the RPCs, which answer without the token.
fn health_check(path: &str) -> Option<HealthCheck> {
    if path.starts_with("/grpc.health.v1.Health/") {
        return Some(HealthCheck::ServerReady);
    }
    match path {
        "/inference.GRPCInferenceService/ServerLive" => Some(HealthCheck::ServerLive),
        "/inference.GRPCInferenceService/ServerReady" => Some(HealthCheck::ServerReady),
        "/inference.GRPCInferenceService/ModelReady" => Some(HealthCheck::ModelReady),
        _ => None,
    }
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for GrpcService {
    type Response = hyper::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, mut request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        answer_uncompressed_unless_compressed(request.headers_mut());
        let health = health_check(request.uri().path());
        if let Err(e) = self.state.auth.check(request.headers(), health) {
            let response = status(&e).into_http();
            return Box::pin(async move { Ok(response) });
        }
        let routes = self.routes.clone();
        let in_flight = self.activity.begin();
        let access = tracing::enabled!(target: "wirespeed_server::access", tracing::Level::INFO)
            .then(|| (std::time::Instant::now(), request.uri().path().to_owned()));
        Box::pin(async move {
            let response = tower::ServiceExt::oneshot(routes, request).await;
            drop(in_flight);
            if let (Some((started, path)), Ok(response)) = (access, &response) {
                // The access log (`--access-log`): a failed call's status
                // comes in its headers (trailers-only), a success's is OK.
                let status = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0")
                    .to_owned();
                tracing::info!(
                    target: "wirespeed_server::access",
                    protocol = "grpc",
                    path,
                    grpc_status = status,
                    micros = started.elapsed().as_micros() as u64,
                );
            }
            response.map(|r| match r.extensions().get::<infer::DefaultAnswer>() {
                Some(_) => r.map(|body| tonic::body::Body::new(DefaultTrailer { body })),
                None => r,
            })
        })
    }
}
