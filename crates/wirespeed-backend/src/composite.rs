//! A model that computes nothing itself: it answers through other served
//! models, which it calls through the server's [`ModelCaller`], the seam a
//! Python model's BLS call goes through too. Triton's ensemble, KServe's
//! InferenceGraph and Clipper's application are composites
//! (`wirespeed-models`' `ensemble/`, `graph/` and `application/`), each
//! with its own run; the server gives every run a caller one level deeper
//! than its own (composites nest to a bound), which finds a callee, runs it
//! through its own scheduler, counts it in its statistics and hands the
//! answer back. The server never asks which kind of composite it serves.
//!
//! A composite is still a [`Model`] for everything a client reads of a
//! model (metadata, readiness, its binding), so that every endpoint
//! answers for it as for any other; the server never calls its `infer`.

use std::any::Any;
use std::sync::Arc;

use wirespeed_core::{Error, Model, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use crate::caller::{ModelCaller, Run};

/// The served models, as a composite's check finds them: by name and
/// version (the served one when `None`), or why not.
pub type Served<'a> = dyn Fn(&str, Option<&str>) -> Result<Arc<dyn Model>, String> + 'a;

/// A model that answers through the models it calls.
pub trait Composite: Model {
    /// What errors and logs call its kind: "ensemble", "inference graph",
    /// "application".
    fn noun(&self) -> &'static str;

    /// The models it calls, by name and version, each once.
    fn callees(&self) -> Vec<(String, Option<String>)>;

    /// Whether it calls only models that `served` finds (by name and
    /// version), as they take and give; the first misfit, named. Asked at
    /// start and at each load.
    fn check(&self, name: &str, served: &Served<'_>) -> Result<(), String>;

    /// Answers `inputs` with `outputs`, calling the models it calls
    /// through `calls`. For a composite that declares its tensors
    /// ([`Binding::Declared`](wirespeed_core::Binding)), the server has
    /// checked `inputs` against them and resolved `outputs`: each a
    /// declared output, once, and every one when the request named none.
    fn run<'a>(
        &'a self,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
        calls: &'a dyn ModelCaller,
    ) -> Run<'a, Composed>;

    /// The request headers it reads (HTTP's, or gRPC's metadata), each
    /// given to it as the string parameter named beside it: an
    /// application keyed by a header (`key = "header:x-user-id"`).
    fn header_parameters(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Itself, for the pages that show one kind's own state (an
    /// application's feedback and selections, a graph's routes, an
    /// ensemble's steps in its configuration).
    fn as_any(&self) -> &dyn Any;
}

/// What a composite answered.
#[derive(Debug)]
pub struct Composed {
    /// Its outputs, in the order asked.
    pub outputs: Vec<Tensor>,
    /// Calls whose answers it went without (an application's candidates
    /// cut at its latency objective, or failed).
    pub stragglers: usize,
    /// The outputs are its defaults: nobody it called answered in time.
    pub default: bool,
}

impl Composed {
    /// Outputs that every model called gave: nothing cut, no default.
    pub fn all(outputs: Vec<Tensor>) -> Composed {
        Composed {
            outputs,
            stragglers: 0,
            default: false,
        }
    }
}

/// `error` of a call, named by who made it (`what`: "graph 'g' node 'n'
/// step 'm'").
pub fn named(what: &str, error: Error) -> Error {
    Error::new(error.kind(), format!("{what}: {}", error.message()))
}
