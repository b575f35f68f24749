//! The Open Inference Protocol (KServe V2) over gRPC, as a client: its
//! health, metadata and repository calls, and `ModelInfer` with tensors
//! sent from their own buffers and answers checked before they are used.

use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::header::HeaderMap;
use prost::Message;
use wirespeed_core::raw::{from_raw, into_raw};
use wirespeed_core::{
    element_count, DataType, Parameters, RequestLimits, Tensor, TensorSpec, TraceContext,
};
use wirespeed_proto::inference as pb;
use wirespeed_proto::tensors::{parameters_to_map, typed_contents};

use crate::address::Protocol;
use crate::body::Chunks;
use crate::channel::Channel;
use crate::error::CallError;
use crate::grpc::{self, frame, Call};
use crate::upstream::{Upstream, UpstreamError};

const SERVICE: &str = "/inference.GRPCInferenceService/";
/// MLServer keeps its repository index in a service of its own, with the
/// same messages as Triton's.
const MLSERVER_REPOSITORY: &str =
    "/inference.model_repository.ModelRepositoryService/RepositoryIndex";

/// Asks one replica whether it is live (its probe).
pub(crate) async fn live(
    channel: &Channel,
    headers: &HeaderMap,
    deadline: Instant,
) -> Result<(), CallError> {
    let path = format!("{SERVICE}ServerLive");
    let message = grpc::unary(
        channel,
        Call {
            path: &path,
            body: Chunks::new([frame(&pb::ServerLiveRequest {})]),
            deadline: Some(deadline),
            headers,
            trace: None,
            max_message: 1 << 16,
        },
    )
    .await?;
    let answer = pb::ServerLiveResponse::decode(message)
        .map_err(|e| CallError::Protocol(format!("ServerLive's answer does not decode: {e}")))?;
    if answer.live {
        Ok(())
    } else {
        Err(CallError::Status {
            code: 14,
            message: "the server says it is not live".to_owned(),
        })
    }
}

/// The Open Inference Protocol on an upstream server: over gRPC, or over
/// REST (`rest.rs`) when its URLs say `http`.
pub struct V2Client {
    upstream: Arc<Upstream>,
    /// Whether a REST upstream takes the binary tensor data extension,
    /// once its `GET /v2` has said.
    binary: std::sync::OnceLock<bool>,
}

/// The `ModelInfer` call wirespeed makes for one request.
pub struct InferCall<'a> {
    /// The model's name on the upstream.
    pub model: &'a str,
    /// Its version there; empty for the upstream's choice.
    pub version: &'a str,
    /// The inputs, sent as `raw_input_contents` from their own buffers.
    pub inputs: Vec<Tensor>,
    /// The outputs to ask for, by their specs (name, datatype, shape):
    /// the answer must hold exactly these, fitting their specs.
    pub outputs: Vec<&'a TensorSpec>,
    /// The request's parameters, passed on.
    pub parameters: &'a Parameters,
    /// When the client stops waiting.
    pub deadline: Option<Instant>,
    /// The request's trace context, sent on as `traceparent` and
    /// `tracestate`.
    pub trace: Option<&'a TraceContext>,
}

impl V2Client {
    /// A client of the V2 gRPC API of `upstream`.
    pub fn new(upstream: Arc<Upstream>) -> V2Client {
        V2Client {
            upstream,
            binary: std::sync::OnceLock::new(),
        }
    }

    fn rest_mode(&self) -> bool {
        self.upstream.protocol() == Protocol::Http
    }

    fn protocol_error(&self, error: CallError) -> UpstreamError {
        UpstreamError {
            upstream: self.upstream.describe().to_owned(),
            error,
        }
    }

    /// A REST `GET` of `path`; its body.
    async fn rest_get(
        &self,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<Bytes, UpstreamError> {
        let answer = self
            .upstream
            .rest(
                hyper::Method::GET,
                path,
                Chunks::default(),
                &self.upstream.options().headers,
                deadline,
            )
            .await?;
        Ok(answer.body)
    }

    /// Whether the REST upstream takes binary tensors (`GET /v2` lists the
    /// extension); asked once.
    async fn rest_binary(&self, deadline: Option<Instant>) -> Result<bool, UpstreamError> {
        if let Some(&binary) = self.binary.get() {
            return Ok(binary);
        }
        let body = self.rest_get("/v2", deadline).await?;
        let binary = crate::rest::speaks_binary(&body);
        let _ = self.binary.set(binary);
        Ok(binary)
    }

    /// The upstream it calls.
    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &str,
        request: &Req,
        deadline: Option<Instant>,
    ) -> Result<Resp, UpstreamError> {
        let path = format!("{SERVICE}{method}");
        self.call_path(&path, request, deadline).await
    }

