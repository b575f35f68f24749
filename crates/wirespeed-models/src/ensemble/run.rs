//! Running an ensemble (Triton's `platform: "ensemble"`): its steps, in
//! waves of those whose inputs are ready (run together), each called
//! through the server's [`ModelCaller`]: through its own model's scheduler (so
//! each step batches with that model's other requests, under its
//! concurrency and queue), with the request's deadline, parameters and
//! trace, and counted in that model's statistics as Triton counts a
//! composing model's.
//!
//! Tensors move from step to step: each ensemble tensor is handed to the
//! last step (or output) that takes it, and copied only for the ones
//! before. The ensemble's own answer is its requested outputs. A step's
//! error ends the request, named by its step and model, with its own kind
//! (a step's 400 is the ensemble's 400). Dropping the request (a client
//! that leaves, a deadline) drops the step that runs, which cancels it in
//! its scheduler.

use std::collections::HashMap;

use wirespeed_backend::ModelCaller;
use wirespeed_backend::Run;
use wirespeed_core::{Error, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use super::{Ensemble, Step};
use crate::composites::join_all;

/// Runs `ensemble`'s steps on `inputs` (checked against its own by the
/// server), answering `requested` (its outputs, resolved by the server).
pub(super) async fn run(
    ensemble: &Ensemble,
    inputs: Vec<Tensor>,
    requested: &[RequestedOutput],
    call: CallContext,
    calls: &dyn ModelCaller,
) -> Result<Vec<Tensor>, Error> {
    let metadata = &ensemble.metadata;
    let wanted: Vec<&str> = requested.iter().map(|o| o.name.as_str()).collect();
    let steps = &ensemble.steps;
    let mut tensors = Tensors::new(steps, &wanted, inputs);
    // In waves: every step whose inputs are ready runs at once with the
    // others of its wave (a Python or pool step computes while another
    // waits), in the steps' order within the wave.
    let mut done = vec![false; steps.len()];
    // Triton's words: a step's own error names its model.
    let named = |e: Error| {
        Error::new(
            e.kind(),
            format!("in ensemble '{}', {}", metadata.name, e.message()),
        )
    };
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
        let step_outputs: Vec<Vec<RequestedOutput>> = wave
            .iter()
            .map(|&n| {
                steps[n]
                    .outputs
                    .iter()
                    .map(|(output, _)| RequestedOutput {
                        name: output.clone(),
                        parameters: Vec::new(),
                    })
                    .collect()
            })
            .collect();
        let mut running: Vec<Run<'_, Vec<Tensor>>> = Vec::with_capacity(wave.len());
        for (&n, step_outputs) in wave.iter().zip(&step_outputs) {
            done[n] = true;
            let step = &steps[n];
            let mut step_inputs = Vec::with_capacity(step.inputs.len());
            for (input, tensor) in &step.inputs {
                let t = tensors.take(tensor, input).ok_or_else(|| {
                    named(Error::internal(format!(
                        "ensemble tensor '{tensor}' was not ready for input '{input}'"
                    )))
                })?;
                step_inputs.push(t);
            }
            running.push(calls.call(
                &step.model,
                step.version.as_deref(),
                step_inputs,
                step_outputs,
                call.onward(),
            ));
        }
        for (answer, &n) in join_all(running).await.into_iter().zip(&wave) {
            let answer = answer.map_err(named)?;
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
}

/// The ensemble tensors of one request, and how many more takers each
/// has: the last one gets it moved, the ones before a copy.
struct Tensors<'a> {
    ready: HashMap<String, Tensor>,
    takers: HashMap<&'a str, usize>,
}

impl<'a> Tensors<'a> {
    fn new(steps: &'a [Step], wanted: &[&'a str], inputs: Vec<Tensor>) -> Tensors<'a> {
        let mut takers: HashMap<&str, usize> = HashMap::new();
        for step in steps {
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
