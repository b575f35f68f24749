//! TF Serving's gRPC API on the gRPC listener, beside the V2 service:
//! `tensorflow.serving.PredictionService` (`Predict`, `Classify`,
//! `Regress`, `MultiInference`, `GetModelMetadata`) and `ModelService`
//! (`GetModelStatus`), as TF Serving's own clients call them on its port
//! 8500. `Classify`, `Regress` and `MultiInference` take examples, as
//! REST's verbs do (`tf_examples.rs`).
//!
//! `Predict` is a codec of the one pipeline. Its `TensorProto`s become
//! wirespeed's tensors (`wirespeed_proto::tf_tensors`: `tensor_content` is
//! copied once, typed values move), under the same request limits as every
//! protocol. The answer carries each output in its typed field
//! (`float_val`, ...), as TF Serving does by default, or with
//! `--tf-tensor-content` its own buffer as `tensor_content`. A model's one
//! signature is `serving_default`; `model_spec.version` picks a version,
//! and a `version_label` the version its `[version_labels]` names (another
//! is NOT_FOUND, as TF Serving refuses it). `output_filter` chooses the
//! outputs.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};
use wirespeed_core::{
    Error, ErrorKind, InferRequest, InferResponse, RequestedOutput, Tensor, TensorBudget,
    TensorSpec,
};
use wirespeed_proto::tensorflow as tf;
use wirespeed_proto::tensorflow::serving as tfs;
use wirespeed_proto::tf_tensors;

use crate::protocols::tfserving::examples::{self, Examples, Head, Verb};
use crate::protocols::v2::grpc_infer as infer;
use crate::protocols::Front;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{Codec, RequestContext, Target};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::timing::{timed_on, Stages, SERVER_TIMING};

use tfs::model_spec::VersionChoice;

/// The name of a model's one signature, TF Serving's default.
pub(crate) const SIGNATURE: &str = "serving_default";

/// `tensor_content` bytes above this are converted on the CPU pool, as
/// V2's raw contents are.
const OFFLOAD_CONTENT_BYTES: usize = 1 << 20;

/// The gRPC status of an error outside the pipeline.
fn status(error: &Error) -> Status {
    infer::status(error, error.public_message())
}

/// The model, version and signature a `model_spec` names.
struct Spec {
    name: String,
    version: Option<String>,
    /// A `version_label`, in place of a version.
    label: Option<String>,
    signature: String,
}

impl Spec {
    fn of(spec: Option<tfs::ModelSpec>) -> Result<Spec, Error> {
        let spec = spec.ok_or_else(|| Error::invalid_input("model_spec is missing"))?;
        if spec.name.is_empty() {
            return Err(Error::invalid_input("model_spec.name is empty"));
        }
        let (version, label) = match spec.version_choice {
            Some(VersionChoice::Version(v)) => (Some(v.to_string()), None),
            Some(VersionChoice::VersionLabel(l)) => (None, Some(l)),
            None => (None, None),
        };
        let signature = if spec.signature_name.is_empty() {
            SIGNATURE.to_owned()
        } else {
            spec.signature_name
        };
        Ok(Spec {
            name: spec.name,
            version,
            label,
            signature,
        })
    }

    fn target(&self) -> Target<'_> {
        Target {
            name: &self.name,
            version: self.version.as_deref(),
            label: self.label.as_deref(),
        }
    }

    /// The signature must be the model's one: `serving_default`, or the
    /// model's own name.
    fn check_signature(&self, model: &ServedModel) -> Result<(), Error> {
        if self.signature == SIGNATURE || self.signature == model.metadata().name {
            return Ok(());
        }
        Err(Error::invalid_input(format!(
            "serving signature '{}' not found; model '{}' has '{SIGNATURE}'",
            self.signature,
            model.metadata().name
        )))
    }
}

/// The answer's `model_spec`: the model, its version as a number when it
/// is one, and the signature.
fn answer_spec(name: &str, version: &str) -> tfs::ModelSpec {
    tfs::ModelSpec {
        name: name.to_owned(),
        version_choice: version.parse::<i64>().ok().map(VersionChoice::Version),
        signature_name: SIGNATURE.to_owned(),
    }
}

/// TF Serving's services, answered from the server's state.
pub(crate) struct TfServing {
    pub(crate) front: Arc<Front>,
}

