//! Running an application (Clipper's model selection layer,
//! `backend = "application"`): its selector chooses who answers each
//! query, and each chosen candidate is called through the server's
//! [`ModelCaller`], as an ensemble's step is: through its own scheduler, with the
//! request's deadline, counted in its own statistics.
//!
//! - **One candidate** (exp3, fixed, weighted): its answer is the
//!   application's.
//! - **A blend** (exp4): every candidate runs at once. With a latency
//!   objective (the application's `[slo] latency_ms`), the answer is made
//!   at the objective from those that have answered, their weights
//!   renormalised; the others (stragglers) are dropped, which cancels them
//!   in their schedulers, and counted. With none answered, the answer is
//!   the application's `[slo]` default, flagged as the scheduler flags
//!   its own. A candidate that fails is left out as a straggler is; when
//!   all fail, the first failure is the answer.
//!
//! **Feedback** ([`feedback`], Clipper's `POST /{app}/update`): the
//! candidates the policy scores are asked for their predictions on the
//! feedback's input (a response cache turns this into a look-up of the
//! answer the query got), each prediction's loss against the label is
//! computed, and the policy learns from them.
//!
//! A query's key (a user) is the request parameter the application names
//! (`uid` unless set); it is taken out before the candidates see the
//! request, so that their cached answers are shared by every user.

use wirespeed_backend::composite::named;
use wirespeed_backend::Run;
use wirespeed_backend::{Composed, ModelCaller};
use wirespeed_core::{
    DataType, Error, ParameterValue, Parameters, RequestedOutput, Tensor, TensorData,
};
use wirespeed_scheduler::CallContext;

use super::{absolute_loss, numbers, Application, Choice, Draw, Selector};
use crate::composites::gather_until;

/// Answers `inputs` (checked against the application's by the server)
/// with the candidates `app`'s selector chooses, giving `outputs` (the
/// application's, resolved by the server).
pub(super) async fn run(
    app: &Application,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    mut call: CallContext,
    calls: &dyn ModelCaller,
) -> Result<Composed, Error> {
    let metadata = &app.metadata;
    let selector = &app.selector;
    let wanted = metadata.resolve_outputs(outputs.iter().map(|o| o.name.as_str()))?;
    let key = take_key(&mut call.parameters, selector.key());
    match selector.choose(key.as_deref()) {
        Choice::One(i) => {
            let outputs = ask(app, calls, i, inputs, outputs, &call).await?;
            Ok(Composed::all(outputs))
        }
        Choice::Blend(weights) => {
            let rows = inputs
                .iter()
                .find_map(|t| t.shape.first().copied())
                .unwrap_or(1);
            let objective = app.slo.as_ref().map(|slo| call.started + slo.latency);
            let candidates = selector.candidates().len();
            let mut running: Vec<Run<'_, Vec<Tensor>>> = Vec::with_capacity(candidates);
            let mut shared = Some(inputs);
            for i in 0..candidates {
                let inputs = if i + 1 == candidates {
                    shared.take().unwrap_or_default()
                } else {
                    shared.clone().unwrap_or_default()
                };
                running.push(Box::pin(ask(app, calls, i, inputs, outputs, &call)));
            }
            let answers = gather_until(running, objective).await;
            blend(app, &weights, answers, &wanted, rows)
        }
    }
}

/// Learns from feedback on application `app`: `inputs` were answered, and
/// `label` is the truth (one value, or one per element of the first
/// output). The key is read from `call`'s parameters.
pub(super) async fn feedback(
    app: &Application,
    inputs: Vec<Tensor>,
    label: &[f64],
    mut call: CallContext,
    calls: &dyn ModelCaller,
) -> Result<(), Error> {
    let selector = &app.selector;
    let metadata = &app.metadata;
    metadata.check_inputs(&inputs)?;
    let first = RequestedOutput {
        name: metadata.outputs[0].name.clone(),
        parameters: Vec::new(),
    };
    let key = take_key(&mut call.parameters, selector.key());
    let draws = selector.to_score(key.as_deref());
    let mut running: Vec<Run<'_, Vec<Tensor>>> = Vec::with_capacity(draws.len());
    for draw in &draws {
        let inputs = inputs.clone();
        running.push(Box::pin(ask(
            app,
            calls,
            draw.candidate,
            inputs,
            std::slice::from_ref(&first),
            &call,
        )));
    }
    let mut scored: Vec<(Draw, f64)> = Vec::with_capacity(draws.len());
    for (answer, draw) in gather_until(running, None).await.into_iter().zip(draws) {
        let Some(answer) = answer else { continue };
        let prediction = answer?;
        let Some(prediction) = prediction.first() else {
            continue;
        };
        let loss = absolute_loss(label, prediction).ok_or_else(|| {
            Error::invalid_input(format!(
                "the label has {} values, and candidate '{}' predicts {} {} values for output \
                 '{}': give one label, or one per predicted value",
                label.len(),
                selector.candidates()[draw.candidate],
                prediction.data.len(),
                prediction.data.datatype(),
                first.name
            ))
        })?;
        scored.push((draw, loss));
    }
    selector.learn(key.as_deref(), &scored);
    Ok(())
}

