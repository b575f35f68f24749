//! `backend = "graph"`: KServe's InferenceGraph, read from the YAML its
//! users apply to a cluster (`kubectl apply -f sequence.yaml`), served
//! in-process. The folder holds that file as it is: every document of
//! another kind (the InferenceServices beside it) is skipped, and the one
//! of `kind: InferenceGraph` gives the nodes. A folder with such a file and
//! no config needs none; with a `config.toml`, `graph_file` names it.
//!
//! Each step's target is a model this server serves: `serviceName` names
//! it, as the InferenceService of that name; `serviceUrl` names it by the
//! first label of its host (`http://single-1.default.example.com/switch`
//! is model `single-1`), as the cluster's DNS would; `nodeName` is another
//! node. The graph runs from its `root` (`run.rs`).
//!
//! Loading checks what KServe's admission webhook checks, in its words: a
//! `root` node, one target a step, unique step names in a node, a
//! Splitter's weights present and adding up to 100; and what its router
//! would find only at run time: a known router type, a Switch step with a
//! condition, a `data` of `$request` or `$response`, a `nodeName` that
//! exists, and no node that reaches itself.

mod nodes;
mod run;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use wirespeed_core::{Binding, Model, ModelMetadata, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use wirespeed_backend::composite::Served;
use wirespeed_backend::Run;
use wirespeed_backend::{Composed, Composite, CompositeBackend, ModelCaller, ModelSource};

use nodes::ROOT_NODE;
pub use nodes::{Graph, GraphNode, GraphStep, Router, StepData, StepTarget, Taken};

/// `backend = "graph"`.
pub(crate) struct GraphBackend;

impl CompositeBackend for GraphBackend {
    fn name(&self) -> &'static str {
        "graph"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Composite>, String> {
        Ok(Arc::new(load(source)?))
    }
}

/// A served InferenceGraph: its nodes, and the face clients see (any
/// inputs, whatever its steps answer).
pub struct InferenceGraph {
    metadata: ModelMetadata,
    graph: Graph,
}

impl InferenceGraph {
    /// Its nodes, with each step's count of requests routed to it.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

impl Model for InferenceGraph {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// A graph takes whatever its first steps take, and answers what its
    /// last ones give.
    fn binding(&self) -> Binding {
        Binding::Open
    }
}

impl Composite for InferenceGraph {
    fn noun(&self) -> &'static str {
        "inference graph"
    }

    fn callees(&self) -> Vec<(String, Option<String>)> {
        crate::composites::each_once(self.models().map(|(_, model)| (model, None)))
    }

    /// Every step's model is served (a graph takes and gives what they
    /// do, so there is nothing more to fit).
    fn check(&self, name: &str, served: &Served<'_>) -> Result<(), String> {
        for (node, model) in self.models() {
            served(model, None).map_err(|e| {
                format!(
                    "inference graph '{name}' node '{node}': step '{model}': {e} (a graph's \
                     steps are served models)"
                )
            })?;
        }
        Ok(())
    }