impl TfServing {
    /// A `Classify` or `Regress`: one task, its spec and result.
    async fn one_task(
        &self,
        request: Request<()>,
        verb: Verb,
        model_spec: Option<tfs::ModelSpec>,
        input: Option<tfs::Input>,
    ) -> Result<Response<(tfs::ModelSpec, TaskResult)>, Status> {
        let spec = Spec::of(model_spec).map_err(|e| status(&e))?;
        let task = Task::new(verb, spec.signature.clone());
        let answer = self.examples(request, &spec, vec![task], input).await?;
        Ok(answer.map(|mut answer| answer.results.remove(0)))
    }

    /// Runs `tasks` on the examples of `input`, through the pipeline.
    async fn examples(
        &self,
        request: Request<()>,
        spec: &Spec,
        tasks: Vec<Task>,
        input: Option<tfs::Input>,
    ) -> Result<Response<ExamplesAnswer>, Status> {
        let timeout = crate::protocols::grpc::deadline(request.metadata());
        let trace = crate::protocols::trace_context(request.metadata().as_ref());
        let front = &*self.front;
        let context = RequestContext::new(&front.engine, "tf-grpc", trace).within(timeout);
        let codec = TfExamples {
            front,
            tasks,
            input: Some(input.unwrap_or_default()),
        };
        within(timeout, front.engine.infer(context, spec.target(), codec)).await
    }
}

/// A request's metadata apart from its message.
fn split<T>(request: Request<T>) -> (Request<()>, T) {
    let (metadata, extensions, message) = request.into_parts();
    (Request::from_parts(metadata, extensions, ()), message)
}

/// `answer`, or DEADLINE_EXCEEDED once the client's `timeout` passes.
async fn within<T>(
    timeout: Option<std::time::Duration>,
    answer: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match timeout {
        Some(after) => tokio::time::timeout(after, answer)
            .await
            .unwrap_or_else(|_| {
                Err(status(&Error::new(
                    ErrorKind::Timeout,
                    format!("the client's deadline of {after:?} passed before the answer"),
                )))
            }),
        None => answer.await,
    }
}

/// TF's method names of the example tasks.
const CLASSIFY_METHOD: &str = "tensorflow/serving/classify";
const REGRESS_METHOD: &str = "tensorflow/serving/regress";

/// The tasks of a `MultiInferenceRequest`, which must all name one model
/// (and version), each signature once, as TF Serving requires.
fn multi_tasks(tasks: Vec<tfs::InferenceTask>) -> Result<(Spec, Vec<Task>), Error> {
    let mut first: Option<Spec> = None;
    let mut out: Vec<Task> = Vec::with_capacity(tasks.len());
    for task in tasks {
        let spec = Spec::of(task.model_spec)?;
        let verb = match task.method_name.as_str() {
            CLASSIFY_METHOD => Verb::Classify,
            REGRESS_METHOD => Verb::Regress,
            other => {
                return Err(Error::invalid_input(format!(
                    "unsupported method_name '{other}': a task is '{CLASSIFY_METHOD}' or \
                     '{REGRESS_METHOD}'"
                )))
            }
        };
        if let Some(first) = &first {
            if first.name != spec.name || first.version != spec.version || first.label != spec.label
            {
                return Err(Error::invalid_input(
                    "every task of a MultiInferenceRequest must name the same model and version",
                ));
            }
        }
        if out.iter().any(|t| t.signature == spec.signature) {
            return Err(Error::invalid_input(format!(
                "signature '{}' is asked for twice",
                spec.signature
            )));
        }
        out.push(Task::new(verb, spec.signature.clone()));
        first.get_or_insert(spec);
    }
    let spec =
        first.ok_or_else(|| Error::invalid_input("the MultiInferenceRequest has no tasks"))?;
    Ok((spec, out))
}

/// One classify or regress task, and what answers it once the model is known.
struct Task {
    verb: Verb,
    signature: String,
    head: Option<Head>,
    /// The name of the output the head reads.
    output: String,
}

impl Task {
    fn new(verb: Verb, signature: String) -> Task {
        Task {
            verb,
            signature,
            head: None,
            output: String::new(),
        }
    }
}

/// A task's result.
enum TaskResult {
    Classification(tfs::ClassificationResult),
    Regression(tfs::RegressionResult),
}

/// The results of an examples request, one per task, each with its spec.
struct ExamplesAnswer {
    results: Vec<(tfs::ModelSpec, TaskResult)>,
}

