//! `backend = "ensemble"` (Triton's `platform: "ensemble"`): a model made
//! of other models' steps, with tensors flowing from the ensemble's inputs
//! through the steps to its outputs.
//!
//! ```toml
//! backend = "ensemble"
//! max_batch_size = 8
//! [[inputs]]               # the ensemble's own tensors, as any model's
//! name = "RAW"
//! ...
//! [[steps]]
//! model = "preprocess"     # a model of the repository
//! # version = "1"          # optional; the served one by default
//! inputs = { INPUT0 = "RAW" }             # the step model's input = an ensemble tensor
//! outputs = { OUTPUT0 = "features" }      # the step model's output = an ensemble tensor
//! ```
//!
//! Loading checks the graph, as Triton does: every tensor is produced once
//! (an ensemble input or one step's output), every step input and every
//! ensemble output is produced by something, and the steps form no cycle;
//! they are kept in an order in which each step's inputs are ready. The
//! steps' models are checked against the served models at start and at
//! each load ([`check_steps`]); the steps run in `run.rs`.

mod run;
mod steps;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Deserialize;
use wirespeed_core::{Model, ModelMetadata, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use wirespeed_backend::composite::Served;
use wirespeed_backend::config::TensorConfig;
use wirespeed_backend::Run;
use wirespeed_backend::{Composed, Composite, CompositeBackend, ModelCaller, ModelSource};

pub use steps::Step;

/// `backend = "ensemble"`.
pub(crate) struct EnsembleBackend;

impl CompositeBackend for EnsembleBackend {
    fn name(&self) -> &'static str {
        "ensemble"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Composite>, String> {
        Ok(Arc::new(load(source)?))
    }
}

/// An ensemble: its own tensors, and its steps in running order.
pub struct Ensemble {
    metadata: ModelMetadata,
    steps: Vec<Step>,
}

impl Ensemble {
    /// Its steps, in an order in which every step's inputs are ready
    /// before it runs.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }
}

impl Model for Ensemble {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }
}

