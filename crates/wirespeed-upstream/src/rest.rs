//! The Open Inference Protocol's REST API as a client, for upstreams that
//! speak no gRPC (BentoML, TorchServe's KServe mode, hand-written Flask or
//! FastAPI services).
//!
//! HTTP/1.1 connections are kept per thread and per replica, idle ones
//! reused (one request at a time on each, as HTTP/1.1 has it). Requests
//! use Triton's binary tensor data extension when the upstream lists it in
//! `GET /v2` (a JSON header, then each tensor's own buffer), and JSON
//! written by wirespeed's encoder otherwise. Answers are read within the
//! size limit, binary outputs sliced from the body, JSON ones decoded by
//! wirespeed's own decoder (rounded once), and then checked like a gRPC
//! answer.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_rustls::TlsConnector;
use wirespeed_core::raw::write_raw;
use wirespeed_core::TraceContext;
use wirespeed_proto::inference as pb;

use crate::address::Address;
use crate::body::Chunks;
use crate::channel::ChannelOptions;
use crate::connect::connect;
use crate::error::CallError;

/// The `user-agent` of every request.
const AGENT: &str = concat!("wirespeed/", env!("CARGO_PKG_VERSION"));

/// Triton's header that says how much of a body is JSON.
pub(crate) const HEADER_LENGTH: &str = "inference-header-content-length";

/// Idle connections a thread keeps to one replica.
const MAX_IDLE: usize = 32;

thread_local! {
    /// This thread's idle connections, by replica.
    static IDLE: RefCell<HashMap<u64, Vec<http1::SendRequest<Chunks>>>> = RefCell::new(HashMap::new());
}

static IDS: AtomicU64 = AtomicU64::new(1);

/// The HTTP/1.1 connections of one replica.
pub(crate) struct Http1Channel {
    id: u64,
    address: Address,
    tls: Option<TlsConnector>,
    options: ChannelOptions,
}

impl Drop for Http1Channel {
    fn drop(&mut self) {
        let id = self.id;
        let _ = IDLE.try_with(|idle| idle.borrow_mut().remove(&id));
    }
}

/// An answer: its status, headers and whole body.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Http1Channel {
    pub(crate) fn new(
        address: Address,
        tls: Option<TlsConnector>,
        options: ChannelOptions,
    ) -> Http1Channel {
        Http1Channel {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            address,
            tls,
            options,
        }
    }

    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    async fn open(&self) -> Result<http1::SendRequest<Chunks>, CallError> {
        let stream = connect(
            &self.address,
            self.tls.as_ref(),
            self.options.connect_timeout,
        )
        .await
        .map_err(|e| CallError::Unreached(e.to_string()))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| CallError::Unreached(format!("the HTTP/1.1 handshake failed: {e}")))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Sends one request and reads the whole answer, at most `max` bytes
    /// of body, before `deadline`.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Chunks,
        headers: &HeaderMap,
        deadline: Option<Instant>,
        max: usize,
    ) -> Result<Answer, CallError> {
        let exchange = async {
            let opened = self.open_exchange(method, path, body, headers).await?;
            opened.whole(max).await
        };
        within(deadline, exchange).await
    }

    /// Sends one request and returns once the answer's head is in, before
    /// `deadline`; its body is read from the [`Opened`] as it arrives.
    pub(crate) async fn begin(
        &self,
        method: Method,
        path: &str,
        body: Chunks,
        headers: &HeaderMap,
        deadline: Option<Instant>,
    ) -> Result<Opened, CallError> {
        within(deadline, self.open_exchange(method, path, body, headers)).await
    }

    async fn open_exchange(
        &self,
        method: Method,
        path: &str,
        body: Chunks,
        headers: &HeaderMap,
    ) -> Result<Opened, CallError> {
        let mut sender = loop {
            let idle = IDLE.with(|idle| {
                let mut idle = idle.borrow_mut();
                let list = idle.entry(self.id).or_default();
                while let Some(sender) = list.pop() {
                    if !sender.is_closed() {
                        return Some(sender);
                    }
                }
                None
            });
            match idle {
                // A kept connection the server has closed meanwhile is
                // let go, not counted against the replica.
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        break sender;
                    }
                }
                None => break self.open().await?,
            }
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.address.authority())
            .header(USER_AGENT, AGENT)
            .header(CONTENT_LENGTH, body.len())
            .body(body)
            .map_err(|e| CallError::Protocol(format!("cannot make the request: {e}")))?;
        for (name, value) in headers {
            request.headers_mut().insert(name, value.clone());
        }
        let response = sender
            .try_send_request(request)
            .await
            .map_err(CallError::from_send)?;
        let (parts, body) = response.into_parts();
        Ok(Opened {
            status: parts.status,
            headers: parts.headers,
            body,
            sender: Some(sender),
            channel: self.id,
        })
    }
}