/// The codec of a `Classify`, `Regress` or `MultiInference` request.
struct TfExamples<'a> {
    front: &'a Front,
    tasks: Vec<Task>,
    input: Option<tfs::Input>,
}

impl Codec for TfExamples<'_> {
    type Answer = Result<Response<ExamplesAnswer>, Status>;
    const PROTOCOL: InferProtocol = InferProtocol::TfServingGrpc;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        let metadata = model.metadata();
        let mut heads = Vec::with_capacity(self.tasks.len());
        for task in &mut self.tasks {
            examples::check_signature(&task.signature, task.verb, &metadata.name)?;
            let head = examples::head(task.verb, metadata, model.model.heads())?;
            task.head = Some(head);
            task.output = metadata.outputs[head.output()].name.clone();
            heads.push(head);
        }
        let input = self.input.take();
        let bytes = match (&input, &self.front.engine.traffic) {
            (Some(input), Some(_)) => prost::Message::encoded_len(input) as u64,
            _ => 0,
        };
        let started = std::time::Instant::now();
        let mut examples = Examples::new(metadata, &self.front.engine.decode_options.limits)?;
        examples.decode_input(input)?;
        let request = examples.into_request(metadata, &heads)?;
        stages.body_read(started.elapsed(), bytes);
        Ok(request)
    }

    fn encode(&mut self, response: InferResponse) -> Result<Self::Answer, Error> {
        let mut results = Vec::with_capacity(self.tasks.len());
        for task in &self.tasks {
            let output = response
                .outputs
                .iter()
                .find(|o| o.name == task.output)
                .ok_or_else(|| Error::internal(format!("output '{}' is missing", task.output)))?;
            let result = match task.head {
                Some(Head::Classes { scores, .. }) => {
                    TaskResult::Classification(examples::classification_proto(scores, output)?)
                }
                Some(Head::Value { .. }) => {
                    TaskResult::Regression(examples::regression_proto(output)?)
                }
                None => return Err(Error::internal("a task was not decoded")),
            };
            let mut spec = answer_spec(&response.model_name, &response.model_version);
            spec.signature_name = task.signature.clone();
            results.push((spec, result));
        }
        Ok(Ok(Response::new(ExamplesAnswer { results })))
    }

    fn stamp(answer: &mut Self::Answer, timing: &str, _default: bool) {
        if let (Ok(response), Ok(value)) = (answer, timing.parse()) {
            response.metadata_mut().insert(SERVER_TIMING, value);
        }
    }

    fn error(&self, error: &Error, message: &str) -> Self::Answer {
        Err(infer::status(error, message))
    }
}

#[tonic::async_trait]
impl tfs::prediction_service_server::PredictionService for TfServing {
    async fn predict(
        &self,
        request: Request<tfs::PredictRequest>,
    ) -> Result<Response<tfs::PredictResponse>, Status> {
        let timeout = crate::protocols::grpc::deadline(request.metadata());
        let trace = crate::protocols::trace_context(request.metadata().as_ref());
        let mut message = request.into_inner();
        let spec = Spec::of(message.model_spec.take()).map_err(|e| status(&e))?;
        let front = &*self.front;
        let context = RequestContext::new(&front.engine, "tf-grpc", trace).within(timeout);
        let codec = TfPredict {
            front,
            spec: &spec,
            message: Some(message),
        };
        let answer = front.engine.infer(context, spec.target(), codec);
        within(timeout, answer).await
    }

    async fn classify(
        &self,
        request: Request<tfs::ClassificationRequest>,
    ) -> Result<Response<tfs::ClassificationResponse>, Status> {
        let (request, message) = split(request);
        let answer = self
            .one_task(request, Verb::Classify, message.model_spec, message.input)
            .await?;
        Ok(answer.map(|(spec, result)| tfs::ClassificationResponse {
            model_spec: Some(spec),
            result: match result {
                TaskResult::Classification(result) => Some(result),
                TaskResult::Regression(_) => None,
            },
        }))
    }

    async fn regress(
        &self,
        request: Request<tfs::RegressionRequest>,
    ) -> Result<Response<tfs::RegressionResponse>, Status> {
        let (request, message) = split(request);
        let answer = self
            .one_task(request, Verb::Regress, message.model_spec, message.input)
            .await?;
        Ok(answer.map(|(spec, result)| tfs::RegressionResponse {
            model_spec: Some(spec),
            result: match result {
                TaskResult::Regression(result) => Some(result),
                TaskResult::Classification(_) => None,
            },
        }))
    }

