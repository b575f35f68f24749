//! Running an InferenceGraph (`backend = "graph"`, KServe's YAML) as
//! KServe's router runs it, in-process: from node `root`, each node routes
//! its input over its steps, and each step is a served model (called
//! through the server's [`ModelCaller`], as an ensemble's step is: through its
//! scheduler, counted in its statistics) or another node.
//!
//! - **Sequence**: each step in turn, on the graph's request (`$request`,
//!   the default, as KServe's router has it) or the previous step's answer
//!   (`$response`); a step with a `condition` runs only when the previous
//!   answer meets it, else that answer is the node's. The last answer is
//!   the node's.
//! - **Switch**: the first step whose condition the input meets; none is a
//!   404, as KServe answers it.
//! - **Ensemble**: every step at once; the answers merged by step name (its
//!   index when it has none).
//! - **Splitter**: one step, drawn by the weights.
//!
//! What flows is a [`Payload`]: tensors, handed from step to step without
//! being written out (a step's outputs become the next step's inputs, by
//! name when the names fit, else in order), or JSON where the graph was
//! asked with a v1 body (KServe's `{"instances": ...}`) and a step takes
//! JSON as it came (a KServe predictor's code). A v1 body reaching a model
//! that declares its inputs is decoded against them, once, as the model's
//! own `:predict` would decode it; a graph asked in v1 answers in v1.
//! Conditions are GJSON, as KServe's (the `gjson` crate, by GJSON's
//! author): they read the JSON of the payload, which only a condition
//! makes tensors be written as (v1 `predictions`, or V2 `inputs` and
//! `outputs`).

use rand::RngExt;
use wirespeed_backend::composite::named;
use wirespeed_backend::ModelCaller;
use wirespeed_backend::Run;
use wirespeed_core::{
    Binding, Error, ErrorKind, InferResponse, Model, ParameterValue, Tensor, TensorData, JSON_BODY,
};
use wirespeed_json::{DecodeOptions, Format, RequestDecoder};
use wirespeed_scheduler::CallContext;

use super::{Graph, GraphNode, GraphStep, InferenceGraph, Router, StepData, StepTarget, ROOT_NODE};
use crate::composites::join_all;

/// What flows between a graph's steps.
#[derive(Debug, Clone)]
enum Payload {
    Tensors(Vec<Tensor>),
    /// A JSON body (KServe's v1), as it came or as a step answered it.
    Json(Vec<u8>),
}

impl Payload {
    fn from_tensors(mut tensors: Vec<Tensor>) -> Payload {
        if let [Tensor {
            name,
            data: TensorData::Bytes(body),
            ..
        }] = tensors.as_mut_slice()
        {
            if name == JSON_BODY && body.len() == 1 {
                return Payload::Json(std::mem::take(&mut body[0]));
            }
        }
        Payload::Tensors(tensors)
    }

    fn into_tensors(self) -> Vec<Tensor> {
        match self {
            Payload::Tensors(t) => t,
            Payload::Json(body) => vec![json_tensor(body)],
        }
    }

    /// The payload as JSON: v1's `{"predictions": ...}` for tensors in a
    /// v1 graph, V2's `{"outputs": [...]}` otherwise.
    fn json(&self, v1: bool) -> Vec<u8> {
        match self {
            Payload::Json(body) => body.clone(),
            Payload::Tensors(tensors) => {
                let mut out = Vec::new();
                if v1 {
                    wirespeed_json::encode_tf_response(tensors, Format::TfRows, &mut out);
                } else {
                    let response = InferResponse {
                        model_name: String::new(),
                        model_version: String::new(),
                        id: None,
                        parameters: Vec::new(),
                        outputs: tensors.clone(),
                        shared_outputs: Vec::new(),
                        dialect: Default::default(),
                    };
                    wirespeed_json::encode_infer_response(&response, &mut out);
                }
                out
            }
        }
    }
}

fn json_tensor(body: Vec<u8>) -> Tensor {
    Tensor {
        name: JSON_BODY.to_owned(),
        shape: vec![1],
        data: TensorData::Bytes(vec![body]),
        parameters: Vec::new(),
    }
}

