//! KServe's InferenceGraph, as it runs in-process: routing nodes
//! (Sequence, Switch, Ensemble, Splitter), each a list of steps whose
//! targets are served models or other nodes, run from the node `root`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The node every graph starts from, as KServe names it.
pub(crate) const ROOT_NODE: &str = "root";

/// A graph's nodes, by name; `root` among them (checked at load).
#[derive(Debug, Clone)]
pub struct Graph {
    /// The nodes, by name.
    pub nodes: BTreeMap<String, GraphNode>,
}

/// One routing node.
#[derive(Debug, Clone)]
pub struct GraphNode {
    /// How it routes.
    pub router: Router,
    /// Its steps, in the order written.
    pub steps: Vec<GraphStep>,
}

/// How a node routes a request over its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    /// Each step in turn; the last one's answer is the node's.
    Sequence,
    /// The first step whose condition the request meets.
    Switch,
    /// Every step at once; their answers merged by step name.
    Ensemble,
    /// One step, drawn by the steps' weights (percentages).
    Splitter,
}

impl Router {
    /// KServe's name of it.
    pub fn name(self) -> &'static str {
        match self {
            Router::Sequence => "Sequence",
            Router::Switch => "Switch",
            Router::Ensemble => "Ensemble",
            Router::Splitter => "Splitter",
        }
    }
}

/// One step of a node.
#[derive(Debug, Clone)]
pub struct GraphStep {
    /// Its name (KServe's `name`): an Ensemble's key for its answer.
    pub name: Option<String>,
    /// Where it goes.
    pub target: StepTarget,
    /// In a Sequence, what the step takes: the graph's request (the
    /// default, as KServe's router does) or the previous step's answer.
    pub data: StepData,
    /// A GJSON condition: a Switch's route, or a Sequence step that runs
    /// only when the previous answer meets it.
    pub condition: Option<String>,
    /// A Splitter's share, in percent.
    pub weight: Option<u32>,
    /// A hard dependency: its failure is the node's.
    pub hard: bool,
    /// KServe's `mapPredictionsToInstances`: a previous v1 answer's
    /// `predictions` become this step's `instances`.
    pub predictions_to_instances: bool,
    /// Requests routed to the step, for the metrics.
    pub taken: Taken,
}

/// A count of requests, shared by the threads that route them.
#[derive(Debug, Default)]
pub struct Taken(AtomicU64);

impl Taken {
    /// Counts one more.
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count now.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A copy counts on from the count it was copied at.
impl Clone for Taken {
    fn clone(&self) -> Taken {
        Taken(AtomicU64::new(self.get()))
    }
}

/// Where a step goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepTarget {
    /// A served model, by name (KServe's `serviceName`, or the service in
    /// a `serviceUrl`).
    Model(String),
    /// Another node of the graph (KServe's `nodeName`).
    Node(String),
}

/// What a Sequence step takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepData {
    /// `$request`: the graph's own request.
    Request,
    /// `$response`: the previous step's answer.
    Response,
}
