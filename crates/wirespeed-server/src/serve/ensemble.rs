//! Running an ensemble (Triton's `platform: "ensemble"`): its steps, in
//! waves of those whose inputs are ready (run together), each through its own
//! model's scheduler (so each step batches with that model's other
//! requests, under its concurrency and queue), with the request's
//! deadline, parameters and trace, and counted in that model's statistics
//! as Triton counts a composing model's.
//!
//! Tensors move from step to step: each ensemble tensor is handed to the
//! last step (or output) that takes it, and copied only for the ones
//! before. The ensemble's own answer is its requested outputs. A step's
//! error ends the request, named by its step and model, with its own kind
//! (a step's 400 is the ensemble's 400). Dropping the request (a client
//! that leaves, a deadline) drops the step that runs, which cancels it in
//! its scheduler.
//!
//! At start and at each load, [`check`] holds every ensemble against the
//! served models (`wirespeed_models::check_steps`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use wirespeed_core::{Composition, Error, ModelMetadata, RequestedOutput, Tensor};
use wirespeed_scheduler::{CallContext, Spent};

use crate::serve::graph;
use crate::serve::pipeline::Target;
use crate::serve::selection;
use crate::serve::served::{ServedModel, ServedModels};
use crate::serve::statistics::FailureReason;
use crate::serve::timing::Stages;

/// Ensembles of ensembles deeper than this are refused at run time (a
/// cycle through loads that the load-time check could not see).
const MAX_DEPTH: usize = 8;

/// What an ensemble's run yields: its outputs in the order asked.
type Run<'a> = Pin<Box<dyn Future<Output = Result<Vec<Tensor>, Error>> + Send + 'a>>;

/// Runs `ensemble`'s steps on `inputs`, answering `requested` (all of its
/// outputs when empty).
pub(crate) fn run<'a>(
    models: &'a ServedModels,
    ensemble: &'a ServedModel,
    inputs: Vec<Tensor>,
    requested: &'a [RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Run<'a> {
    Box::pin(async move {
        let composition = ensemble
            .model
            .composition()
            .ok_or_else(|| Error::internal("an ensemble run on a model that is not one"))?;
        let metadata = ensemble.metadata();
        if depth > MAX_DEPTH {
            return Err(Error::model_failed(format!(
                "ensemble '{}' is nested more than {MAX_DEPTH} deep (do its steps call it back?)",
                metadata.name
            )));
        }
        metadata.check_inputs(&inputs)?;
        let outputs = metadata.resolve_outputs(requested.iter().map(|o| o.name.as_str()))?;
        let wanted: Vec<&str> = outputs
            .iter()
            .map(|&i| metadata.outputs[i].name.as_str())
            .collect();
        let mut tensors = Tensors::new(composition, &wanted, inputs);
        // In waves: every step whose inputs are ready runs at once with the
        // others of its wave (a Python or pool step computes while another
        // waits), in the composition's order within the wave.
        let steps = &composition.steps;
        let mut done = vec![false; steps.len()];
        while done.iter().any(|d| !d) {
            let wave: Vec<usize> = (0..steps.len())
                .filter(|&n| !done[n] && steps[n].inputs.iter().all(|(_, t)| tensors.is_ready(t)))
                .collect();
            if wave.is_empty() {
                return Err(Error::internal(format!(
                    "ensemble '{}': no step can run, though some have not",
                    metadata.name
                )));
            }
            let mut running: Vec<Run<'_>> = Vec::with_capacity(wave.len());
            for &n in &wave {
                done[n] = true;
                let step = &steps[n];
                let named = move |e: Error| {
                    Error::new(
                        e.kind(),
                        format!(
                            "ensemble '{}' step {} (model '{}'): {}",
                            metadata.name,
                            n + 1,
                            step.model,
                            e.message()
                        ),
                    )
                };
                let served = models
                    .target(&Target::new(&step.model, step.version.as_deref()))
                    .map_err(named)?;
                if let Err(reason) = served.model.ready() {
                    return Err(named(Error::new(
                        wirespeed_core::ErrorKind::Unavailable,
                        format!("model '{}' is not ready: {reason}", step.model),
                    )));
                }
                let mut step_inputs = Vec::with_capacity(step.inputs.len());
                for (input, tensor) in &step.inputs {
                    let t = tensors.take(tensor, input).ok_or_else(|| {
                        named(Error::internal(format!(
                            "ensemble tensor '{tensor}' was not ready for input '{input}'"
                        )))
                    })?;
                    step_inputs.push(t);
                }
                let step_outputs: Vec<RequestedOutput> = step
                    .outputs
                    .iter()
                    .map(|(output, _)| RequestedOutput {
                        name: output.clone(),
                        parameters: Vec::new(),
                    })
                    .collect();
                let step_call = CallContext {
                    started: std::time::Instant::now(),
                    parameters: call.parameters.clone(),
                    deadline: call.deadline,
                    priority: call.priority,
                    timeout: call.timeout,
                    trace: call.trace.clone(),
                    responses: None,
                    input_parameters: Vec::new(),
                };
                running.push(Box::pin(async move {
                    call_model(
                        models,
                        &served,
                        step_inputs,
                        &step_outputs,
                        step_call,
                        depth + 1,
                    )
                    .await
                    .map_err(named)
                }));
            }
            for (answer, &n) in join_all(running).await.into_iter().zip(&wave) {
                let answer = answer?;
                let produced = answer
                    .into_iter()
                    .zip(&steps[n].outputs)
                    .map(|(t, (_, tensor))| (tensor.clone(), t));
                tensors.add(produced);
            }
        }
        wanted
            .iter()
            .map(|&name| {
                tensors.take(name, name).ok_or_else(|| {
                    Error::internal(format!(
                        "ensemble '{}' output '{name}' was not given by its steps",
                        metadata.name
                    ))
                })
            })
            .collect()
    })
}