/// `exchange`, cut at `deadline`.
async fn within<T>(
    deadline: Option<Instant>,
    exchange: impl std::future::Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline.into(), exchange)
            .await
            .unwrap_or(Err(CallError::Deadline)),
        None => exchange.await,
    }
}

/// An answer whose head is in and whose body is still arriving.
pub(crate) struct Opened {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    body: Incoming,
    /// The connection, kept for another request once the body has been
    /// read to its end (dropped with an answer left unread: its
    /// connection closes, which tells the upstream the caller left).
    sender: Option<http1::SendRequest<Chunks>>,
    /// The [`Http1Channel`] it belongs to.
    channel: u64,
}

impl Opened {
    /// The body's next piece; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, CallError> {
        loop {
            match self.body.frame().await {
                None => {
                    self.keep();
                    return Ok(None);
                }
                Some(Err(e)) => return Err(CallError::Broken(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Ok(Some(data));
                        }
                    }
                }
            }
        }
    }

    /// The whole answer, at most `max` bytes of body.
    pub(crate) async fn whole(mut self, max: usize) -> Result<Answer, CallError> {
        let declared = self
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|&n| n > max as u64) {
            return Err(CallError::Protocol(format!(
                "a body of {n} bytes, over the limit of {max} bytes"
            )));
        }
        let mut body = bytes::BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
        while let Some(data) = self.chunk().await? {
            if body.len() + data.len() > max {
                return Err(CallError::Protocol(format!(
                    "a body over the limit of {max} bytes"
                )));
            }
            body.extend_from_slice(&data);
        }
        Ok(Answer {
            status: self.status,
            headers: std::mem::take(&mut self.headers),
            body: body.freeze(),
        })
    }

    /// Keeps the connection for another request.
    fn keep(&mut self) {
        let Some(sender) = self.sender.take().filter(|s| !s.is_closed()) else {
            return;
        };
        let _ = IDLE.try_with(|idle| {
            let mut idle = idle.borrow_mut();
            let list = idle.entry(self.channel).or_default();
            if list.len() < MAX_IDLE {
                list.push(sender);
            }
        });
    }
}

/// A REST error answer as the gRPC status it means, with the upstream's
/// own `{"error": ...}` text.
pub(crate) fn status_error(answer: &Answer) -> CallError {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    let message = serde_json::from_slice::<ErrorBody>(&answer.body)
        .map(|e| e.error)
        .unwrap_or_else(|_| {
            String::from_utf8_lossy(&answer.body[..answer.body.len().min(512)]).into_owned()
        });
    CallError::Status {
        code: grpc_code(answer.status),
        message: format!("HTTP {}: {message}", answer.status.as_u16()),
    }
}

/// The gRPC code an HTTP error status means.
pub(crate) fn grpc_code(status: StatusCode) -> i32 {
    match status.as_u16() {
        400 | 422 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        408 | 504 => 4,
        429 => 8,
        501 => 12,
        503 => 14,
        _ => 13,
    }
}

/// A `GET` whose answer must be 200; its body.
pub(crate) async fn get(
    channel: &Http1Channel,
    path: &str,
    headers: &HeaderMap,
    deadline: Option<Instant>,
) -> Result<Bytes, CallError> {
    let answer = channel
        .send(
            Method::GET,
            path,
            Chunks::default(),
            headers,
            deadline,
            16 << 20,
        )
        .await?;
    if answer.status != StatusCode::OK {
        return Err(status_error(&answer));
    }
    Ok(answer.body)
}

/// The upstream's liveness (its probe).
pub(crate) async fn live(
    channel: &Http1Channel,
    headers: &HeaderMap,
    deadline: Instant,
) -> Result<(), CallError> {
    get(channel, "/v2/health/live", headers, Some(deadline))
        .await
        .map(|_| ())
}

