//! TF Serving's REST API: `:predict` in the row (`instances`) and columnar
//! (`inputs`) formats, `:classify` and `:regress` (`tf_examples.rs`),
//! model status and model metadata. `:predict` bodies go through the same
//! incremental decoder as V2 (`RequestDecoder::tf_serving`); the model's
//! input names and datatypes stand in for TF's signature.

use std::sync::Arc;

use hyper::{Request, Response};
use serde_json::{json, Map, Value};
use wirespeed_core::{
    Binding, DataType, Error, ErrorKind, InferRequest, InferResponse, ModelMetadata,
    ParameterValue, RequestLimits, Tensor, TensorData, TensorSpec, JSON_BODY,
};
use wirespeed_http::RequestBody;
use wirespeed_json::{Format, RequestDecoder};

use crate::protocols::http::body::{RestRequest, OFFLOAD_BYTES};
use crate::protocols::http::response::{self, Body};
use crate::protocols::tfserving::examples::{self, Examples, Head, Verb};
use crate::protocols::tfserving::grpc::SIGNATURE;
use crate::protocols::Front;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::Target;
use wirespeed_engine::pipeline::{Codec, RequestContext};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::timing::{timed, timed_on, Stages};

/// `POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict`
pub(crate) async fn predict(
    front: &Front,
    context: RequestContext,
    target: Target<'_>,
    request: Request<RequestBody>,
) -> Response<Body> {
    let codec = TfPredict {
        request: RestRequest::new(front, request),
        format: Format::TfRows,
        passed: false,
    };
    front.engine.infer(context, target, codec).await
}

/// TF Serving's `:predict` codec of one request.
struct TfPredict<'a> {
    request: RestRequest<'a>,
    /// Rows or columns, as the request came; the answer follows it.
    format: Format,
    /// The body went to the model as it came (`JSON_BODY`), and the
    /// model's JSON is the answer.
    passed: bool,
}

impl Codec for TfPredict<'_> {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::TfServing;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        // A model that reads JSON itself and declares no inputs (a KServe
        // predictor): the body, as it came.
        if model.model.binding() == Binding::Open && model.metadata().inputs.is_empty() {
            let body = self.request.read_json(stages).await?;
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
                return Err(Error::malformed(format!("the body is not JSON: {e}")));
            }
            self.passed = true;
            return Ok(InferRequest {
                inputs: vec![Tensor {
                    name: JSON_BODY.to_owned(),
                    shape: vec![1],
                    data: TensorData::Bytes(vec![body]),
                    parameters: Vec::new(),
                }],
                ..InferRequest::default()
            });
        }
        let specs: Vec<(String, DataType)> = model
            .metadata()
            .inputs
            .iter()
            .map(|s| (s.name.clone(), s.datatype))
            .collect();
        let options = self.request.front.engine.decode_options.clone();
        let decoder = Box::new(RequestDecoder::tf_serving(options, &specs));
        let (mut request, format) = self.request.decode_json(decoder, stages).await?;
        self.format = format;
        // `signature_name`, which the decoder hands over as a parameter:
        // the model's one signature, or refused as TF Serving refuses it.
        if let Some(i) = request
            .parameters
            .iter()
            .position(|(k, _)| k == "signature_name")
        {
            let (_, signature) = request.parameters.remove(i);
            let name = &model.metadata().name;
            match signature {
                ParameterValue::String(s) if s.is_empty() || s == SIGNATURE || s == *name => {}
                ParameterValue::String(s) => {
                    return Err(Error::invalid_input(format!(
                        "serving signature '{s}' not found; model '{name}' has '{SIGNATURE}'"
                    )))
                }
                _ => return Err(Error::invalid_input("'signature_name' must be a string")),
            }
        }
        Ok(request)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }

    async fn refuse(&mut self, error: Error) -> Error {
        self.request.refuse(error).await
    }

    fn encode(&mut self, mut response: InferResponse) -> Result<Response<Body>, Error> {
        if self.passed {
            return match response.outputs.as_mut_slice() {
                [Tensor {
                    name,
                    data: TensorData::Bytes(answer),
                    ..
                }] if name == JSON_BODY && answer.len() == 1 => {
                    Ok(response::json(std::mem::take(&mut answer[0])))
                }
                _ => Err(Error::model_failed(format!(
                    "model '{}' took the request's JSON and did not answer JSON",
                    response.model_name
                ))),
            };
        }
        let mut out = Vec::new();
        wirespeed_json::encode_tf_response(&response.outputs, self.format, &mut out);
        Ok(response::json(out))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        response::error_with(error, message)
    }
}