/// The ensemble tensors of one request, and how many more takers each
/// has: the last one gets it moved, the ones before a copy.
struct Tensors<'a> {
    ready: HashMap<String, Tensor>,
    takers: HashMap<&'a str, usize>,
}

impl<'a> Tensors<'a> {
    fn new(composition: &'a Composition, wanted: &[&'a str], inputs: Vec<Tensor>) -> Tensors<'a> {
        let mut takers: HashMap<&str, usize> = HashMap::new();
        for step in &composition.steps {
            for (_, tensor) in &step.inputs {
                *takers.entry(tensor.as_str()).or_default() += 1;
            }
        }
        for name in wanted {
            *takers.entry(name).or_default() += 1;
        }
        Tensors {
            ready: inputs.into_iter().map(|t| (t.name.clone(), t)).collect(),
            takers,
        }
    }

    fn add(&mut self, produced: impl IntoIterator<Item = (String, Tensor)>) {
        self.ready.extend(produced);
    }

    /// Whether tensor `name` has been given.
    fn is_ready(&self, name: &str) -> bool {
        self.ready.contains_key(name)
    }

    /// Tensor `name`, named `as_name` for its taker.
    fn take(&mut self, name: &str, as_name: &str) -> Option<Tensor> {
        let left = self.takers.get_mut(name)?;
        *left = left.saturating_sub(1);
        let mut t = if *left == 0 {
            self.ready.remove(name)?
        } else {
            self.ready.get(name)?.clone()
        };
        t.name = as_name.to_owned();
        Some(t)
    }
}