impl Composite for Ensemble {
    fn noun(&self) -> &'static str {
        "ensemble"
    }

    fn callees(&self) -> Vec<(String, Option<String>)> {
        crate::composites::each_once(
            self.steps
                .iter()
                .map(|s| (s.model.as_str(), s.version.as_deref())),
        )
    }

    fn check(&self, name: &str, served: &Served<'_>) -> Result<(), String> {
        check_steps(name, &self.metadata, &self.steps, served)
    }

    fn run<'a>(
        &'a self,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
        calls: &'a dyn ModelCaller,
    ) -> Run<'a, Composed> {
        Box::pin(async move {
            run::run(self, inputs, outputs, call, calls)
                .await
                .map(Composed::all)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnsembleKeys {
    steps: Vec<StepKeys>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepKeys {
    model: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    inputs: BTreeMap<String, String>,
    #[serde(default)]
    outputs: BTreeMap<String, String>,
}

/// An ensemble: its tensors and its steps, in running order.
fn load(source: &ModelSource<'_>) -> Result<Ensemble, String> {
    let keys: EnsembleKeys = source.keys()?;
    let config = source.config();
    if !config.warmup.is_empty() {
        return Err("an ensemble is not warmed up itself; warm up its steps' models".into());
    }
    let inputs = TensorConfig::specs(&config.inputs)?;
    let outputs = TensorConfig::specs(&config.outputs)?;
    let steps = keys
        .steps
        .into_iter()
        .map(|s| Step {
            model: s.model,
            version: s.version,
            inputs: s.inputs.into_iter().collect(),
            outputs: s.outputs.into_iter().collect(),
        })
        .collect();
    let input_names: Vec<&str> = inputs.iter().map(|s| s.name.as_str()).collect();
    let output_names: Vec<&str> = outputs.iter().map(|s| s.name.as_str()).collect();
    let steps = ordered(source.name(), steps, &input_names, &output_names)?;
    tracing::info!(
        model = %source.name(),
        steps = %steps.iter().map(|s| s.model.as_str()).collect::<Vec<_>>().join(" -> "),
        "loaded ensemble"
    );
    Ok(Ensemble {
        metadata: ModelMetadata {
            name: source.name().to_owned(),
            versions: vec![config.version.clone()],
            platform: "ensemble".to_owned(),
            inputs,
            outputs,
        },
        steps,
    })
}

/// `steps` in an order that runs each after the steps that produce its
/// inputs, or why the graph cannot run.
fn ordered(
    name: &str,
    steps: Vec<Step>,
    inputs: &[&str],
    outputs: &[&str],
) -> Result<Vec<Step>, String> {
    if steps.is_empty() {
        return Err("an ensemble needs at least one step".into());
    }
    // Every tensor has one producer: an ensemble input or one step.
    let mut producer: BTreeMap<&str, Option<usize>> = BTreeMap::new();
    for &input in inputs {
        producer.insert(input, None);
    }
    for (i, step) in steps.iter().enumerate() {
        if step.model.is_empty() {
            return Err(format!("step {} names no model", i + 1));
        }
        if step.model == name {
            return Err(format!("step {} calls the ensemble itself", i + 1));
        }
        if step.inputs.is_empty() || step.outputs.is_empty() {
            return Err(format!(
                "step {} (model '{}') maps no {}; each step takes and gives ensemble tensors",
                i + 1,
                step.model,
                if step.inputs.is_empty() {
                    "inputs"
                } else {
                    "outputs"
                }
            ));
        }
        for (_, tensor) in &step.outputs {
            if let Some(first) = producer.insert(tensor, Some(i)) {
                let by = match first {
                    None => "it is an input of the ensemble".to_owned(),
                    Some(j) => format!("step {} (model '{}') gives it too", j + 1, steps[j].model),
                };
                return Err(format!(
                    "ensemble tensor '{tensor}' is given by step {} (model '{}'), and {by}",
                    i + 1,
                    step.model
                ));
            }
        }
    }
    for (i, step) in steps.iter().enumerate() {
        if let Some((input, tensor)) = step
            .inputs
            .iter()
            .find(|(_, t)| !producer.contains_key(t.as_str()))
        {
            return Err(format!(
                "step {} (model '{}') takes '{input}' from ensemble tensor '{tensor}', which is \
                 neither an input of the ensemble nor any step's output",
                i + 1,
                step.model
            ));
        }
    }
    if let Some(output) = outputs
        .iter()
        .find(|o| !matches!(producer.get(*o), Some(Some(_))))
    {
        return Err(format!(
            "ensemble output '{output}' is not given by any step (no step's outputs map to it)"
        ));
    }
    let used: BTreeSet<&str> = steps
        .iter()
        .flat_map(|s| s.inputs.iter().map(|(_, t)| t.as_str()))
        .collect();
    if let Some(unused) = inputs.iter().find(|i| !used.contains(*i)) {
        return Err(format!(
            "ensemble input '{unused}' is not taken by any step (no step's inputs map from it)"
        ));
    }
    // Kahn's order: a step runs once every tensor it takes is ready.
    let mut ready: BTreeSet<&str> = inputs.iter().copied().collect();
    let mut done = vec![false; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    while order.len() < steps.len() {
        let Some(next) = (0..steps.len()).find(|&i| {
            !done[i]
                && steps[i]
                    .inputs
                    .iter()
                    .all(|(_, t)| ready.contains(t.as_str()))
        }) else {
            let stuck: Vec<String> = (0..steps.len())
                .filter(|&i| !done[i])
                .map(|i| format!("step {} (model '{}')", i + 1, steps[i].model))
                .collect();
            return Err(format!(
                "the steps form a cycle: {} each wait for another's output",
                stuck.join(", ")
            ));
        };
        done[next] = true;
        ready.extend(steps[next].outputs.iter().map(|(_, t)| t.as_str()));
        order.push(next);
    }
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| steps[i].take()).collect())
}

/// Whether every one of `steps` (of the ensemble `name`, of `metadata`)
/// fits the model it calls, as `lookup` finds it by name and version: the
/// model exists, takes each mapped input and gives each mapped output,
/// with the ensemble's datatypes where its own tensors meet the step's.
/// The first misfit, named by its step.
fn check_steps(
    name: &str,
    metadata: &ModelMetadata,
    steps: &[Step],
    lookup: &Served<'_>,
) -> Result<(), String> {
    let names = |specs: &[wirespeed_core::TensorSpec]| {
        specs
            .iter()
            .map(|s| format!("'{}'", s.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (n, step) in steps.iter().enumerate() {
        let at = |what: String| {
            format!(
                "ensemble '{name}' step {} (model '{}'): {what}",
                n + 1,
                step.model
            )
        };
        let model = lookup(&step.model, step.version.as_deref())
            .map_err(|e| at(format!("{e} (an ensemble's steps call served models)")))?;
        let step_meta = model.metadata();
        for (input, tensor) in &step.inputs {
            let Some(spec) = step_meta.inputs.iter().find(|s| &s.name == input) else {
                return Err(at(format!(
                    "the model has no input '{input}' (it takes {})",
                    names(&step_meta.inputs)
                )));
            };
            if let Some(own) = metadata.inputs.iter().find(|s| &s.name == tensor) {
                if own.datatype != spec.datatype {
                    return Err(at(format!(
                        "ensemble input '{tensor}' is {} and the model's input '{input}' is {}",
                        own.datatype, spec.datatype
                    )));
                }
            }
        }
        for (output, tensor) in &step.outputs {
            let Some(spec) = step_meta.outputs.iter().find(|s| &s.name == output) else {
                return Err(at(format!(
                    "the model has no output '{output}' (it gives {})",
                    names(&step_meta.outputs)
                )));
            };
            if let Some(own) = metadata.outputs.iter().find(|s| &s.name == tensor) {
                if own.datatype != spec.datatype {
                    return Err(at(format!(
                        "ensemble output '{tensor}' is {} and the model's output '{output}' is {}",
                        own.datatype, spec.datatype
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> Step {
        let pairs = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        Step {
            model: model.into(),
            version: None,
            inputs: pairs(inputs),
            outputs: pairs(outputs),
        }
    }

    #[test]
    fn steps_are_ordered_by_what_they_take() {
        let steps = vec![
            step("classify", &[("x", "features")], &[("y", "OUT")]),
            step("prepare", &[("raw", "IN")], &[("f", "features")]),
        ];
        let order = ordered("e", steps, &["IN"], &["OUT"]).unwrap();
        assert_eq!(order[0].model, "prepare");
        assert_eq!(order[1].model, "classify");
    }

    #[test]
    fn graphs_that_cannot_run_are_refused_naming_the_step() {
        let cases = [
            (
                vec![
                    step("a", &[("x", "IN"), ("z", "t2")], &[("y", "t1")]),
                    step("b", &[("x", "t1")], &[("y", "t2"), ("w", "OUT")]),
                ],
                "cycle",
            ),
            (
                vec![step("a", &[("x", "nowhere")], &[("y", "OUT")])],
                "'nowhere'",
            ),
            (
                vec![step("a", &[("x", "IN")], &[("y", "other")])],
                "ensemble output 'OUT'",
            ),
            (
                vec![step("a", &[("x", "IN")], &[("y", "IN"), ("z", "OUT")])],
                "input of the ensemble",
            ),
            (
                vec![step("e", &[("x", "IN")], &[("y", "OUT")])],
                "the ensemble itself",
            ),
            (vec![], "at least one step"),
        ];
        for (steps, words) in cases {
            let e = ordered("e", steps, &["IN"], &["OUT"]).unwrap_err();
            assert!(e.contains(words), "{words}: {e}");
        }
    }
}