/// `POST /v1/models/{name}[/versions/{v}|/labels/{l}]:classify` and
/// `:regress`.
pub(crate) async fn examples(
    front: &Front,
    context: RequestContext,
    target: Target<'_>,
    request: Request<RequestBody>,
    verb: Verb,
) -> Response<Body> {
    let codec = TfExamples {
        request: RestRequest::new(front, request),
        verb,
        head: None,
    };
    front.engine.infer(context, target, codec).await
}

/// The codec of one `:classify` or `:regress` request.
struct TfExamples<'a> {
    request: RestRequest<'a>,
    verb: Verb,
    /// The output that answers, once the model is known.
    head: Option<Head>,
}

impl Codec for TfExamples<'_> {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::TfServing;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        let metadata = model.metadata();
        let head = match examples::head(self.verb, metadata, model.model.heads()) {
            Ok(head) => head,
            Err(e) => return Err(self.request.refuse(e).await),
        };
        let body = self.request.read_json(stages).await?;
        let limits = &self.request.front.engine.decode_options.limits;
        let verb = self.verb;
        let decode = move |metadata: &ModelMetadata, limits: &RequestLimits, body: &[u8]| {
            let mut examples = Examples::new(metadata, limits)?;
            examples.decode_json(body)?;
            examples::check_signature(examples.signature(), verb, &metadata.name)?;
            examples.into_request(metadata, &[head])
        };
        // A large body is decoded on the CPU pool, as every protocol's is,
        // so the I/O thread keeps serving its other connections; a small
        // one in place, with nothing copied for the trip.
        let request = if body.len() as u64 > OFFLOAD_BYTES {
            let (metadata, limits) = (metadata.clone(), limits.clone());
            let pool = &self.request.front.engine.pool;
            timed_on(pool, true, &mut stages.decode, move || {
                decode(&metadata, &limits, &body)
            })
            .await?
        } else {
            timed(&mut stages.decode, || decode(metadata, limits, &body))?
        };
        self.head = Some(head);
        Ok(request)
    }

    async fn refuse(&mut self, error: Error) -> Error {
        self.request.refuse(error).await
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        let (Some(head), [output]) = (self.head, response.outputs.as_slice()) else {
            return Err(Error::internal(
                "a classify or regress answer lost its output",
            ));
        };
        Ok(response::json(examples::results_json(head, output)?))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        response::error_with(error, message)
    }
}

/// Verbs TF Serving and KServe v1 have and wirespeed does not serve.
pub(crate) fn other_verb(verb: &str) -> Error {
    if verb == "explain" {
        return Error::new(
            ErrorKind::NotImplemented,
            "':explain' (KServe v1) needs an explainer, and wirespeed serves none; \
             ':predict' is served",
        );
    }
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "':{verb}' is not a verb of TF Serving's API; it has ':predict', ':classify' and \
             ':regress'"
        ),
    )
}