/// `GET /v2/models/{m}[/versions/{v}]` as the gRPC message.
pub(crate) fn metadata_from_json(body: &[u8]) -> Result<pb::ModelMetadataResponse, CallError> {
    #[derive(Deserialize)]
    struct Spec {
        name: String,
        datatype: String,
        #[serde(default)]
        shape: Vec<i64>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        #[serde(default)]
        name: String,
        #[serde(default)]
        versions: Option<Vec<String>>,
        #[serde(default)]
        platform: Option<String>,
        #[serde(default)]
        inputs: Option<Vec<Spec>>,
        #[serde(default)]
        outputs: Option<Vec<Spec>>,
    }
    let m: Metadata = serde_json::from_slice(body)
        .map_err(|e| CallError::Protocol(format!("the model metadata is not the V2 JSON: {e}")))?;
    let specs = |specs: Option<Vec<Spec>>| {
        specs
            .unwrap_or_default()
            .into_iter()
            .map(|s| pb::model_metadata_response::TensorMetadata {
                name: s.name,
                datatype: s.datatype,
                shape: s.shape,
            })
            .collect()
    };
    Ok(pb::ModelMetadataResponse {
        name: m.name,
        versions: m.versions.unwrap_or_default(),
        platform: m.platform.unwrap_or_default(),
        inputs: specs(m.inputs),
        outputs: specs(m.outputs),
    })
}

/// Whether `GET /v2` lists the binary tensor data extension.
pub(crate) fn speaks_binary(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Server {
        #[serde(default)]
        extensions: Vec<String>,
    }
    serde_json::from_slice::<Server>(body)
        .is_ok_and(|s| s.extensions.iter().any(|e| e == "binary_tensor_data"))
}

/// The body of an infer request: a JSON header and each input's own
/// buffer with `binary`, else the whole request as JSON.
pub(crate) fn infer_body(
    inputs: Vec<wirespeed_core::Tensor>,
    outputs: &[&str],
    parameters: &wirespeed_core::Parameters,
    binary: bool,
) -> (Chunks, Option<usize>) {
    let mut header = Vec::new();
    wirespeed_json::encode_infer_request(&inputs, outputs, parameters, binary, &mut header);
    if !binary {
        return (Chunks::new([Bytes::from(header)]), None);
    }
    let header_len = header.len();
    let mut parts = vec![Bytes::from(header)];
    parts.extend(
        inputs
            .into_iter()
            .map(|t| wirespeed_core::raw::into_raw(t.data)),
    );
    (Chunks::new(parts), Some(header_len))
}

/// The infer answer as the gRPC message, every output as raw contents:
/// binary ones sliced from the body, JSON ones decoded by wirespeed's
/// decoder (so floats are rounded once) and written raw.
pub(crate) fn answer_from_rest(
    answer: &Answer,
    max: usize,
) -> Result<pb::ModelInferResponse, String> {
    #[derive(Deserialize)]
    struct Output<'a> {
        name: String,
        datatype: String,
        #[serde(default)]
        shape: Vec<i64>,
        #[serde(default)]
        parameters: Option<HashMap<String, serde_json::Value>>,
        #[serde(default, borrow)]
        data: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow, default)]
        outputs: Vec<Output<'a>>,
    }
    let header_len = match answer.headers.get(HEADER_LENGTH) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n <= answer.body.len())
            .ok_or_else(|| format!("{HEADER_LENGTH} {v:?} does not fit the body"))?,
        None => answer.body.len(),
    };
    let body: Body<'_> = serde_json::from_slice(&answer.body[..header_len])
        .map_err(|e| format!("the infer answer is not the V2 JSON: {e}"))?;
    let mut raw_at = header_len;
    let mut outputs = Vec::with_capacity(body.outputs.len());
    let mut raw = Vec::with_capacity(body.outputs.len());
    for output in body.outputs {
        let size = output
            .parameters
            .as_ref()
            .and_then(|p| p.get("binary_data_size"))
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    format!(
                        "output '{}': binary_data_size {v} is not a size",
                        output.name
                    )
                })
            })
            .transpose()?;
        let bytes = match (size, output.data) {
            (Some(size), _) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                let end = raw_at
                    .checked_add(size)
                    .filter(|&end| end <= answer.body.len())
                    .ok_or_else(|| {
                        format!(
                            "output '{}': {size} binary bytes past the body's end",
                            output.name
                        )
                    })?;
                let slice = answer.body.slice(raw_at..end);
                raw_at = end;
                slice
            }
            (None, Some(data)) => {
                json_output_raw(&output.name, &output.datatype, &output.shape, data, max)?
            }
            (None, None) => return Err(format!("output '{}' with no data", output.name)),
        };
        raw.push(bytes);
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name: output.name,
            datatype: output.datatype,
            shape: output.shape,
            parameters: Default::default(),
            contents: None,
        });
    }
    Ok(pb::ModelInferResponse {
        outputs,
        raw_output_contents: raw,
        ..Default::default()
    })
}

