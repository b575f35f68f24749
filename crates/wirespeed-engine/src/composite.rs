//! Running a model that answers through other served models (Triton's
//! ensembles, KServe's InferenceGraphs, Clipper's applications: each a
//! [`Composite`] of `wirespeed-models`, loaded by its backend). The engine
//! never asks which kind it serves: it hands each run the same
//! [`ModelCaller`] ([`Composing`], one level deeper than the run's own;
//! a Python model's BLS calls reach the server's, `calls.rs`), which is
//! what every composite shares: how a callee is
//! found and asked ([`callee`], [`call`]: through its scheduler, counted
//! in its statistics), the depth composites may nest to and the inputs and
//! outputs of those that declare them ([`run`]), and the check of a
//! composite against the served models at start and at each load
//! ([`check_model`]). [`answer`] is the one place that tells a composite
//! from a model that computes, for the pipeline and every call.

use std::sync::Arc;
use std::time::Instant;

use wirespeed_core::{Binding, Error, ErrorKind, Model, RequestedOutput, Tensor};
use wirespeed_models::{Composed, Composite, ModelCaller, Run};
use wirespeed_scheduler::CallContext;

use crate::counting::Counting;
use crate::served::Target;
use crate::served::{ServedModel, ServedModels};
use crate::timing::Stages;

/// Composites within composites deeper than this are refused at run time
/// (a cycle through loads that the load-time check could not see).
const MAX_DEPTH: usize = 8;

/// Runs `composite` on `inputs`, answering `outputs` (all of its outputs
/// when empty), `depth` composites deep: its inputs checked and its
/// outputs resolved against what it declares (every composite shares
/// this), and the models it calls called through [`Composing`], one level
/// deeper.
pub async fn run(
    models: &ServedModels,
    composite: &dyn Composite,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Composed, Error> {
    if depth > MAX_DEPTH {
        return Err(Error::model_failed(format!(
            "{} '{}' is nested more than {MAX_DEPTH} deep (do the models it calls call it back?)",
            composite.noun(),
            composite.metadata().name
        )));
    }
    let resolved;
    let outputs = if composite.binding() == Binding::Declared {
        let metadata = composite.metadata();
        metadata.check_inputs(&inputs)?;
        let wanted = metadata.resolve_outputs(outputs.iter().map(|o| o.name.as_str()))?;
        resolved = wanted
            .iter()
            .map(|&i| RequestedOutput {
                name: metadata.outputs[i].name.clone(),
                parameters: Vec::new(),
            })
            .collect::<Vec<_>>();
        &resolved[..]
    } else {
        outputs
    };
    let calls = Composing {
        models,
        depth: depth + 1,
    };
    composite.run(inputs, outputs, call, &calls).await
}

/// The served models, as a composite `depth` composites deep calls them.
pub struct Composing<'a> {
    models: &'a ServedModels,
    depth: usize,
}

impl<'a> Composing<'a> {
    /// The calls of a composite that a client's request runs (not one
    /// inside another): Clipper's feedback asks an application's
    /// candidates through it.
    pub fn new(models: &'a ServedModels) -> Composing<'a> {
        Composing { models, depth: 1 }
    }
}

impl ModelCaller for Composing<'_> {
    fn callee(&self, model: &str, version: Option<&str>) -> Result<Arc<dyn Model>, Error> {
        callee_model(self.models, model, version)
    }

    fn call<'a>(
        &'a self,
        model: &'a str,
        version: Option<&'a str>,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
    ) -> Run<'a, Vec<Tensor>> {
        Box::pin(call_named(
            self.models,
            model,
            version,
            inputs,
            outputs,
            call,
            self.depth,
        ))
    }
}

/// The model a caller names, ready ([`callee`]): what it takes and gives.
pub fn callee_model(
    models: &ServedModels,
    model: &str,
    version: Option<&str>,
) -> Result<Arc<dyn Model>, Error> {
    callee(models, model, version).map(|served| Arc::clone(&served.model))
}

/// [`call`] of the model a caller names, found ready ([`callee`]): how
/// every [`ModelCaller`] of the server answers a call.
pub async fn call_named(
    models: &ServedModels,
    model: &str,
    version: Option<&str>,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Vec<Tensor>, Error> {
    let served = callee(models, model, version)?;
    self::call(models, &served, inputs, outputs, call, depth).await
}

/// How `served` answers, `depth` composites deep, whoever asks (a
/// client's request, an ensemble's step, a graph's step, an
/// application's candidate, a model's call): a composite through its own
/// run, any other model through its response cache and scheduler
/// (`ServedModel::answer`), whose times go to `stages`. The one place
/// that tells the two apart.
pub async fn answer(
    models: &ServedModels,
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    stages: &mut Stages,
    depth: usize,
) -> Result<Composed, Error> {
    let Some(composite) = served.composite() else {
        let answer = served.answer(inputs, outputs, call, stages).await?;
        return Ok(Composed {
            outputs: answer.outputs,
            stragglers: 0,
            default: answer.default,
        });
    };
    let compute = Instant::now();
    let composed = run(models, composite.as_ref(), inputs, outputs, call, depth).await;
    stages.compute = compute.elapsed();
    composed
}

/// Runs `served` for another model (an ensemble's step, a graph's step,
/// an application's candidate, a model's call to another, BLS) as
/// [`answer`] does, counted in its statistics as a client's request is.
pub async fn call(
    models: &ServedModels,
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Vec<Tensor>, Error> {
    let mut stages = Stages::start();
    if served.max_batch_size > 0 {
        stages.inferences = inputs
            .iter()
            .find_map(|t| t.shape.first().copied())
            .unwrap_or(1) as u64;
    }
    let counting = Counting::new(served, stages.started());
    let answer = answer(models, served, inputs, outputs, call, &mut stages, depth).await;
    counting.finish(answer.as_ref().map(drop), &stages);
    answer.map(|a| a.outputs)
}

/// The served model `model` (in `version`, the served one when `None`)
/// that a composite calls, when it can answer now.
pub fn callee(
    models: &ServedModels,
    model: &str,
    version: Option<&str>,
) -> Result<Arc<ServedModel>, Error> {
    let served = models.target(&Target::new(model, version))?;
    if let Err(reason) = served.model.ready() {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("model '{model}' is not ready: {reason}"),
        ));
    }
    Ok(served)
}

/// Every served composite checked with [`check_model`]: the first misfit.
pub fn check_all(models: &ServedModels) -> Result<(), String> {
    for (name, served) in models.all() {
        if let Some(composite) = served.composite() {
            check_model(models, &name, composite.as_ref())?;
        }
    }
    Ok(())
}

/// Whether `composite` (served as `name`) calls only models served in
/// `models`, as they take and give ([`Composite::check`]).
pub fn check_model(
    models: &ServedModels,
    name: &str,
    composite: &dyn Composite,
) -> Result<(), String> {
    composite.check(name, &|model, version| {
        models
            .target(&Target::new(model, version))
            .map(|served| Arc::clone(&served.model))
            .map_err(|e| e.message().to_owned())
    })
}