/// `GET /v1/models/{name}[/versions/{v}]`: TF Serving's status (the served
/// version is AVAILABLE) and KServe v1's (`name`, `ready`) in one object,
/// so both protocols' clients read it.
pub(crate) fn status(front: &Front, target: Target<'_>) -> Result<Response<Body>, Error> {
    let model = front.engine.models.target(&target)?;
    let kserve = model.dialect == wirespeed_core::Dialect::Kserve;
    // Without a version or label, every served one, as TF Serving lists
    // them.
    let versions = match (target.version, target.label) {
        (None, None) => front.engine.models.versions(target.name),
        _ => vec![model],
    };
    let mut all_ready = true;
    let statuses: Vec<Value> = versions
        .iter()
        .rev()
        .map(|model| {
            let ready = front.engine.model_ready(model);
            all_ready &= ready.is_ok();
            // A `ModelVersionStatus.State`, as over gRPC: a version that is
            // not ready yet is LOADING, its reason in the status.
            let (state, code, message) = match &ready {
                Ok(()) => ("AVAILABLE", "OK", ""),
                Err(reason) => ("LOADING", "UNAVAILABLE", reason.as_str()),
            };
            json!({
                "version": model.version(),
                "state": state,
                "status": { "error_code": code, "error_message": message },
            })
        })
        .collect();
    let mut answer = Map::new();
    answer.insert("name".into(), json!(target.name));
    answer.insert("ready".into(), json!(all_ready));
    if kserve {
        // KServe's v1 status of its model: its name and readiness.
        return Ok(response::json_value(&Value::Object(answer)));
    }
    answer.insert("model_version_status".into(), json!(statuses));
    // OpenAI's `GET /v1/models/{model}` is this path too.
    crate::protocols::openai::model_fields(target.name, &mut answer);
    Ok(response::json_value(&Value::Object(answer)))
}

/// KServe v1's `GET /v1/models`: the served models' names.
pub(crate) fn model_list(front: &Front) -> Response<Body> {
    let names = front.engine.models.names();
    let mut answer = Map::new();
    answer.insert("models".into(), json!(names));
    // OpenAI's `GET /v1/models` is this path too: its fields beside.
    crate::protocols::openai::list_fields(front, &mut answer);
    response::json_value(&Value::Object(answer))
}

/// `GET /v1/models/{name}[/versions/{v}]/metadata`: the model's inputs and
/// outputs as a `serving_default` signature, and its heads' `classification`
/// and `regression` signatures.
pub(crate) fn metadata(front: &Front, target: Target<'_>) -> Result<Response<Body>, Error> {
    let model = front.engine.models.target(&target)?;
    let m = model.metadata();
    let tensors = |specs: &[TensorSpec]| -> Value {
        let mut map = Map::new();
        for spec in specs {
            let dims: Vec<Value> = spec
                .shape
                .iter()
                .map(|d| json!({ "size": d.to_string(), "name": "" }))
                .collect();
            map.insert(
                spec.name.clone(),
                json!({
                    "dtype": tf_dtype(spec.datatype),
                    "tensor_shape": { "dim": dims, "unknown_rank": false },
                    "name": spec.name,
                }),
            );
        }
        Value::Object(map)
    };
    let mut signatures = Map::new();
    signatures.insert(
        "serving_default".to_owned(),
        json!({
            "inputs": tensors(&m.inputs),
            "outputs": tensors(&m.outputs),
            "method_name": "tensorflow/serving/predict",
        }),
    );
    for s in examples::signatures(model.model.heads()) {
        signatures.insert(
            s.name.to_owned(),
            json!({
                "inputs": tensors(&s.inputs),
                "outputs": tensors(&s.outputs),
                "method_name": s.method,
            }),
        );
    }
    Ok(response::json_value(&json!({
        "model_spec": {
            "name": m.name,
            "signature_name": "",
            "version": model.version(),
        },
        "metadata": { "signature_def": { "signature_def": signatures } }
    })))
}

/// TensorFlow's name for a datatype.
fn tf_dtype(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "DT_BOOL",
        DataType::Uint8 => "DT_UINT8",
        DataType::Uint16 => "DT_UINT16",
        DataType::Uint32 => "DT_UINT32",
        DataType::Uint64 => "DT_UINT64",
        DataType::Int8 => "DT_INT8",
        DataType::Int16 => "DT_INT16",
        DataType::Int32 => "DT_INT32",
        DataType::Int64 => "DT_INT64",
        DataType::Fp16 => "DT_HALF",
        DataType::Fp32 => "DT_FLOAT",
        DataType::Fp64 => "DT_DOUBLE",
        DataType::Bf16 => "DT_BFLOAT16",
        DataType::Bytes => "DT_STRING",
    }
}