/// Takes the query's key (the parameter `name`) out of `parameters`.
fn take_key(parameters: &mut Parameters, name: &str) -> Option<String> {
    let at = parameters.iter().position(|(k, _)| k == name)?;
    Some(match parameters.remove(at).1 {
        ParameterValue::String(s) => s,
        ParameterValue::Int(i) => i.to_string(),
        ParameterValue::Float(f) => f.to_string(),
        ParameterValue::Bool(b) => b.to_string(),
    })
}

/// Candidate `i` of `app`, asked for `outputs` on `inputs`.
async fn ask(
    app: &Application,
    calls: &dyn ModelCaller,
    i: usize,
    inputs: Vec<Tensor>,
    outputs: &[RequestedOutput],
    call: &CallContext,
) -> Result<Vec<Tensor>, Error> {
    let candidate = &app.selector.candidates()[i];
    let named = |e: Error| {
        named(
            &format!(
                "application '{}' candidate '{candidate}'",
                app.metadata.name
            ),
            e,
        )
    };
    let call = CallContext {
        input_parameters: call.input_parameters.clone(),
        ..call.onward()
    };
    calls
        .call(
            &candidate.model,
            candidate.version.as_deref(),
            inputs,
            outputs,
            call,
        )
        .await
        .map_err(named)
}

/// Exp4's answer: the candidates' outputs that arrived, averaged with
/// their weights renormalised over them.
fn blend(
    app: &Application,
    weights: &[f64],
    answers: Vec<Option<Result<Vec<Tensor>, Error>>>,
    wanted: &[usize],
    rows: usize,
) -> Result<Composed, Error> {
    let (metadata, selector) = (&app.metadata, &app.selector);
    let mut arrived: Vec<(f64, Vec<Tensor>)> = Vec::with_capacity(answers.len());
    let mut stragglers = 0;
    let mut cut = 0;
    let mut first_error = None;
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Some(Ok(outputs)) => arrived.push((weights[i], outputs)),
            Some(Err(e)) => {
                if e.kind().is_client_error() {
                    // The same input goes to every candidate: the client's
                    // mistake is every candidate's.
                    return Err(e);
                }
                tracing::warn!(application = %metadata.name, error = %e, "a candidate failed; answering with the others");
                selector.straggled(i);
                stragglers += 1;
                first_error.get_or_insert(e);
            }
            None => {
                selector.straggled(i);
                stragglers += 1;
                cut += 1;
            }
        }
    }
    if arrived.is_empty() {
        // Nobody answered by the objective: the default, as the scheduler
        // answers a model that would miss it. Only failures: the first.
        let slo = app.slo.as_ref();
        let (Some(slo), true) = (slo, cut > 0) else {
            return Err(first_error.unwrap_or_else(|| {
                Error::internal(format!(
                    "application '{}': no candidate answered",
                    metadata.name
                ))
            }));
        };
        let outputs = wanted
            .iter()
            .map(|&i| {
                let name = &metadata.outputs[i].name;
                slo.defaults
                    .iter()
                    .find(|d| &d.name == name)
                    .map(|d| d.tensor(rows))
                    .ok_or_else(|| {
                        Error::internal(format!(
                            "application '{}' has no default for output '{name}'",
                            metadata.name
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Composed {
            outputs,
            stragglers,
            default: true,
        });
    }
    let total: f64 = arrived.iter().map(|(w, _)| w).sum();
    let outputs = wanted
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let spec = &metadata.outputs[i];
            average(&spec.name, spec.datatype, &arrived, j, total)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Composed {
        outputs,
        stragglers,
        default: false,
    })
}

/// Output `j` of every arrived answer, averaged with the weights over
/// `total`, as `datatype`.
fn average<'a>(
    name: &str,
    datatype: DataType,
    arrived: &'a [(f64, Vec<Tensor>)],
    j: usize,
    total: f64,
) -> Result<Tensor, Error> {
    let misfit = |what: String| {
        Error::model_failed(format!(
            "the candidates' outputs '{name}' cannot be averaged: {what}"
        ))
    };
    let output = |outputs: &'a [Tensor]| {
        outputs
            .get(j)
            .ok_or_else(|| misfit(format!("a candidate gave {} outputs", outputs.len())))
    };
    let first = output(&arrived[0].1)?;
    let shape = first.shape.clone();
    let mut sum = vec![0.0f64; first.data.len()];
    for (weight, outputs) in arrived {
        let t = output(outputs)?;
        if t.shape != shape {
            return Err(misfit(format!(
                "one has shape {:?}, another {:?}",
                shape, t.shape
            )));
        }
        let values =
            numbers(&t.data).ok_or_else(|| misfit(format!("one is {}", t.data.datatype())))?;
        for (s, v) in sum.iter_mut().zip(values) {
            *s += weight / total * v;
        }
    }
    let data = TensorData::Fp64(sum);
    let data = if datatype == DataType::Fp64 {
        data
    } else {
        data.cast_number(datatype)
            .ok_or_else(|| misfit(format!("the application's output is {datatype}")))?
    };
    Ok(Tensor {
        name: name.to_owned(),
        shape,
        data,
        parameters: Vec::new(),
    })
}
