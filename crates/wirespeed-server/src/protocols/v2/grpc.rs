//! The Open Inference Protocol over gRPC, on tonic: the `inference.
//! GRPCInferenceService` of `proto/grpc_service.proto`, what
//! tritonclient.grpc and KServe clients call.
//!
//! `ModelInfer` and `ModelStreamInfer` are codecs of the one pipeline
//! (`grpc_infer.rs`, converting in `convert.rs`); the other RPCs are
//! Triton's extensions, answered from the serving layer. Errors carry the
//! gRPC code their kind maps to (`ErrorKind::grpc_code`).

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use wirespeed_core::{Error, ErrorKind};
use wirespeed_proto::inference as pb;

use super::grpc_infer as infer;
use super::missing::Missing;
use crate::protocols::grpc::{status, version};
use crate::protocols::Front;

pub(crate) use pb::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};

/// Requests in flight on one ModelStreamInfer stream before reading pauses.
const STREAM_BACKLOG: usize = 16;

fn not_implemented(missing: Missing) -> Status {
    status(&missing.error())
}

pub(crate) struct Inference {
    pub(crate) front: Arc<Front>,
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
            ready: self.front.engine.server_ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let request = request.into_inner();
        // A model or version that is not served is not ready, as Triton
        // answers: clients poll this around a load and read `ready`.
        let ready = match self
            .front
            .engine
            .models
            .get(&request.name, version(&request.version))
        {
            Ok(served) => self.front.engine.model_ready(&served).is_ok(),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ModelNotFound | ErrorKind::VersionNotFound
                ) =>
            {
                false
            }
            Err(e) => return Err(status(&e)),
        };
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: self.front.server_name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: crate::protocols::v2::EXTENSIONS
                .iter()
                .map(|&e| e.to_owned())
                .collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let request = request.into_inner();
        let model = self
            .front
            .engine
            .models
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        if let Some(answer) = &model.metadata_answer {
            // MLServer's or KServe's model: the metadata its server answers.
            let mut answer = metadata_from_json(answer);
            answer.name = model.metadata().name.clone();
            return Ok(Response::new(answer));
        }
        let m = model.metadata();
        let versions = wirespeed_engine::served::versions_named(
            &self.front.engine.models,
            &request.name,
            version(&request.version),
        );
        let specs = |specs: &[wirespeed_core::TensorSpec]| {
            specs
                .iter()
                .filter(|s| model.shows(&s.name))
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
        let (metadata, _, message) = request.into_parts();
        infer::model_infer(&self.front, message.into(), metadata).await
    }

    async fn model_config(
        &self,
        request: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let request = request.into_inner();
        let model = self
            .front
            .engine
            .models
            .get(&request.name, version(&request.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(crate::protocols::v2::model_config::model_config(
                &request.name,
                &model,
            )),
        }))
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let request = request.into_inner();
        let model_stats = wirespeed_engine::counting::select(
            &self.front.engine.models,
            &request.name,
            version(&request.version),
        )
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
            .front
            .engine
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
        self.front
            .engine
            .shared_memory
            .register(&r.name, &r.key, size(r.offset), size(r.byte_size))
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryUnregisterResponse>, Status> {
        self.front
            .engine
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
        Err(status(&wirespeed_engine::regions::cuda_refused()))
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
            .front
            .repository
            .index(ready)
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
        use wirespeed_engine::model_control::LoadValue;
        let load = wirespeed_engine::model_control::load_request(request.parameters.iter().map(
            |(key, value)| {
                let value = match &value.parameter_choice {
                    Some(ParameterChoice::StringParam(text)) => LoadValue::Text(text),
                    Some(ParameterChoice::BytesParam(bytes)) => LoadValue::Bytes(bytes),
                    _ => LoadValue::Other,
                };
                (key.as_str(), value)
            },
        ))
        .map_err(|e| status(&e))?;
        self.front
            .repository
            .load(&request.model_name, load)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        let request = request.into_inner();
        self.front
            .repository
            .unload(&request.model_name)
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
        // The stream's trace context is each of its requests', and so are
        // the headers forwarded into their parameters.
        let trace = crate::protocols::trace_context(request.metadata().as_ref());
        let metadata = if self.front.header_forward.grpc.is_some() {
            request.metadata().clone()
        } else {
            tonic::metadata::MetadataMap::new()
        };
        let mut incoming = request.into_inner();
        let (sender, receiver) = mpsc::channel(STREAM_BACKLOG);
        let front = Arc::clone(&self.front);
        // Each request runs as it is read, as Triton's streams do: a
        // decoupled model's responses to several requests interleave
        // (their ids tell them apart). A request of a sequence
        // (`sequence_id`) is answered before the next is read, so the
        // sequence's requests reach the model in the stream's order. A
        // broken stream (bad framing, too large a message) ends with that
        // status.
        tokio::spawn(async move {
            while let Some(next) = incoming.next().await {
                let message = match next {
                    Ok(message) => message,
                    Err(broken) => {
                        let _ = sender.send(Err(broken)).await;
                        break;
                    }
                };
                let sequenced = message.parameters.contains_key("sequence_id");
                let answering = answer_in_stream(
                    Arc::clone(&front),
                    message,
                    metadata.clone(),
                    trace.clone(),
                    sender.clone(),
                );
                if sequenced {
                    answering.await;
                } else {
                    tokio::spawn(answering);
                }
                if sender.is_closed() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

/// Answers one request of a `ModelStreamInfer` stream into `sender`: one
/// message, or a decoupled model's responses each as it comes. A client
/// that leaves drops them, which cancels the model's request.
async fn answer_in_stream(
    front: Arc<Front>,
    message: pb::ModelInferRequest,
    metadata: tonic::metadata::MetadataMap,
    trace: Option<wirespeed_core::TraceContext>,
    sender: mpsc::Sender<Result<pb::ModelStreamInferResponse, Status>>,
) {
    match infer::stream_infer(&front, message, metadata, trace).await {
        infer::StreamAnswer::One(reply) => {
            let _ = sender.send(Ok(reply)).await;
        }
        infer::StreamAnswer::Failed(status) => {
            let _ = sender.send(Err(status)).await;
        }
        infer::StreamAnswer::Many(mut responses) => loop {
            let reply = tokio::select! {
                reply = responses.next() => reply,
                () = sender.closed() => return,
            };
            let Some(reply) = reply else { break };
            if sender.send(reply).await.is_err() {
                return;
            }
        },
    }
}

/// A model's metadata given as JSON (MLServer's answer, from its settings)
/// as the gRPC message; the protocol's message has no `parameters`.
fn metadata_from_json(answer: &serde_json::Value) -> pb::ModelMetadataResponse {
    let text = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let tensors = |key: &str| {
        answer
            .get(key)
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| pb::model_metadata_response::TensorMetadata {
                name: text(t, "name"),
                datatype: text(t, "datatype"),
                shape: t
                    .get("shape")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_i64)
                    .collect(),
            })
            .collect()
    };
    pb::ModelMetadataResponse {
        name: text(answer, "name"),
        versions: answer
            .get("versions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        platform: text(answer, "platform"),
        inputs: tensors("inputs"),
        outputs: tensors("outputs"),
    }
}
