//! The Open Inference Protocol over gRPC, on tonic: the `inference.
//! GRPCInferenceService` of `proto/grpc_service.proto` (what tritonclient.grpc
//! and KServe clients call), the standard health service, and reflection so
//! that `grpcurl` can list and call it.
//!
//! Requests are converted to wirespeed's own types in `convert`, run by the
//! same `compute::run` as REST, and answered with raw output bytes. Errors
//! carry the gRPC code their kind maps to (`ErrorKind::grpc_code`).

mod convert;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;
use tonic::{Code, Request, Response, Status, Streaming};
use wirespeed_core::{Error, Model};

use crate::{compute, AppState};

/// The messages, client and service generated from `proto/grpc_service.proto`.
pub mod pb {
    #![allow(missing_docs, unreachable_pub, clippy::all)]
    tonic::include_proto!("inference");
}

use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};

/// The encoded descriptors of `proto/grpc_service.proto`, for reflection.
const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/grpc_service_descriptor.bin"));

/// Raw input bytes above this are converted on the blocking pool: copying
/// them takes long enough to hold up other requests on the async worker.
const OFFLOAD_RAW_BYTES: usize = 1 << 20;

/// HTTP/2 flow-control windows. h2's default of 64 KiB makes a large
/// tensor wait for a WINDOW_UPDATE round trip every 64 KiB; these let a
/// few MiB arrive at once (and bound what one connection can buffer).
const STREAM_WINDOW_BYTES: u32 = 4 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 8 << 20;

/// The largest HTTP/2 frame clients may send: 512 KiB rather than h2's
/// 16 KiB, so a large tensor arrives in a few frames rather than hundreds.
const MAX_FRAME_BYTES: u32 = 512 << 10;

/// Requests in flight on one ModelStreamInfer stream before reading pauses.
const STREAM_BACKLOG: usize = 16;

/// The gRPC status for `error`. Server errors are logged here in full and
/// reach the client only as a generic message.
fn status(error: &Error) -> Status {
    let kind = error.kind();
    if !kind.is_client_error() {
        tracing::error!(error = %error, "gRPC request failed");
    }
    Status::new(Code::from_i32(kind.grpc_code()), error.public_message())
}

/// The protocol's empty version means the served one.
fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

struct Inference {
    state: Arc<AppState>,
}

impl Inference {
    async fn infer(&self, message: pb::ModelInferRequest) -> Result<pb::ModelInferResponse, Error> {
        let model: Arc<dyn Model> = Arc::clone(
            self.state
                .repository
                .get(&message.model_name, version(&message.model_version))?,
        );
        let requested_version = message.model_version.clone();
        let raw_bytes: usize = message.raw_input_contents.iter().map(|b| b.len()).sum();
        let request = if raw_bytes > OFFLOAD_RAW_BYTES {
            let options = self.state.decode_options.clone();
            tokio::task::spawn_blocking(move || convert::request(message, &options))
                .await
                .map_err(|e| Error::internal(format!("conversion task failed: {e}")))??
        } else {
            convert::request(message, &self.state.decode_options)?
        };
        let outputs = compute::run(&model, request.inputs, &request.outputs).await?;
        let metadata = model.metadata();
        let served = version(&requested_version).unwrap_or(&metadata.versions[0]);
        Ok(convert::response(
            &metadata.name,
            served,
            request.id,
            outputs,
        ))
    }

    fn ready(&self) -> bool {
        self.state.ready.load(Ordering::Acquire)
    }
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
            ready: self.ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let request = request.into_inner();
        self.state
            .repository
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::ModelReadyResponse {
            ready: self.ready(),
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
            .repository
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        let m = model.metadata();
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
            versions: m.versions.clone(),
            platform: m.platform.clone(),
            inputs: specs(&m.inputs),
            outputs: specs(&m.outputs),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        self.infer(request.into_inner())
            .await
            .map(Response::new)
            .map_err(|e| status(&e))
    }

    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let mut incoming = request.into_inner();
        let (sender, receiver) = mpsc::channel(STREAM_BACKLOG);
        let service = Inference {
            state: Arc::clone(&self.state),
        };
        // Requests are answered one at a time, in order. A failed request
        // gets its error in `error_message` and the stream goes on, as
        // Triton does; a broken stream (bad framing, too large a message)
        // ends it with that status.
        tokio::spawn(async move {
            while let Some(next) = incoming.next().await {
                let reply = match next {
                    Ok(message) => {
                        let id = message.id.clone();
                        match service.infer(message).await {
                            Ok(response) => Ok(pb::ModelStreamInferResponse {
                                error_message: String::new(),
                                infer_response: Some(response),
                            }),
                            Err(e) => {
                                let _ = status(&e);
                                Ok(pb::ModelStreamInferResponse {
                                    error_message: e.public_message().to_owned(),
                                    infer_response: Some(pb::ModelInferResponse {
                                        id,
                                        ..Default::default()
                                    }),
                                })
                            }
                        }
                    }
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

/// Serves the gRPC services on the connections `incoming` yields until
/// `shutdown` resolves; then reports NOT_SERVING, stops accepting, and
/// waits up to `drain` for open calls.
pub(crate) async fn serve<I, IO, IE>(
    incoming: I,
    state: Arc<AppState>,
    max_message_bytes: usize,
    drain: Duration,
    shutdown: impl Future<Output = ()>,
) where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<GrpcInferenceServiceServer<Inference>>()
        .await;
    let descriptors = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    // grpcurl and other tools speak either version of reflection.
    let v1 = descriptors()
        .build_v1()
        .expect("the bundled descriptors are valid");
    let v1alpha = descriptors()
        .build_v1alpha()
        .expect("the bundled descriptors are valid");
    let inference = GrpcInferenceServiceServer::new(Inference { state })
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(usize::MAX);

    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    let signal = async move {
        shutdown.await;
        health
            .set_not_serving::<GrpcInferenceServiceServer<Inference>>()
            .await;
        health
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        let _ = stopping_tx.send(true);
    };
    let server = tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .add_service(health_service)
        .add_service(v1)
        .add_service(v1alpha)
        .add_service(inference)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);
    let deadline = async {
        let _ = stopping.wait_for(|&stop| stop).await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        result = &mut server => {
            if let Err(e) = result {
                tracing::error!(error = %e, "the gRPC server stopped");
            }
        }
        () = deadline => tracing::warn!("gRPC drain deadline passed; closing remaining calls"),
    }
}
