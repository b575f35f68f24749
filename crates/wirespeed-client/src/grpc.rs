//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`),
//! blocking: tonic's generated client on a runtime of the caller's own
//! thread, so a call is made by the thread that asks, as over HTTP.
//! Tensors go as `raw_input_contents` from their own buffers and come back
//! from `raw_output_contents` (or the typed `contents` some servers use).
//!
//! Answers other than inference are prost messages; [`message_json`]
//! writes any of them as protobuf's JSON mapping (prost-reflect, from the
//! protos' descriptors), as tritonclient's `as_json=True` does.

use std::time::Duration;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use wirespeed_core::raw::from_raw;
use wirespeed_core::{element_count, DataType, InferResponse, Tensor};
use wirespeed_proto::inference as pb;
use wirespeed_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use wirespeed_proto::tensors::{parameters_from_map, parameters_to_map, typed_contents};

use crate::answer::raw_message;
use crate::{Answer, ClientError, InferRequest, InputData};

/// How a gRPC client connects.
#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
    /// The largest message accepted.
    pub max_message: usize,
}

impl Default for GrpcOptions {
    fn default() -> GrpcOptions {
        GrpcOptions {
            connect_timeout: Duration::from_secs(60),
            max_message: i32::MAX as usize,
        }
    }
}

/// A client of one server's V2 gRPC API, on one HTTP/2 connection.
pub struct GrpcClient {
    runtime: tokio::runtime::Runtime,
    client: GrpcInferenceServiceClient<Channel>,
    target: String,
}

impl GrpcClient {
    /// A client of `url`: `host:port` (tritonclient's form), `http://host:port`
    /// or `unix:///path/to.sock`. It connects on its first call.
    pub fn new(url: &str, options: &GrpcOptions) -> Result<GrpcClient, ClientError> {
        let bad = |reason: String| ClientError::Url {
            url: url.to_owned(),
            reason,
        };
        if url.starts_with("https://") || url.starts_with("grpcs://") {
            return Err(bad("TLS is not supported by this client".into()));
        }
        let uri = if url.starts_with("unix:") || url.starts_with("http://") {
            url.to_owned()
        } else {
            format!("http://{}", url.strip_prefix("grpc://").unwrap_or(url))
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Protocol(format!("no runtime for gRPC: {e}")))?;
        let channel = {
            let _entered = runtime.enter();
            endpoint.connect_lazy()
        };
        let client = GrpcInferenceServiceClient::new(channel)
            .max_decoding_message_size(options.max_message)
            .max_encoding_message_size(options.max_message);
        Ok(GrpcClient {
            runtime,
            client,
            target: url.to_owned(),
        })
    }