/// One run of a graph.
struct Walk<'a> {
    calls: &'a dyn ModelCaller,
    graph: &'a Graph,
    name: &'a str,
    call: &'a CallContext,
    /// The graph was asked with a v1 body: it answers in v1.
    v1: bool,
}

/// Routes `inputs` through `graph` from its root; its answer's tensors.
pub(super) async fn run(
    graph: &InferenceGraph,
    inputs: Vec<Tensor>,
    call: CallContext,
    calls: &dyn ModelCaller,
) -> Result<Vec<Tensor>, Error> {
    let input = Payload::from_tensors(inputs);
    let walk = Walk {
        calls,
        graph: &graph.graph,
        name: graph.metadata.name.as_str(),
        call: &call,
        v1: matches!(input, Payload::Json(_)),
    };
    let answer = walk.route(ROOT_NODE, input).await?;
    Ok(match answer {
        Payload::Tensors(t) if walk.v1 => vec![json_tensor(Payload::Tensors(t).json(true))],
        answer => answer.into_tensors(),
    })
}

impl<'a> Walk<'a> {
    /// Node `node_name` on `input` (a graph's nodes reach none of
    /// themselves: checked at load).
    fn route<'w>(&'w self, node_name: &'w str, mut input: Payload) -> Run<'w, Payload> {
        Box::pin(async move {
            let node = self.graph.nodes.get(node_name).ok_or_else(|| {
                Error::internal(format!("graph '{}' has no node '{node_name}'", self.name))
            })?;
            match node.router {
                Router::Splitter => {
                    let point = rand::rng().random_range(0..100u32);
                    let step = split(&node.steps, point)
                        .ok_or_else(|| Error::internal("no route was selected by the splitter"))?;
                    self.step(node_name, step, input).await
                }
                Router::Switch => {
                    let text = input.json(self.v1);
                    let text = String::from_utf8_lossy(&text);
                    let step = node
                        .steps
                        .iter()
                        .find(|s| s.condition.as_deref().is_some_and(|c| matches(&text, c)));
                    match step {
                        Some(step) => self.step(node_name, step, input).await,
                        None => Err(Error::new(
                            ErrorKind::RouteNotFound,
                            format!(
                                "graph '{}' node '{node_name}': None of the routes matched with \
                                 the switch condition",
                                self.name
                            ),
                        )),
                    }
                }
                Router::Ensemble => {
                    let mut running: Vec<Run<'_, Payload>> = Vec::with_capacity(node.steps.len());
                    let mut input = Some(input);
                    for (i, step) in node.steps.iter().enumerate() {
                        // Copied for every step but the last, which takes it.
                        let given = if i + 1 == node.steps.len() {
                            input.take()
                        } else {
                            input.clone()
                        };
                        let given = given.unwrap_or(Payload::Tensors(Vec::new()));
                        running.push(self.step(node_name, step, given));
                    }
                    let answers = join_all(running).await;
                    self.merge(node, answers)
                }
                Router::Sequence => {
                    let mut answer: Option<Payload> = None;
                    for (i, step) in node.steps.iter().enumerate() {
                        if let Some(condition) = &step.condition {
                            let Some(previous) = &answer else {
                                return Err(Error::invalid_input(format!(
                                    "graph '{}' node '{node_name}': the first step of a \
                                     Sequence has a condition, and no answer yet to meet it",
                                    self.name
                                )));
                            };
                            let text = previous.json(self.v1);
                            if !matches(&String::from_utf8_lossy(&text), condition) {
                                return Ok(answer.unwrap_or(input));
                            }
                        }
                        // The previous answer moves on to the step that
                        // takes it; the request is copied only while a
                        // later step may still take it.
                        let last = i + 1 == node.steps.len();
                        let mut request = match (step.data, answer.take()) {
                            (StepData::Response, Some(previous)) => previous,
                            _ if last => {
                                std::mem::replace(&mut input, Payload::Tensors(Vec::new()))
                            }
                            _ => input.clone(),
                        };
                        if step.predictions_to_instances {
                            request = predictions_to_instances(request);
                        }
                        answer = Some(self.step(node_name, step, request).await?);
                    }
                    answer.ok_or_else(|| Error::internal("a Sequence of no steps"))
                }
            }
        })
    }