    async fn call_path<Req: Message, Resp: Message + Default>(
        &self,
        path: &str,
        request: &Req,
        deadline: Option<Instant>,
    ) -> Result<Resp, UpstreamError> {
        let message = self
            .upstream
            .grpc(path, Chunks::new([frame(request)]), deadline, None)
            .await?;
        Resp::decode(message).map_err(|e| UpstreamError {
            upstream: self.upstream.describe().to_owned(),
            error: CallError::Protocol(format!("the answer to {path} does not decode: {e}")),
        })
    }

    /// The model's metadata.
    pub async fn model_metadata(
        &self,
        model: &str,
        version: &str,
        deadline: Option<Instant>,
    ) -> Result<pb::ModelMetadataResponse, UpstreamError> {
        if self.rest_mode() {
            let body = self
                .rest_get(&rest_path(model, version, ""), deadline)
                .await?;
            self.rest_binary(deadline).await?;
            return crate::rest::metadata_from_json(&body).map_err(|e| self.protocol_error(e));
        }
        let request = pb::ModelMetadataRequest {
            name: model.to_owned(),
            version: version.to_owned(),
        };
        self.call("ModelMetadata", &request, deadline).await
    }

    /// Whether the model is ready.
    pub async fn model_ready(
        &self,
        model: &str,
        version: &str,
        deadline: Option<Instant>,
    ) -> Result<bool, UpstreamError> {
        if self.rest_mode() {
            return match self
                .rest_get(&rest_path(model, version, "/ready"), deadline)
                .await
            {
                Ok(_) => Ok(true),
                Err(e) if matches!(e.error, CallError::Status { code: 14, .. }) => Ok(false),
                Err(e) => Err(e),
            };
        }
        let request = pb::ModelReadyRequest {
            name: model.to_owned(),
            version: version.to_owned(),
        };
        let answer: pb::ModelReadyResponse = self.call("ModelReady", &request, deadline).await?;
        Ok(answer.ready)
    }