    fn run<'a>(
        &'a self,
        inputs: Vec<Tensor>,
        _outputs: &'a [RequestedOutput],
        call: CallContext,
        calls: &'a dyn ModelCaller,
    ) -> Run<'a, Composed> {
        Box::pin(async move { run::run(self, inputs, call, calls).await.map(Composed::all) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl InferenceGraph {
    /// Each step that calls a model: its node's name, and the model.
    fn models(&self) -> impl Iterator<Item = (&str, &str)> {
        self.graph.nodes.iter().flat_map(|(node, n)| {
            n.steps.iter().filter_map(move |s| match &s.target {
                StepTarget::Model(m) => Some((node.as_str(), m.as_str())),
                StepTarget::Node(_) => None,
            })
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphKeys {
    #[serde(default)]
    graph_file: Option<String>,
}

/// The parts of KServe's InferenceGraph resource that routing reads;
/// the rest of its spec (resources, replicas, timeouts) is the cluster's.
#[derive(Debug, Deserialize)]
struct Resource {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct Spec {
    #[serde(default)]
    nodes: BTreeMap<String, NodeSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSpec {
    router_type: String,
    #[serde(default)]
    steps: Vec<StepSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepSpec {
    #[serde(default)]
    name: String,
    #[serde(default)]
    node_name: String,
    #[serde(default)]
    service_name: String,
    #[serde(default)]
    service_url: String,
    #[serde(default)]
    data: String,
    #[serde(default)]
    map_predictions_to_instances: bool,
    #[serde(default)]
    weight: Option<i64>,
    #[serde(default)]
    condition: String,
    #[serde(default)]
    dependency: String,
}

/// A graph: its nodes, run by the server.
fn load(source: &ModelSource<'_>) -> Result<InferenceGraph, String> {
    let keys: GraphKeys = source.keys()?;
    let path = match keys.graph_file {
        Some(file) => source.file("graph_file", &file)?,
        None => graph_file(source.folder())?.ok_or_else(|| {
            "no YAML file of the folder holds a 'kind: InferenceGraph' (or name it with \
                 graph_file)"
                .to_owned()
        })?,
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let (graph_name, graph) = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    tracing::info!(
        model = %source.name(),
        graph = %graph_name,
        file = %path.display(),
        nodes = %graph.nodes.keys().cloned().collect::<Vec<_>>().join(", "),
        "loaded inference graph"
    );
    Ok(InferenceGraph {
        metadata: ModelMetadata {
            name: source.name().to_owned(),
            versions: vec![source.config().version.clone()],
            platform: "inference_graph".to_owned(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        },
        graph,
    })
}

/// Whether `folder` holds an InferenceGraph's YAML and nothing else that
/// would configure a model.
pub(crate) fn is_graph(folder: &Path) -> bool {
    matches!(graph_file(folder), Ok(Some(_)))
}

/// The one YAML file of `folder` with a document of `kind: InferenceGraph`.
fn graph_file(folder: &Path) -> Result<Option<PathBuf>, String> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Ok(None);
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .filter(|p| {
            std::fs::read_to_string(p).is_ok_and(|text| {
                text.lines()
                    .any(|l| l.trim_start().starts_with("kind:") && l.contains("InferenceGraph"))
            })
        })
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(format!(
            "several YAML files hold an InferenceGraph ({}); name one with graph_file",
            found
                .iter()
                .filter_map(|p| p.file_name()?.to_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The InferenceGraph of a YAML stream (its name and nodes), checked.
pub(crate) fn parse(text: &str) -> Result<(String, Graph), String> {
    let mut graphs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value =
            serde_yaml_ng::Value::deserialize(document).map_err(|e| format!("not YAML: {e}"))?;
        if value.is_null() {
            continue;
        }
        let is_graph = value.get("kind").and_then(|k| k.as_str()) == Some("InferenceGraph");
        if !is_graph {
            continue;
        }
        let resource: Resource =
            serde_yaml_ng::from_value(value).map_err(|e| format!("the InferenceGraph: {e}"))?;
        graphs.push(resource);
    }
    let resource = match graphs.len() {
        1 => graphs.remove(0),
        0 => return Err("no document of kind InferenceGraph".into()),
        n => {
            return Err(format!(
                "{n} documents of kind InferenceGraph; serve each from a folder of its own"
            ))
        }
    };
    debug_assert_eq!(resource.kind, "InferenceGraph");
    let name = resource.metadata.name;
    let spec = resource
        .spec
        .ok_or_else(|| format!("InferenceGraph \"{name}\" has no spec"))?;
    let graph = graph(&name, spec)?;
    Ok((name, graph))
}

fn graph(name: &str, spec: Spec) -> Result<Graph, String> {
    if !spec.nodes.contains_key(ROOT_NODE) {
        return Err(
            "root node not found, InferenceGraph needs a node with name 'root' as the \
                    root node of the graph"
                .into(),
        );
    }
    let mut nodes = BTreeMap::new();
    for (node_name, node) in spec.nodes {
        let router = match node.router_type.as_str() {
            "Sequence" => Router::Sequence,
            "Switch" => Router::Switch,
            "Ensemble" => Router::Ensemble,
            "Splitter" => Router::Splitter,
            other => {
                return Err(format!(
                    "node \"{node_name}\": invalid route type: {other} (Sequence, Switch, \
                     Ensemble or Splitter)"
                ))
            }
        };
        let mut names = BTreeSet::new();
        let mut steps = Vec::with_capacity(node.steps.len());
        for (i, s) in node.steps.into_iter().enumerate() {
            if !s.name.is_empty() && !names.insert(s.name.clone()) {
                return Err(format!(
                    "Node \"{node_name}\" of InferenceGraph \"{name}\" contains more than one \
                     step with name \"{}\"",
                    s.name
                ));
            }
            let targets = [&s.node_name, &s.service_name, &s.service_url]
                .iter()
                .filter(|t| !t.is_empty())
                .count();
            if targets == 0 {
                return Err(format!(
                    "Step {i} (\"{}\") in node \"{node_name}\" of InferenceGraph \"{name}\" does \
                     not specify an inference target",
                    s.name
                ));
            }
            if targets > 1 {
                return Err(format!(
                    "Step {i} (\"{}\") in node \"{node_name}\" of InferenceGraph \"{name}\" \
                     specifies more than one of nodeName, serviceName, serviceUrl",
                    s.name
                ));
            }
            let target = if !s.node_name.is_empty() {
                StepTarget::Node(s.node_name)
            } else if !s.service_name.is_empty() {
                StepTarget::Model(s.service_name)
            } else {
                StepTarget::Model(service_of_url(&s.service_url).ok_or_else(|| {
                    format!(
                        "step {i} of node \"{node_name}\": serviceUrl '{}' names no host",
                        s.service_url
                    )
                })?)
            };
            let data = match s.data.as_str() {
                "" | "$request" => StepData::Request,
                "$response" => StepData::Response,
                other => {
                    return Err(format!(
                        "step {i} of node \"{node_name}\": data '{other}' is not $request or \
                         $response"
                    ))
                }
            };
            let hard = match s.dependency.as_str() {
                "" | "Soft" => false,
                "Hard" => true,
                other => {
                    return Err(format!(
                        "step {i} of node \"{node_name}\": dependency '{other}' is not Soft or \
                         Hard"
                    ))
                }
            };
            if router == Router::Switch && s.condition.is_empty() {
                return Err(format!(
                    "step {i} of Switch node \"{node_name}\" has no condition to route by"
                ));
            }
            let weight = match (router, s.weight) {
                (Router::Splitter, None) => {
                    return Err(format!(
                        "InferenceGraph[{name}] Node[{node_name}] Route[{}] missing the 'Weight'",
                        target_name(&target)
                    ))
                }
                (_, Some(w)) if !(0..=100).contains(&w) => {
                    return Err(format!(
                        "step {i} of node \"{node_name}\": weight {w} is not a percentage"
                    ))
                }
                (_, w) => w.map(|w| w as u32),
            };
            steps.push(GraphStep {
                name: (!s.name.is_empty()).then_some(s.name),
                target,
                data,
                condition: (!s.condition.is_empty()).then_some(s.condition),
                weight,
                hard,
                predictions_to_instances: s.map_predictions_to_instances,
                taken: Default::default(),
            });
        }
        if steps.is_empty() {
            return Err(format!("node \"{node_name}\" has no steps"));
        }
        if router == Router::Splitter
            && steps.iter().map(|s| s.weight.unwrap_or(0)).sum::<u32>() != 100
        {
            return Err(format!(
                "InferenceGraph[{name}] Node[{node_name}] splitter node: the sum of traffic \
                 weights for all routing targets should be 100"
            ));
        }
        nodes.insert(node_name, GraphNode { router, steps });
    }
    let graph = Graph { nodes };
    for (node_name, node) in &graph.nodes {
        for step in &node.steps {
            if let StepTarget::Node(next) = &step.target {
                if !graph.nodes.contains_key(next) {
                    return Err(format!(
                        "node \"{node_name}\" has a step to node \"{next}\", which the graph \
                         does not have"
                    ));
                }
            }
        }
    }
    if let Some(cycle) = cycle(&graph) {
        return Err(format!("node \"{cycle}\" reaches itself through its steps"));
    }
    Ok(graph)
}

/// The model a `serviceUrl` names: its host's first label.
fn service_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', ':', '?']).next()?;
    let first = host.split('.').next()?;
    (!first.is_empty()).then(|| first.to_owned())
}

fn target_name(target: &StepTarget) -> &str {
    match target {
        StepTarget::Model(m) | StepTarget::Node(m) => m,
    }
}

/// A node that reaches itself through `nodeName` steps, if any.
fn cycle(graph: &Graph) -> Option<String> {
    fn visit<'a>(
        graph: &'a Graph,
        node: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if path.contains(&node) {
            return Some(node.to_owned());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for step in &graph.nodes.get(node)?.steps {
            if let StepTarget::Node(next) = &step.target {
                if let Some(c) = visit(graph, next, path, done) {
                    return Some(c);
                }
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    graph
        .nodes
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQUENCE: &str = r#"
---
apiVersion: "serving.kserve.io/v1beta1"
kind: "InferenceService"
metadata:
  name: "sklearn-iris"
spec:
  predictor:
    sklearn:
      storageUri: "gs://kfserving-examples/models/sklearn/1.0/model"
---
apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: model-chainer
spec:
  nodes:
    root:
      routerType: Sequence
      steps:
        - serviceName: sklearn-iris
        - serviceName: xgboost-iris
          data: $request
"#;

    #[test]
    fn kserves_yaml_reads_as_it_is_applied() {
        let (name, graph) = parse(SEQUENCE).unwrap();
        assert_eq!(name, "model-chainer");
        let root = &graph.nodes[ROOT_NODE];
        assert_eq!(root.router, Router::Sequence);
        assert_eq!(
            root.steps[0].target,
            StepTarget::Model("sklearn-iris".into())
        );
        assert_eq!(root.steps[1].data, StepData::Request);
        let switch =
            "kind: InferenceGraph\nmetadata: {name: s}\nspec:\n  nodes:\n    root:\n      \
                      routerType: Switch\n      steps:\n      - serviceUrl: \
                      http://single-1.default.{$your-domain}/switch\n        condition: \
                      \"[@this].#(source==client)\"\n";
        let (_, graph) = parse(switch).unwrap();
        let step = &graph.nodes[ROOT_NODE].steps[0];
        assert_eq!(step.target, StepTarget::Model("single-1".into()));
        assert_eq!(step.condition.as_deref(), Some("[@this].#(source==client)"));
    }

    #[test]
    fn what_kserve_refuses_is_refused_in_its_words() {
        let graph = |nodes: &str| {
            parse(&format!(
                "kind: InferenceGraph\nmetadata: {{name: g}}\nspec:\n  nodes:\n{nodes}"
            ))
            .unwrap_err()
        };
        let cases = [
            (
                "    other:\n      routerType: Sequence\n      steps: [{serviceName: a}]\n",
                "root node not found",
            ),
            (
                "    root:\n      routerType: Splitter\n      steps: [{serviceName: a, weight: 20}, {serviceName: b, weight: 70}]\n",
                "should be 100",
            ),
            (
                "    root:\n      routerType: Splitter\n      steps: [{serviceName: a}]\n",
                "missing the 'Weight'",
            ),
            (
                "    root:\n      routerType: Sequence\n      steps: [{serviceName: a, nodeName: b}]\n",
                "more than one of nodeName",
            ),
            (
                "    root:\n      routerType: Sequence\n      steps: [{name: x, serviceName: a}, {name: x, serviceName: b}]\n",
                "more than one step with name \"x\"",
            ),
            (
                "    root:\n      routerType: Switch\n      steps: [{serviceName: a}]\n",
                "has no condition",
            ),
            (
                "    root:\n      routerType: Sequence\n      steps: [{nodeName: n}]\n    n:\n      routerType: Sequence\n      steps: [{nodeName: root}]\n",
                "reaches itself",
            ),
            (
                "    root:\n      routerType: Chain\n      steps: [{serviceName: a}]\n",
                "invalid route type: Chain",
            ),
        ];
        for (nodes, words) in cases {
            let e = graph(nodes);
            assert!(e.contains(words), "{words}: {e}");
        }
    }

    #[test]
    fn a_service_url_names_its_host() {
        assert_eq!(
            service_of_url("http://single-1.default.example.com/switch").as_deref(),
            Some("single-1")
        );
        assert_eq!(service_of_url("iris:8080/v1").as_deref(), Some("iris"));
        assert_eq!(service_of_url("http:///x"), None);
    }
}
