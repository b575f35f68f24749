//! A model that computes nothing itself: it answers through other served
//! models, as its kind says. The server runs it with that kind's runner
//! (`composite/` of `wirespeed-engine`), never through a scheduler and a
//! backend's [`Model::infer`]; as Triton's ensemble is a model whose
//! scheduler is the ensemble scheduler, the request path never asks a
//! model whether it is one.
//!
//! A composite is still a [`Model`] for everything a client reads of a
//! model (metadata, readiness, its binding), so that every endpoint
//! answers for it as for any other.

use std::sync::Arc;

use crate::{Binding, Composition, Error, Graph, Model, ModelMetadata, Selector, Tensor};

/// A composite model: what it declares, and how it runs.
pub struct Composite {
    /// Its own inputs and outputs, as clients see them.
    pub metadata: ModelMetadata,
    /// Whom it calls, and how.
    pub kind: CompositeKind,
}

/// The kinds of composite, each with a runner of its own in the server.
pub enum CompositeKind {
    /// Triton's ensemble: steps in running order, tensors flowing between
    /// them.
    Ensemble(Composition),
    /// KServe's InferenceGraph: routing nodes from `root`.
    Graph(Graph),
    /// Clipper's application: candidates chosen by a policy that learns
    /// from feedback.
    Application(Arc<dyn Selector>),
}

impl CompositeKind {
    /// The kind's name, as errors and logs call it.
    pub fn noun(&self) -> &'static str {
        match self {
            CompositeKind::Ensemble(_) => "ensemble",
            CompositeKind::Graph(_) => "inference graph",
            CompositeKind::Application(_) => "application",
        }
    }

    /// The models it calls, by name and version, each once: an ensemble's
    /// steps', a graph's or an application's candidates'.
    pub fn callees(&self) -> Vec<(String, Option<String>)> {
        let mut models: Vec<(String, Option<String>)> = Vec::new();
        let mut add = |model: &str, version: Option<&str>| {
            if !models
                .iter()
                .any(|(m, v)| m == model && v.as_deref() == version)
            {
                models.push((model.to_owned(), version.map(str::to_owned)));
            }
        };
        match self {
            CompositeKind::Ensemble(composition) => {
                for step in &composition.steps {
                    add(&step.model, step.version.as_deref());
                }
            }
            CompositeKind::Graph(graph) => {
                for step in graph.nodes.values().flat_map(|n| &n.steps) {
                    if let crate::StepTarget::Model(m) = &step.target {
                        add(m, None);
                    }
                }
            }
            CompositeKind::Application(selector) => {
                for candidate in selector.candidates() {
                    add(&candidate.model, candidate.version.as_deref());
                }
            }
        }
        models
    }
}

impl Model for Composite {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// A graph takes whatever its first steps take, and answers what its
    /// last ones give; the others bind as any model.
    fn binding(&self) -> Binding {
        match self.kind {
            CompositeKind::Graph(_) => Binding::Open,
            _ => Binding::Declared,
        }
    }

    /// Never called: the server runs a composite with its kind's runner.
    fn infer(&self, _inputs: &[Tensor], _outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        Err(Error::internal(format!(
            "{} '{}' runs through the models it calls, not through a backend",
            self.kind.noun(),
            self.metadata.name
        )))
    }
}