    /// Several classify and regress tasks on one model, over one input,
    /// from one run of the model.
    async fn multi_inference(
        &self,
        request: Request<tfs::MultiInferenceRequest>,
    ) -> Result<Response<tfs::MultiInferenceResponse>, Status> {
        let (request, message) = split(request);
        let (spec, tasks) = multi_tasks(message.tasks).map_err(|e| status(&e))?;
        let mut answer = self.examples(request, &spec, tasks, message.input).await?;
        let results = std::mem::take(&mut answer.get_mut().results);
        Ok(answer.map(|_| tfs::MultiInferenceResponse {
            results: results
                .into_iter()
                .map(|(spec, result)| tfs::InferenceResult {
                    model_spec: Some(spec),
                    result: Some(match result {
                        TaskResult::Classification(r) => {
                            tfs::inference_result::Result::ClassificationResult(r)
                        }
                        TaskResult::Regression(r) => {
                            tfs::inference_result::Result::RegressionResult(r)
                        }
                    }),
                })
                .collect(),
        }))
    }

    async fn get_model_metadata(
        &self,
        request: Request<tfs::GetModelMetadataRequest>,
    ) -> Result<Response<tfs::GetModelMetadataResponse>, Status> {
        let message = request.into_inner();
        let spec = Spec::of(message.model_spec).map_err(|e| status(&e))?;
        if let Some(field) = message
            .metadata_field
            .iter()
            .find(|f| f.as_str() != "signature_def")
        {
            return Err(status(&Error::invalid_input(format!(
                "metadata field '{field}' is not served; ask for 'signature_def'"
            ))));
        }
        if message.metadata_field.is_empty() {
            return Err(status(&Error::invalid_input(
                "metadata_field is empty; ask for 'signature_def'",
            )));
        }
        let model = self
            .front
            .engine
            .models
            .target(&spec.target())
            .map_err(|e| status(&e))?;
        spec.check_signature(&model).map_err(|e| status(&e))?;
        let metadata = model.metadata();
        let infos = |specs: &[TensorSpec]| -> HashMap<String, tf::TensorInfo> {
            specs
                .iter()
                .map(|s| {
                    let info = tf::TensorInfo {
                        encoding: Some(tf::tensor_info::Encoding::Name(format!("{}:0", s.name))),
                        dtype: tf_tensors::tf_datatype(s.datatype) as i32,
                        tensor_shape: Some(tf::TensorShapeProto {
                            dim: s
                                .shape
                                .iter()
                                .map(|&size| tf::tensor_shape_proto::Dim {
                                    size,
                                    name: String::new(),
                                })
                                .collect(),
                            unknown_rank: false,
                        }),
                    };
                    (s.name.clone(), info)
                })
                .collect()
        };
        let signature = tf::SignatureDef {
            inputs: infos(&metadata.inputs),
            outputs: infos(&metadata.outputs),
            method_name: "tensorflow/serving/predict".to_owned(),
        };
        let mut signatures = HashMap::from([(SIGNATURE.to_owned(), signature)]);
        for s in examples::signatures(model.model.heads()) {
            let def = tf::SignatureDef {
                inputs: infos(&s.inputs),
                outputs: infos(&s.outputs),
                method_name: s.method.to_owned(),
            };
            signatures.insert(s.name.to_owned(), def);
        }
        let map = tfs::SignatureDefMap {
            signature_def: signatures,
        };
        let any = prost_types::Any {
            type_url: "type.googleapis.com/tensorflow.serving.SignatureDefMap".to_owned(),
            value: prost::Message::encode_to_vec(&map),
        };
        Ok(Response::new(tfs::GetModelMetadataResponse {
            model_spec: Some(answer_spec(&metadata.name, model.version())),
            metadata: HashMap::from([("signature_def".to_owned(), any)]),
        }))
    }
}