    /// Runs one call with `headers` as metadata and an optional deadline.
    fn call<M, T, F>(
        &mut self,
        message: M,
        headers: &[(String, String)],
        timeout: Option<Duration>,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: AsyncFnOnce(
            &mut GrpcInferenceServiceClient<Channel>,
            tonic::Request<M>,
        ) -> Result<tonic::Response<T>, tonic::Status>,
    {
        let mut request = tonic::Request::new(message);
        for (name, value) in headers {
            let key = MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| ClientError::Request(format!("{name:?} is not a metadata key")))?;
            let value = MetadataValue::try_from(value.as_str())
                .map_err(|_| ClientError::Request(format!("{value:?} is not a metadata value")))?;
            request.metadata_mut().insert(key, value);
        }
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        let client = &mut self.client;
        let answer = self
            .runtime
            .block_on(async move { call(client, request).await });
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| status_error(&self.target, status))
    }

    /// `ServerLive`.
    pub fn server_live(
        &mut self,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<bool, ClientError> {
        let answer = self.call(pb::ServerLiveRequest {}, headers, timeout, async |c, r| {
            c.server_live(r).await
        })?;
        Ok(answer.live)
    }

    /// `ServerReady`.
    pub fn server_ready(
        &mut self,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<bool, ClientError> {
        let answer = self.call(pb::ServerReadyRequest {}, headers, timeout, async |c, r| {
            c.server_ready(r).await
        })?;
        Ok(answer.ready)
    }

    /// `ModelReady`.
    pub fn model_ready(
        &mut self,
        name: &str,
        version: &str,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<bool, ClientError> {
        let request = pb::ModelReadyRequest {
            name: name.to_owned(),
            version: version.to_owned(),
        };
        let answer = self.call(request, headers, timeout, async |c, r| {
            c.model_ready(r).await
        })?;
        Ok(answer.ready)
    }

    /// `ServerMetadata`.
    pub fn server_metadata(
        &mut self,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<pb::ServerMetadataResponse, ClientError> {
        self.call(
            pb::ServerMetadataRequest {},
            headers,
            timeout,
            async |c, r| c.server_metadata(r).await,
        )
    }

    /// `ModelMetadata`.
    pub fn model_metadata(
        &mut self,
        name: &str,
        version: &str,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<pb::ModelMetadataResponse, ClientError> {
        let request = pb::ModelMetadataRequest {
            name: name.to_owned(),
            version: version.to_owned(),
        };
        self.call(request, headers, timeout, async |c, r| {
            c.model_metadata(r).await
        })
    }

    /// `ModelConfig` (Triton's extension).
    pub fn model_config(
        &mut self,
        name: &str,
        version: &str,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<pb::ModelConfigResponse, ClientError> {
        let request = pb::ModelConfigRequest {
            name: name.to_owned(),
            version: version.to_owned(),
        };
        self.call(request, headers, timeout, async |c, r| {
            c.model_config(r).await
        })
    }

    /// `ModelInfer`: the answer's tensors, and the message itself.
    pub fn infer(
        &mut self,
        model: &str,
        version: &str,
        request: &InferRequest,
        headers: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<(Answer, pb::ModelInferResponse), ClientError> {
        let message = infer_message(model, version, request)?;
        let answer = self.call(message, headers, timeout, async |c, r| {
            c.model_infer(r).await
        })?;
        let decoded = answer_tensors(&answer)?;
        Ok((decoded, answer))
    }
}

fn status_error(target: &str, status: tonic::Status) -> ClientError {
    let code = status.code();
    let message = status.message();
    let message = if message.is_empty() {
        format!("{code:?} from {target}")
    } else {
        message.to_owned()
    };
    ClientError::Status {
        code: code as i32,
        name: grpc_code_name(code),
        message,
    }
}

/// The name tritonclient puts in its exceptions: `StatusCode.NOT_FOUND`.
fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "StatusCode.OK",
        Cancelled => "StatusCode.CANCELLED",
        Unknown => "StatusCode.UNKNOWN",
        InvalidArgument => "StatusCode.INVALID_ARGUMENT",
        DeadlineExceeded => "StatusCode.DEADLINE_EXCEEDED",
        NotFound => "StatusCode.NOT_FOUND",
        AlreadyExists => "StatusCode.ALREADY_EXISTS",
        PermissionDenied => "StatusCode.PERMISSION_DENIED",
        ResourceExhausted => "StatusCode.RESOURCE_EXHAUSTED",
        FailedPrecondition => "StatusCode.FAILED_PRECONDITION",
        Aborted => "StatusCode.ABORTED",
        OutOfRange => "StatusCode.OUT_OF_RANGE",
        Unimplemented => "StatusCode.UNIMPLEMENTED",
        Internal => "StatusCode.INTERNAL",
        Unavailable => "StatusCode.UNAVAILABLE",
        DataLoss => "StatusCode.DATA_LOSS",
        Unauthenticated => "StatusCode.UNAUTHENTICATED",
    }
}

/// The `ModelInferRequest` of `request`: every input's data as
/// `raw_input_contents`.
fn infer_message(
    model: &str,
    version: &str,
    request: &InferRequest,
) -> Result<pb::ModelInferRequest, ClientError> {
    let mut message = pb::ModelInferRequest {
        model_name: model.to_owned(),
        model_version: version.to_owned(),
        id: request.id.clone().unwrap_or_default(),
        parameters: parameters_to_map(&request.parameters),
        ..Default::default()
    };
    for input in &request.inputs {
        match &input.data {
            InputData::Raw(bytes) => message.raw_input_contents.push(bytes.clone()),
            InputData::Json(data) => {
                let mut raw = Vec::with_capacity(wirespeed_core::raw::raw_len(data));
                wirespeed_core::raw::write_raw(data, &mut raw);
                message.raw_input_contents.push(raw.into());
            }
            InputData::Shared { .. } => {}
        }
        let parameters = input.wire_parameters(false);
        message
            .inputs
            .push(pb::model_infer_request::InferInputTensor {
                name: input.name.clone(),
                datatype: input.datatype.as_str().to_owned(),
                shape: input.shape.iter().map(|&d| d as i64).collect(),
                parameters: parameters_to_map(&parameters),
                contents: None,
            });
    }
    if request
        .inputs
        .iter()
        .any(|i| matches!(i.data, InputData::Shared { .. }))
        && !message.raw_input_contents.is_empty()
    {
        return Err(ClientError::Request(
            "over gRPC, inputs in shared memory cannot be mixed with inputs sent in the request"
                .into(),
        ));
    }
    for output in &request.outputs {
        let parameters = output.wire_parameters(false);
        message
            .outputs
            .push(pb::model_infer_request::InferRequestedOutputTensor {
                name: output.name.clone(),
                parameters: parameters_to_map(&parameters),
            });
    }
    Ok(message)
}

/// The tensors of a `ModelInferResponse`: `raw_output_contents[i]` for
/// output `i` when the server sent raw contents, else its typed `contents`.
fn answer_tensors(answer: &pb::ModelInferResponse) -> Result<Answer, ClientError> {
    let bad = |m: String| ClientError::Protocol(format!("the ModelInfer answer: {m}"));
    let mut outputs = Vec::with_capacity(answer.outputs.len());
    for (i, output) in answer.outputs.iter().enumerate() {
        let datatype: DataType =
            output
                .datatype
                .parse()
                .map_err(|e: wirespeed_core::UnknownDataType| {
                    bad(format!("output '{}': {e}", output.name))
                })?;
        let shape = output
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad(format!("output '{}' has a negative dimension", output.name)))?;
        let count = element_count(&shape)
            .ok_or_else(|| bad(format!("output '{}' has too many elements", output.name)))?;
        let data = match (answer.raw_output_contents.get(i), &output.contents) {
            (Some(raw), _) => from_raw(datatype, count, raw, raw.len())
                .map_err(|e| bad(format!("output '{}': {}", output.name, raw_message(e))))?,
            (None, Some(contents)) => typed_contents(
                datatype,
                count,
                contents.clone(),
                &wirespeed_core::RequestLimits::default(),
            )
            .map_err(|e| bad(format!("output '{}': {e}", output.name)))?,
            // An output written to shared memory has no data here.
            (None, None) => wirespeed_core::TensorData::with_capacity(datatype, 0),
        };
        outputs.push(Tensor {
            name: output.name.clone(),
            shape,
            data,
            parameters: Vec::new(),
        });
    }
    let response = InferResponse {
        model_name: answer.model_name.clone(),
        model_version: answer.model_version.clone(),
        id: (!answer.id.is_empty()).then(|| answer.id.clone()),
        parameters: parameters_from_map(answer.parameters.clone()).map_err(bad)?,
        outputs,
        shared_outputs: Vec::new(),
        dialect: Default::default(),
    };
    Ok(Answer {
        binary_outputs: (0..response.outputs.len()).collect(),
        response,
        json: Vec::new(),
    })
}

/// Writes any message of the V2 gRPC API as JSON with the protos' field
/// names. `mapping`: protobuf's JSON mapping, as `MessageToJson(m,
/// preserving_proto_field_name=True)` writes it (tritonclient's
/// `as_json=True`): 64-bit integers as strings, default values left out.
/// Otherwise every field, defaults included, integers as numbers: the
/// message's fields as a program reads them. `name` is the message's full
/// name, as `inference.ModelMetadataResponse`.
pub fn message_json(
    message: &impl Message,
    name: &str,
    mapping: bool,
) -> Result<Vec<u8>, ClientError> {
    let pool = DescriptorPool::decode(wirespeed_proto::FILE_DESCRIPTOR_SET)
        .map_err(|e| ClientError::Protocol(format!("the protos' descriptors: {e}")))?;
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| ClientError::Protocol(format!("no descriptor of {name}")))?;
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .map_err(|e| ClientError::Protocol(format!("{name}: {e}")))?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(mapping)
        .stringify_64_bit_integers(mapping);
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::new(&mut out);
    dynamic
        .serialize_with_options(&mut serializer, &options)
        .map_err(|e| ClientError::Protocol(format!("{name} as JSON: {e}")))?;
    Ok(out)
}