    /// An Ensemble's answers, merged as KServe's router merges them: by
    /// step name (its index when unnamed). In a v1 graph, one JSON object
    /// of every step's answer; otherwise every step's tensors, each named
    /// `{step}/{output}`. A soft step's failure is its entry
    /// (`{"error": ...}`) or its absence; a hard step's is the node's.
    fn merge(
        &self,
        node: &GraphNode,
        answers: Vec<Result<Payload, Error>>,
    ) -> Result<Payload, Error> {
        let mut merged = serde_json::Map::new();
        let mut tensors = Vec::new();
        for (i, (answer, step)) in answers.into_iter().zip(&node.steps).enumerate() {
            let key = step.name.clone().unwrap_or_else(|| i.to_string());
            match answer {
                Err(e) if step.hard => return Err(e),
                Err(e) => {
                    tracing::warn!(graph = %self.name, step = %key, error = %e, "a soft step of an Ensemble failed");
                    if self.v1 {
                        merged.insert(key, serde_json::json!({ "error": e.message() }));
                    }
                }
                Ok(payload) if self.v1 => {
                    let text = payload.json(true);
                    let value = serde_json::from_slice(&text).unwrap_or_else(|_| {
                        serde_json::Value::String(String::from_utf8_lossy(&text).into_owned())
                    });
                    merged.insert(key, value);
                }
                Ok(Payload::Json(body)) => tensors.push(Tensor {
                    name: key,
                    shape: vec![1],
                    data: TensorData::Bytes(vec![body]),
                    parameters: Vec::new(),
                }),
                Ok(Payload::Tensors(outputs)) => {
                    tensors.extend(outputs.into_iter().map(|mut t| {
                        t.name = format!("{key}/{}", t.name);
                        t
                    }));
                }
            }
        }
        Ok(if self.v1 {
            Payload::Json(serde_json::Value::Object(merged).to_string().into_bytes())
        } else {
            Payload::Tensors(tensors)
        })
    }

    /// One step: another node, or a served model.
    fn step<'w>(
        &'w self,
        node_name: &'w str,
        step: &'w GraphStep,
        input: Payload,
    ) -> Run<'w, Payload> {
        Box::pin(async move {
            step.taken.add();
            let model = match &step.target {
                StepTarget::Node(next) => return self.route(next, input).await,
                StepTarget::Model(model) => model,
            };
            let named = |e: Error| {
                named(
                    &format!("graph '{}' node '{node_name}' step '{model}'", self.name),
                    e,
                )
            };
            let callee = self.calls.callee(model, None).map_err(named)?;
            let inputs = fit(callee.as_ref(), input).map_err(named)?;
            let outputs = self
                .calls
                .call(model, None, inputs, &[], self.call.onward())
                .await
                .map_err(named)?;
            Ok(Payload::from_tensors(outputs))
        })
    }
}

/// The step a Splitter's draw `point` in [0, 100) falls on, laying the
/// weights end to end, as KServe's router does.
fn split(steps: &[GraphStep], point: u32) -> Option<&GraphStep> {
    let mut end = 0;
    steps.iter().find(|s| {
        end += s.weight.unwrap_or(0);
        point < end
    })
}

/// Whether the JSON `text` meets the GJSON `condition` (KServe: the path
/// exists).
fn matches(text: &str, condition: &str) -> bool {
    gjson::valid(text) && gjson::get(text, condition).exists()
}

/// KServe's `mapPredictionsToInstances`: a v1 answer's `predictions` as a
/// request's `instances`.
fn predictions_to_instances(payload: Payload) -> Payload {
    let Payload::Json(body) = &payload else {
        return payload;
    };
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut map)) => match map.remove("predictions") {
            Some(predictions) if predictions.as_array().is_some_and(|a| !a.is_empty()) => {
                map.insert("instances".to_owned(), predictions);
                Payload::Json(serde_json::Value::Object(map).to_string().into_bytes())
            }
            _ => payload,
        },
        _ => payload,
    }
}