#[tonic::async_trait]
impl tfs::model_service_server::ModelService for TfServing {
    async fn get_model_status(
        &self,
        request: Request<tfs::GetModelStatusRequest>,
    ) -> Result<Response<tfs::GetModelStatusResponse>, Status> {
        let spec = Spec::of(request.into_inner().model_spec).map_err(|e| status(&e))?;
        let models = &self.front.engine.models;
        let served = models.target(&spec.target()).map_err(|e| status(&e))?;
        let versions = match (&spec.version, &spec.label) {
            (None, None) => models.versions(&spec.name),
            _ => vec![served],
        };
        use tfs::model_version_status::State;
        let statuses = versions
            .iter()
            .rev()
            .map(|model| {
                let ready = self.front.engine.model_ready(model);
                let (state, code, message) = match ready {
                    Ok(()) => (State::Available, 0, String::new()),
                    Err(reason) => (State::Loading, 14, reason),
                };
                tfs::ModelVersionStatus {
                    version: model.version().parse().unwrap_or(0),
                    state: state as i32,
                    status: Some(tfs::StatusProto {
                        error_code: code,
                        error_message: message,
                    }),
                }
            })
            .collect();
        Ok(Response::new(tfs::GetModelStatusResponse {
            model_version_status: statuses,
        }))
    }
}

/// `Predict`'s codec of one request.
struct TfPredict<'a> {
    front: &'a Front,
    spec: &'a Spec,
    message: Option<tfs::PredictRequest>,
}

impl Codec for TfPredict<'_> {
    type Answer = Result<Response<tfs::PredictResponse>, Status>;
    const PROTOCOL: InferProtocol = InferProtocol::TfServingGrpc;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        self.spec.check_signature(model)?;
        let message = self.message.take().expect("a message is decoded once");
        let content: usize = message
            .inputs
            .values()
            .map(|t| t.tensor_content.len())
            .sum();
        let bytes = if self.front.engine.traffic.is_some() {
            prost::Message::encoded_len(&message) as u64
        } else {
            0
        };
        let limits = self.front.engine.decode_options.limits.clone();
        let mut decode = std::time::Duration::ZERO;
        let request = timed_on(
            &self.front.engine.pool,
            content > OFFLOAD_CONTENT_BYTES,
            &mut decode,
            move || request(message, &limits),
        )
        .await?;
        stages.body_read(decode, bytes);
        Ok(request)
    }

    fn encode(&mut self, response: InferResponse) -> Result<Self::Answer, Error> {
        let spec = answer_spec(&response.model_name, &response.model_version);
        let outputs = response
            .outputs
            .into_iter()
            .map(|t| {
                (
                    t.name.clone(),
                    tf_tensors::tensor_proto(t, self.front.tf_tensor_content),
                )
            })
            .collect();
        Ok(Ok(Response::new(tfs::PredictResponse {
            model_spec: Some(spec),
            outputs,
        })))
    }

    fn stamp(answer: &mut Self::Answer, timing: &str, _default: bool) {
        if let (Ok(response), Ok(value)) = (answer, timing.parse()) {
            response.metadata_mut().insert(SERVER_TIMING, value);
        }
    }

    fn error(&self, error: &Error, message: &str) -> Self::Answer {
        Err(infer::status(error, message))
    }
}

/// The infer request of a `PredictRequest`: its inputs, in name order (a
/// map has none), and `output_filter` as the outputs asked for.
fn request(
    message: tfs::PredictRequest,
    limits: &wirespeed_core::RequestLimits,
) -> Result<InferRequest, Error> {
    limits.check_inputs(message.inputs.len())?;
    let mut named: Vec<(String, tf::TensorProto)> = message.inputs.into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut budget = TensorBudget::default();
    let mut inputs = Vec::with_capacity(named.len());
    for (name, proto) in named {
        let (_, shape, data) =
            tf_tensors::tensor_data(proto, limits, &mut budget).map_err(|e| match e {
                wirespeed_proto::tensors::ContentsError::Limit(limit) => {
                    limit.in_input(&name).into()
                }
                wirespeed_proto::tensors::ContentsError::Mismatch(m) => {
                    Error::invalid_input(format!("input '{name}' {m}"))
                }
            })?;
        inputs.push(Tensor {
            name,
            shape,
            data,
            parameters: Vec::new(),
        });
    }
    let mut outputs: Vec<RequestedOutput> = Vec::with_capacity(message.output_filter.len());
    for name in message.output_filter {
        if outputs.iter().any(|o| o.name == name) {
            return Err(Error::invalid_input(format!(
                "output_filter names '{name}' more than once"
            )));
        }
        outputs.push(RequestedOutput {
            name,
            parameters: Vec::new(),
        });
    }
    Ok(InferRequest {
        id: None,
        parameters: Vec::new(),
        inputs,
        outputs,
        binary_inputs: Vec::new(),
        shared_inputs: Vec::new(),
        input_parameters: Vec::new(),
    })
}