/// Every future of `running`, polled together; their outputs in order.
pub(crate) async fn join_all<T>(
    mut running: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
) -> Vec<T> {
    let mut results: Vec<Option<T>> = running.iter().map(|_| None).collect();
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
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// Runs `served` for a caller (the pipeline, an ensemble's step, a graph's
/// step, an application's candidate, a model's call to another): a
/// composite model through the models it calls ([`compose`]), any other
/// through its own scheduler.
pub(crate) async fn call_model(
    models: &ServedModels,
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<Vec<Tensor>, Error> {
    if composite(served.model.as_ref()) {
        compose(models, served, inputs, outputs, call, depth)
            .await
            .map(|selected| selected.outputs)
    } else {
        step_through(served, inputs, outputs, call).await
    }
}

/// Whether `model` answers through other models (an ensemble, an
/// InferenceGraph, an application) rather than computing itself.
pub(crate) fn composite(model: &dyn wirespeed_core::Model) -> bool {
    model.composition().is_some() || model.graph().is_some() || model.selection().is_some()
}

/// Runs a composite model: an application's candidates (`selection.rs`),
/// a graph's nodes (`graph.rs`), or an ensemble's steps ([`run`]).
pub(crate) async fn compose(
    models: &ServedModels,
    served: &ServedModel,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: CallContext,
    depth: usize,
) -> Result<selection::Selected, Error> {
    if served.model.selection().is_some() {
        selection::run(models, served, inputs, outputs, call, depth).await
    } else if served.model.graph().is_some() {
        graph::run(models, served, inputs, call, depth)
            .await
            .map(selection::Selected::all)
    } else {
        run(models, served, inputs, outputs, call, depth)
            .await
            .map(selection::Selected::all)
    }
}

/// One step through its model's scheduler, counted in its statistics.
pub(crate) async fn step_through(
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
    let mut spent = Spent::default();
    let mut counted = Counted {
        served,
        stages: &stages,
        done: false,
    };
    let answer = served
        .scheduler
        .run(inputs, outputs, call, &mut spent)
        .await;
    counted.done = true;
    drop(counted);
    stages.scheduled(spent);
    match &answer {
        Ok(_) => served.stats.success(&stages),
        Err(e) => served
            .stats
            .failure(stages.elapsed(), FailureReason::of(e.kind())),
    }
    answer.map(|a| a.outputs)
}

/// Counts a step whose request went away while it ran as canceled.
struct Counted<'a> {
    served: &'a ServedModel,
    stages: &'a Stages,
    done: bool,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.served
                .stats
                .failure(self.stages.elapsed(), FailureReason::Canceled);
        }
    }
}

/// Whether every step of `composition` (the ensemble `name`) fits the
/// model it calls as served in `models` (`wirespeed_models::check_steps`).
pub(crate) fn check(
    models: &ServedModels,
    name: &str,
    metadata: &ModelMetadata,
    composition: &Composition,
) -> Result<(), String> {
    wirespeed_models::check_steps(name, metadata, composition, |model, version| {
        models
            .target(&Target::new(model, version))
            .map(|served| Arc::clone(&served.model))
            .map_err(|e| e.message().to_owned())
    })
}

/// Every served ensemble checked with [`check`], and every application
/// with `selection::check`: the first misfit.
pub(crate) fn check_all(models: &ServedModels) -> Result<(), String> {
    for (name, served) in models.all() {
        check_model(models, &name, &served.model)?;
    }
    Ok(())
}

/// Whether `model` (served as `name`) calls only models served in
/// `models`, as they take and give: an ensemble's steps, an application's
/// candidates.
pub(crate) fn check_model(
    models: &ServedModels,
    name: &str,
    model: &Arc<dyn wirespeed_core::Model>,
) -> Result<(), String> {
    if let Some(composition) = model.composition() {
        check(models, name, model.metadata(), composition)?;
    }
    if let Some(selector) = model.selection() {
        selection::check(models, name, model.metadata(), selector)?;
    }
    if let Some(g) = model.graph() {
        for (node, step) in g
            .nodes
            .iter()
            .flat_map(|(n, node)| node.steps.iter().map(move |s| (n, s)))
        {
            if let wirespeed_core::StepTarget::Model(m) = &step.target {
                models.target(&Target::new(m, None)).map_err(|e| {
                    format!(
                        "inference graph '{name}' node '{node}': step '{m}': {} (a graph's \
                         steps are served models)",
                        e.message()
                    )
                })?;
            }
        }
    }
    Ok(())
}
