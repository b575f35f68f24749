//! Models that answer through other served models, each kind with a
//! runner of its own: Triton's ensembles (`ensemble.rs`), KServe's
//! InferenceGraphs (`graph.rs`) and Clipper's applications
//! (`application.rs`). A served model is one of them when it carries a
//! [`Composite`] (`served.rs`), loaded by its kind's backend in
//! `wirespeed-models`; [`run`] is the one place that tells the kinds apart.
//!
//! What every runner shares is here: the depth they may nest to
//! ([`enter`]), how a callee is found and asked ([`callee`], [`onward`],
//! [`call`]), polling callees together ([`join_all`], and [`gather_until`]
//! for an application's objective), and the check of a composite against
//! the served models at start and at each load ([`check_model`]).

pub mod application;
pub mod ensemble;
pub mod graph;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use wirespeed_core::{Composite, CompositeKind, Error, ErrorKind, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use crate::counting::Counting;
use crate::served::Target;
use crate::served::{ServedModel, ServedModels};
use crate::timing::Stages;

/// Composites within composites deeper than this are refused at run time
/// (a cycle through loads that the load-time check could not see).
const MAX_DEPTH: usize = 8;

/// What a composite's run yields.
pub type Run<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// What a composite answered.
pub struct Composed {
    /// Its outputs, in the order asked.
    pub outputs: Vec<Tensor>,
    /// An application's blended candidates cut at the latency objective
    /// (or failed).
    pub stragglers: usize,
    /// The outputs are the composite's defaults: no candidate answered by
    /// the objective.
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

/// Runs the composite `served` (whose kind is `composite`) on `inputs`,
/// answering `outputs` (all of its outputs when empty), `depth` composites
/// deep.
pub async fn run(
    models: &ServedModels,
    served: &ServedModel,
    composite: &Composite,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Composed, Error> {
    enter(composite, depth)?;
    match &composite.kind {
        CompositeKind::Ensemble(composition) => {
            ensemble::run(models, composite, composition, inputs, outputs, call, depth)
                .await
                .map(Composed::all)
        }
        CompositeKind::Graph(g) => graph::run(models, composite, g, inputs, call, depth)
            .await
            .map(Composed::all),
        CompositeKind::Application(selector) => {
            application::run(
                models,
                served,
                selector.as_ref(),
                inputs,
                outputs,
                call,
                depth,
            )
            .await
        }
    }
}

/// Refuses a composite run more than [`MAX_DEPTH`] composites deep.
fn enter(composite: &Composite, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::model_failed(format!(
            "{} '{}' is nested more than {MAX_DEPTH} deep (do the models it calls call it back?)",
            composite.kind.noun(),
            composite.metadata.name
        )));
    }
    Ok(())
}

/// Runs `served` for another model (an ensemble's step, a graph's step,
/// an application's candidate, a model's call to another, BLS): a
/// composite through the models it calls, any other through its own
/// scheduler, counted in its statistics.
pub async fn call(
    models: &ServedModels,
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Vec<Tensor>, Error> {
    match served.composite() {
        Some(composite) => run(models, served, composite, inputs, outputs, call, depth)
            .await
            .map(|composed| composed.outputs),
        None => step_through(served, inputs, outputs, call).await,
    }
}

/// A model that computes, through its response cache and its scheduler
/// (`ServedModel::answer`), counted in its statistics.
pub async fn step_through(
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
) -> Result<Vec<Tensor>, Error> {
    let mut stages = Stages::start();
    if served.max_batch_size > 0 {
        stages.inferences = inputs
            .iter()
            .find_map(|t| t.shape.first().copied())
            .unwrap_or(1) as u64;
    }
    let counting = Counting::new(served, stages.started());
    let answer = served.answer(inputs, outputs, call, &mut stages).await;
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

/// The call a composite makes to one of the models it calls: the
/// request's parameters, deadline, priority and trace, on a clock of its
/// own; no stream.
pub fn onward(call: &CallContext) -> CallContext {
    CallContext {
        started: Instant::now(),
        parameters: call.parameters.clone(),
        deadline: call.deadline,
        priority: call.priority,
        timeout: call.timeout,
        trace: call.trace.clone(),
        responses: None,
        input_parameters: Vec::new(),
    }
}

/// `error` of a call, named by who made it (`what`: "graph 'g' node 'n'
/// step 'm'").
pub fn named(what: &str, error: Error) -> Error {
    Error::new(error.kind(), format!("{what}: {}", error.message()))
}

/// Every future of `running`, polled together; their outputs in order.
pub async fn join_all<T>(running: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    gather_until(running, None)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Every future of `running`, polled together until all are done or
/// `until` passes: each one's output, or `None` for one cut there.
pub async fn gather_until<T>(
    mut running: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
    until: Option<Instant>,
) -> Vec<Option<T>> {
    let mut results: Vec<Option<T>> = running.iter().map(|_| None).collect();
    let mut cut = until.map(|at| Box::pin(tokio::time::sleep_until(at.into())));
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, result) in running.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *result = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        let passed = cut
            .as_mut()
            .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
        if pending && !passed {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results
}

/// Every served composite checked with [`check_model`]: the first misfit.
pub fn check_all(models: &ServedModels) -> Result<(), String> {
    for (name, served) in models.all() {
        if let Some(composite) = served.composite() {
            check_model(models, &name, composite)?;
        }
    }
    Ok(())
}

/// Whether `composite` (served as `name`) calls only models served in
/// `models`, as they take and give (`wirespeed_models::check_composite`).
pub fn check_model(models: &ServedModels, name: &str, composite: &Composite) -> Result<(), String> {
    wirespeed_models::check_composite(name, composite, |model, version| {
        models
            .target(&Target::new(model, version))
            .map(|served| Arc::clone(&served.model))
            .map_err(|e| e.message().to_owned())
    })
}