/// The payload as `model`'s inputs: JSON as it came to a model that reads
/// JSON itself; a v1 body decoded against declared inputs; tensors by name
/// where the names fit, else in order.
fn fit(model: &dyn Model, payload: Payload) -> Result<Vec<Tensor>, Error> {
    let metadata = model.metadata();
    let reads_json = model.binding() == Binding::Open && metadata.inputs.is_empty();
    match payload {
        Payload::Json(body) if reads_json => Ok(vec![json_tensor(body)]),
        Payload::Json(body) => {
            let specs: Vec<(String, wirespeed_core::DataType)> = metadata
                .inputs
                .iter()
                .map(|s| (s.name.clone(), s.datatype))
                .collect();
            let mut decoder = RequestDecoder::tf_serving(DecodeOptions::default(), &specs)
                .with_body_len(body.len() as u64);
            decoder
                .feed(&body)
                .and_then(|()| decoder.finish())
                .map(|mut request| {
                    request.parameters.retain(|(k, v)| {
                        k != "signature_name" || !matches!(v, ParameterValue::String(_))
                    });
                    request.inputs
                })
                .map_err(|e| {
                    Error::invalid_input(format!(
                        "its v1 request does not fit model '{}': {e}",
                        metadata.name
                    ))
                })
        }
        Payload::Tensors(tensors) if reads_json || metadata.inputs.is_empty() => Ok(tensors),
        Payload::Tensors(mut tensors) => {
            let by_name = metadata
                .inputs
                .iter()
                .filter(|s| !s.optional)
                .all(|s| tensors.iter().any(|t| t.name == s.name));
            if by_name {
                tensors.retain(|t| metadata.inputs.iter().any(|s| s.name == t.name));
                return Ok(tensors);
            }
            if tensors.len() == metadata.inputs.len() {
                for (t, spec) in tensors.iter_mut().zip(&metadata.inputs) {
                    t.name = spec.name.clone();
                }
                return Ok(tensors);
            }
            Err(Error::invalid_input(format!(
                "model '{}' takes {} and the step was given {}",
                metadata.name,
                metadata
                    .inputs
                    .iter()
                    .map(|s| format!("'{}'", s.name))
                    .collect::<Vec<_>>()
                    .join(", "),
                tensors
                    .iter()
                    .map(|t| format!("'{}'", t.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KServe's documented Switch conditions, on its documented input.
    #[test]
    fn gjson_conditions_read_as_kserves_router_reads_them() {
        let input = r#"{"source":"client1","instances":[{"name":"blue","intval":0,"strval":"kserve"},{"name":"green","intval":1,"strval":"1red-server1"}]}"#;
        assert!(!matches(input, "[@this].#(source==client)"));
        assert!(!matches(input, "instances.#(intval>10)"));
        assert!(matches(input, "instances.#(strval%*red-server*)"));
        let client = r#"{"source":"client","instances":[]}"#;
        assert!(matches(client, "[@this].#(source==client)"));
        assert!(!matches("not json", "source"));
    }

    /// KServe's splitter sample, 20/80, over 10,000 seeded draws: within
    /// 2 points of each share.
    #[test]
    fn a_splitter_splits_by_its_weights() {
        use rand::SeedableRng;
        let step = |model: &str, weight| GraphStep {
            name: None,
            target: StepTarget::Model(model.into()),
            data: StepData::Request,
            condition: None,
            weight: Some(weight),
            hard: false,
            predictions_to_instances: false,
            taken: Default::default(),
        };
        let steps = [step("sklearn-iris", 20), step("xgboost-iris", 80)];
        let mut rng = rand::rngs::StdRng::seed_from_u64(43);
        let first = (0..10_000)
            .filter(|_| {
                let s = split(&steps, rng.random_range(0..100u32)).unwrap();
                s.target == StepTarget::Model("sklearn-iris".into())
            })
            .count();
        assert!((1800..=2200).contains(&first), "{first} of 10000");
        assert!(split(&steps, 99).is_some() && split(&steps[..1], 20).is_none());
    }

    #[test]
    fn predictions_become_instances() {
        let p = predictions_to_instances(Payload::Json(br#"{"predictions":[1,2]}"#.to_vec()));
        let Payload::Json(body) = p else { panic!() };
        assert_eq!(body, br#"{"instances":[1,2]}"#);
    }
}