    /// The names of the models the upstream lists: Triton's
    /// `RepositoryIndex`, or MLServer's where Triton's is not implemented.
    /// `Ok(None)` when the upstream has neither (KServe's model server).
    pub async fn repository_index(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<String>>, UpstreamError> {
        if self.rest_mode() {
            #[derive(serde::Deserialize)]
            struct Entry {
                name: String,
            }
            let answer = self
                .upstream
                .rest(
                    hyper::Method::POST,
                    "/v2/repository/index",
                    Chunks::new([Bytes::from_static(b"{}")]),
                    &self.upstream.options().headers,
                    deadline,
                )
                .await;
            return match answer {
                Ok(answer) => {
                    let entries: Vec<Entry> =
                        serde_json::from_slice(&answer.body).map_err(|e| {
                            self.protocol_error(CallError::Protocol(format!(
                                "the repository index is not V2 JSON: {e}"
                            )))
                        })?;
                    let mut names: Vec<String> = entries.into_iter().map(|e| e.name).collect();
                    names.sort();
                    names.dedup();
                    Ok(Some(names))
                }
                Err(e) if matches!(e.error, CallError::Status { code: 5 | 12, .. }) => Ok(None),
                Err(e) => Err(e),
            };
        }
        let request = pb::RepositoryIndexRequest::default();
        let mut answer: Result<pb::RepositoryIndexResponse, UpstreamError> =
            self.call("RepositoryIndex", &request, deadline).await;
        if matches!(&answer, Err(e) if matches!(e.error, CallError::Status { code: 12, .. })) {
            answer = self
                .call_path(MLSERVER_REPOSITORY, &request, deadline)
                .await;
        }
        match answer {
            Ok(index) => {
                let mut names: Vec<String> = index.models.into_iter().map(|m| m.name).collect();
                names.sort();
                names.dedup();
                Ok(Some(names))
            }
            Err(e) if matches!(e.error, CallError::Status { code: 12, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs `call` on the upstream and returns its outputs, in the order
    /// asked for.
    pub async fn infer(&self, call: InferCall<'_>) -> Result<Vec<Tensor>, UpstreamError> {
        if self.rest_mode() {
            return self.infer_rest(call).await;
        }
        let outputs = call.outputs;
        let body = infer_body(
            call.model,
            call.version,
            call.inputs,
            &outputs,
            call.parameters,
        )
        .map_err(|e| UpstreamError {
            upstream: self.upstream.describe().to_owned(),
            error: e,
        })?;
        let path = format!("{SERVICE}ModelInfer");
        let message = self
            .upstream
            .grpc(&path, body, call.deadline, call.trace)
            .await?;
        let protocol_error = |error| UpstreamError {
            upstream: self.upstream.describe().to_owned(),
            error,
        };
        let answer = pb::ModelInferResponse::decode(message).map_err(|e| {
            protocol_error(CallError::Protocol(format!(
                "the ModelInfer answer does not decode: {e}"
            )))
        })?;
        answer_outputs(answer, &outputs, self.upstream.options().max_message_bytes)
            .map_err(|m| protocol_error(CallError::Protocol(m)))
    }
}

impl V2Client {
    /// `infer` over REST: binary tensors when the upstream takes them,
    /// JSON otherwise.
    async fn infer_rest(&self, call: InferCall<'_>) -> Result<Vec<Tensor>, UpstreamError> {
        let binary = self.rest_binary(call.deadline).await?;
        let names: Vec<&str> = call.outputs.iter().map(|s| s.name.as_str()).collect();
        let (body, header_len) =
            crate::rest::infer_body(call.inputs, &names, call.parameters, binary);
        let mut headers = crate::rest::infer_headers(&self.upstream.options().headers, header_len);
        if let Some(trace) = call.trace {
            crate::rest::trace_headers(&mut headers, trace);
        }
        let path = rest_path(call.model, call.version, "/infer");
        let answer = self
            .upstream
            .rest(hyper::Method::POST, &path, body, &headers, call.deadline)
            .await?;
        let max = self.upstream.options().max_message_bytes;
        let message = crate::rest::answer_from_rest(&answer, max)
            .map_err(|m| self.protocol_error(CallError::Protocol(m)))?;
        answer_outputs(message, &call.outputs, max)
            .map_err(|m| self.protocol_error(CallError::Protocol(m)))
    }
}

/// `/v2/models/{model}[/versions/{version}]{tail}`.
fn rest_path(model: &str, version: &str, tail: &str) -> String {
    if version.is_empty() {
        format!("/v2/models/{model}{tail}")
    } else {
        format!("/v2/models/{model}/versions/{version}{tail}")
    }
}

/// The `raw_input_contents` field, numbered 7 in `ModelInferRequest`, as
/// a length-delimited field's tag.
const RAW_INPUT_TAG: u8 = (7 << 3) | 2;

/// The framed `ModelInferRequest`: the message's other fields encoded by
/// prost, then each input's raw contents as a field of its own, whose bytes
/// are the tensor's buffer. Protobuf takes fields in any order, so this is
/// the message prost would write, without copying a tensor.
fn infer_body(
    model: &str,
    version: &str,
    inputs: Vec<Tensor>,
    outputs: &[&TensorSpec],
    parameters: &Parameters,
) -> Result<Chunks, CallError> {
    let mut raw = Vec::with_capacity(inputs.len());
    let mut specs = Vec::with_capacity(inputs.len());
    for tensor in inputs {
        specs.push(pb::model_infer_request::InferInputTensor {
            name: tensor.name,
            datatype: tensor.data.datatype().as_str().to_owned(),
            shape: tensor.shape.iter().map(|&d| d as i64).collect(),
            parameters: Default::default(),
            contents: None,
        });
        raw.push(into_raw(tensor.data));
    }
    let head = pb::ModelInferRequest {
        model_name: model.to_owned(),
        model_version: version.to_owned(),
        id: String::new(),
        parameters: parameters_to_map(parameters),
        inputs: specs,
        outputs: outputs
            .iter()
            .map(|spec| pb::model_infer_request::InferRequestedOutputTensor {
                name: spec.name.clone(),
                parameters: Default::default(),
            })
            .collect(),
        raw_input_contents: Vec::new(),
    };
    let head_len = head.encoded_len();
    let raw_total: usize = raw
        .iter()
        .map(|r| 1 + prost::encoding::encoded_len_varint(r.len() as u64) + r.len())
        .sum();
    let total = u32::try_from(head_len + raw_total).map_err(|_| {
        CallError::Protocol(format!(
            "the request would be a message of {} bytes; gRPC's limit is 4 GiB",
            head_len + raw_total
        ))
    })?;
    let mut pending = BytesMut::with_capacity(5 + head_len + 16 * raw.len());
    pending.put_u8(0);
    pending.put_u32(total);
    head.encode(&mut pending)
        .expect("the buffer has the message's length");
    let mut parts = Vec::with_capacity(2 * raw.len() + 1);
    for contents in raw {
        pending.put_u8(RAW_INPUT_TAG);
        prost::encoding::encode_varint(contents.len() as u64, &mut pending);
        parts.push(pending.split().freeze());
        parts.push(contents);
    }
    parts.push(pending.freeze());
    Ok(Chunks::new(parts))
}

/// The answer's outputs as tensors, in the order of `wanted`: each must be
/// there once, of its spec's datatype, with a shape that fits it and data
/// (raw or typed contents) of exactly that size. With nothing `wanted` (a
/// model that declares no outputs), every output the upstream gives, in
/// its order, each with data of exactly its shape's size.
fn answer_outputs(
    answer: pb::ModelInferResponse,
    wanted: &[&TensorSpec],
    max_bytes: usize,
) -> Result<Vec<Tensor>, String> {
    let limits = RequestLimits {
        max_elements: max_bytes,
        max_tensor_bytes: max_bytes.saturating_mul(2),
        max_string_bytes: max_bytes,
        ..RequestLimits::default()
    };
    let raw = answer.raw_output_contents;
    if !raw.is_empty() && raw.len() != answer.outputs.len() {
        return Err(format!(
            "{} raw_output_contents for {} outputs",
            raw.len(),
            answer.outputs.len()
        ));
    }
    let mut raw = raw.into_iter();
    let open = wanted.is_empty();
    let mut given = Vec::new();
    let mut found: Vec<Option<Tensor>> = vec![None; wanted.len()];
    for output in answer.outputs {
        let name = output.name;
        let datatype: DataType = output
            .datatype
            .parse()
            .map_err(|e| format!("output '{name}': {e}"))?;
        let slot = wanted.iter().position(|spec| spec.name == name);
        if slot.is_none() && !open {
            return Err(format!("an output '{name}', which was not asked for"));
        }
        let shape = output
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| format!("output '{name}' with shape {:?}", output.shape))?;
        if let Some(spec) = slot.map(|i| wanted[i]) {
            if datatype != spec.datatype {
                return Err(format!(
                    "output '{name}' as {datatype}, where the model's metadata says {}",
                    spec.datatype
                ));
            }
            if !spec.accepts_shape(&shape) {
                return Err(format!(
                    "output '{name}' with shape {}, where the model's metadata says {}",
                    wirespeed_core::format_shape(&shape),
                    spec.shape_display()
                ));
            }
        }
        let twice = match slot {
            Some(i) => found[i].is_some(),
            None => given.iter().any(|t: &Tensor| t.name == name),
        };
        if twice {
            return Err(format!("output '{name}' twice"));
        }
        let data = output_data(
            &name,
            datatype,
            &shape,
            raw.next(),
            output.contents,
            max_bytes,
            &limits,
        )?;
        let tensor = Tensor {
            name,
            shape,
            data,
            parameters: Vec::new(),
        };
        match slot {
            Some(i) => found[i] = Some(tensor),
            None => given.push(tensor),
        }
    }
    if open {
        return Ok(given);
    }
    found
        .into_iter()
        .zip(wanted)
        .map(|(tensor, spec)| {
            tensor.ok_or_else(|| format!("no output '{}', which was asked for", spec.name))
        })
        .collect()
}

/// One output's data, from its raw bytes or its typed contents, of exactly
/// `shape`'s size.
fn output_data(
    name: &str,
    datatype: DataType,
    shape: &[usize],
    raw: Option<Bytes>,
    contents: Option<pb::InferTensorContents>,
    max_bytes: usize,
    limits: &RequestLimits,
) -> Result<wirespeed_core::TensorData, String> {
    let count = element_count(shape)
        .ok_or_else(|| format!("output '{name}' with a shape too large to count"))?;
    // MLServer sends an empty `contents` beside the raw ones.
    match (raw, contents.filter(holds_values)) {
        (Some(bytes), None) => from_raw(datatype, count, &bytes, max_bytes)
            .map_err(|e| format!("output '{name}': {e}")),
        (Some(_), Some(_)) => Err(format!("output '{name}' with both raw and typed contents")),
        (None, Some(contents)) => typed_contents(datatype, count, contents, limits)
            .map_err(|e| format!("output '{name}' {e}")),
        (None, None) => Err(format!("output '{name}' with no data")),
    }
}

/// Whether typed contents hold any value.
fn holds_values(c: &pb::InferTensorContents) -> bool {
    !(c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_core::TensorData;

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            optional: false,
            name: name.into(),
            datatype,
            shape,
        }
    }

    #[test]
    fn the_body_is_the_message_prost_would_write() {
        use http_body_util::BodyExt;
        let inputs = vec![
            Tensor {
                name: "x".into(),
                shape: vec![2, 2],
                data: TensorData::Fp32(vec![1.0, 2.0, 3.0, 4.0]),
                parameters: Vec::new(),
            },
            Tensor {
                name: "s".into(),
                shape: vec![1],
                data: TensorData::Bytes(vec![b"hi".to_vec()]),
                parameters: Vec::new(),
            },
        ];
        let y = spec("y", DataType::Fp32, vec![-1]);
        let parameters = vec![("k".to_owned(), wirespeed_core::ParameterValue::Int(3))];
        let body = infer_body("m", "2", inputs, &[&y], &parameters).unwrap();
        let bytes = futures_collect(body.collect());
        let bytes = bytes.unwrap().to_bytes();
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(bytes[0], 0);
        assert_eq!(len, bytes.len() - 5);
        let message = pb::ModelInferRequest::decode(&bytes[5..]).unwrap();
        assert_eq!(message.model_name, "m");
        assert_eq!(message.model_version, "2");
        assert_eq!(message.inputs[0].shape, vec![2, 2]);
        assert_eq!(message.outputs[0].name, "y");
        assert_eq!(message.raw_input_contents.len(), 2);
        assert_eq!(&message.raw_input_contents[0][..4], &1f32.to_le_bytes());
        assert_eq!(&message.raw_input_contents[1][..], b"\x02\0\0\0hi");
        assert!(message.parameters.contains_key("k"));
    }

    fn futures_collect<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn answer(outputs: Vec<(&str, &str, Vec<i64>)>, raw: Vec<Vec<u8>>) -> pb::ModelInferResponse {
        pb::ModelInferResponse {
            outputs: outputs
                .into_iter()
                .map(
                    |(name, datatype, shape)| pb::model_infer_response::InferOutputTensor {
                        name: name.into(),
                        datatype: datatype.into(),
                        shape,
                        ..Default::default()
                    },
                )
                .collect(),
            raw_output_contents: raw.into_iter().map(Bytes::from).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn answers_become_tensors_in_the_order_asked() {
        let a = spec("a", DataType::Int64, vec![-1]);
        let b = spec("b", DataType::Bool, vec![2]);
        let got = answer_outputs(
            answer(
                vec![("b", "BOOL", vec![2]), ("a", "INT64", vec![1])],
                vec![vec![1, 0], 7i64.to_le_bytes().to_vec()],
            ),
            &[&a, &b],
            1 << 20,
        )
        .unwrap();
        assert_eq!(got[0].data, TensorData::Int64(vec![7]));
        assert_eq!(got[1].data, TensorData::Bool(vec![true, false]));
    }

    #[test]
    fn wrong_answers_are_named() {
        let a = spec("a", DataType::Fp32, vec![-1]);
        for (outputs, raw, says) in [
            (
                vec![("a", "FP32", vec![2])],
                vec![vec![0; 4]],
                "take 8 bytes",
            ),
            (vec![("a", "FP64", vec![1])], vec![vec![0; 8]], "says FP32"),
            (
                vec![("z", "FP32", vec![1])],
                vec![vec![0; 4]],
                "not asked for",
            ),
            (
                vec![("a", "FP32", vec![1, 1])],
                vec![vec![0; 4]],
                "with shape [1, 1]",
            ),
            (vec![], vec![], "no output 'a'"),
            (vec![("a", "FP32", vec![1 << 40])], vec![vec![0; 4]], "take"),
        ] {
            let e = answer_outputs(answer(outputs, raw), &[&a], 1 << 20).unwrap_err();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    /// A model that declares no outputs takes every output the upstream
    /// gives, in its order, each still held to its shape's size.
    #[test]
    fn with_nothing_wanted_every_output_is_taken() {
        let got = answer_outputs(
            answer(
                vec![("y", "FP32", vec![2]), ("n", "INT64", vec![1])],
                vec![
                    [1.5f32, 2.5].iter().flat_map(|v| v.to_le_bytes()).collect(),
                    7i64.to_le_bytes().to_vec(),
                ],
            ),
            &[],
            1 << 20,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].name.as_str(), &got[0].data),
            ("y", &TensorData::Fp32(vec![1.5, 2.5]))
        );
        assert_eq!(
            (got[1].name.as_str(), &got[1].data),
            ("n", &TensorData::Int64(vec![7]))
        );
        let short = answer(vec![("y", "FP32", vec![3])], vec![vec![0; 8]]);
        assert!(answer_outputs(short, &[], 1 << 20).is_err());
    }
}