/// A JSON output's `data` as raw bytes: decoded by wirespeed's decoder (so
/// floats are rounded once) under limits of `max` elements and bytes.
fn json_output_raw(
    name: &str,
    datatype: &str,
    shape: &[i64],
    data: &RawValue,
    max: usize,
) -> Result<Bytes, String> {
    let mut request = Vec::with_capacity(data.get().len() + 96);
    request.extend_from_slice(b"{\"inputs\":[{\"name\":\"o\",\"datatype\":");
    request.extend_from_slice(
        serde_json::to_string(datatype)
            .unwrap_or_default()
            .as_bytes(),
    );
    request.extend_from_slice(b",\"shape\":");
    request.extend_from_slice(serde_json::to_string(shape).unwrap_or_default().as_bytes());
    request.extend_from_slice(b",\"data\":");
    request.extend_from_slice(data.get().as_bytes());
    request.extend_from_slice(b"}]}");
    let options = wirespeed_json::DecodeOptions {
        limits: wirespeed_core::RequestLimits {
            max_elements: max,
            max_tensor_bytes: max.saturating_mul(2),
            max_string_bytes: max,
            ..wirespeed_core::RequestLimits::default()
        },
        strict: false,
        pool: None,
        bytes_length_dimension: false,
    };
    let mut decoder = wirespeed_json::RequestDecoder::new(options);
    let decoded = decoder
        .feed(&request)
        .and_then(|()| decoder.finish())
        .map_err(|e| format!("output '{name}': {}", e.message()))?;
    let tensor = decoded
        .inputs
        .into_iter()
        .next()
        .ok_or_else(|| format!("output '{name}' has no data"))?;
    let mut out = Vec::new();
    write_raw(&tensor.data, &mut out);
    Ok(Bytes::from(out))
}

/// The headers of an infer request.
/// Adds the W3C trace context headers of `trace` to `headers`.
pub(crate) fn trace_headers(headers: &mut HeaderMap, trace: &TraceContext) {
    if let Ok(value) = HeaderValue::try_from(trace.traceparent()) {
        headers.insert("traceparent", value);
    }
    if let Some(value) = trace
        .tracestate
        .as_deref()
        .and_then(|s| HeaderValue::try_from(s).ok())
    {
        headers.insert("tracestate", value);
    }
}

pub(crate) fn infer_headers(base: &HeaderMap, header_len: Option<usize>) -> HeaderMap {
    let mut headers = base.clone();
    match header_len {
        Some(len) => {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(HEADER_LENGTH, HeaderValue::from(len));
        }
        None => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_core::{Tensor, TensorData};

    fn answer(headers: &[(&'static str, &str)], body: &[u8]) -> Answer {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        Answer {
            status: StatusCode::OK,
            headers: map,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn the_binary_extension_is_used_when_listed() {
        assert!(speaks_binary(
            br#"{"name":"t","extensions":["classification","binary_tensor_data"]}"#
        ));
        assert!(!speaks_binary(
            br#"{"name":"kserve","extensions":["model_repository_extension"]}"#
        ));
        let x = Tensor {
            name: "x".into(),
            shape: vec![2],
            data: TensorData::Fp32(vec![1.0, 2.0]),
            parameters: Vec::new(),
        };
        let (body, header_len) = infer_body(vec![x], &["y"], &Vec::new(), true);
        let header_len = header_len.unwrap();
        assert_eq!(body.len() as usize, header_len + 8);
        let headers = infer_headers(&HeaderMap::new(), Some(header_len));
        assert_eq!(headers[HEADER_LENGTH], header_len.to_string().as_str());
    }

    #[test]
    fn binary_and_json_outputs_are_read() {
        let header = br#"{"outputs":[{"name":"a","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"b","datatype":"FP32","shape":[1],"data":[0.1]}]}"#;
        let mut body = header.to_vec();
        body.extend_from_slice(&1f32.to_le_bytes());
        body.extend_from_slice(&2f32.to_le_bytes());
        let len = header.len().to_string();
        let message = answer_from_rest(&answer(&[(HEADER_LENGTH, &len)], &body), 1 << 20).unwrap();
        assert_eq!(&message.raw_output_contents[0][..4], &1f32.to_le_bytes());
        assert_eq!(&message.raw_output_contents[1][..], &0.1f32.to_le_bytes());
        let e = answer_from_rest(
            &answer(&[(HEADER_LENGTH, &len)], &body[..body.len() - 1]),
            1 << 20,
        )
        .unwrap_err();
        assert!(e.contains("past the body's end"), "{e}");
    }
}
