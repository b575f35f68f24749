//! One batch, run as a task on its leader's I/O thread: the members'
//! inputs joined along dimension 0 (on the CPU pool when large), one call
//! to the model where it says it runs, the outputs cut back into each
//! member's rows, and each member answered. A batch of one request is
//! passed to the model as it is, with no copy.
//!
//! The task owns the batch's slot, so the slot comes back when the
//! compute ends, whichever callers have left meanwhile. A model that
//! awaits is cancelled when every member's caller has gone. A model that
//! fails fails every member with its error; one that panics ends the
//! task, and each member's caller reports the crash.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use wirespeed_core::{batch, CpuPool, Error, Execution, InferCall, Model, Tensor};

use crate::actor::Mailbox;
use crate::{Counters, Event, Lead, Member, Outcome};

/// Joined inputs above this many bytes are joined on the CPU pool.
const OFFLOAD_JOIN_BYTES: usize = 1 << 20;

/// Runs `lead`'s batch to its end and answers each of its members.
pub(super) async fn run(
    lead: Lead,
    model: Arc<dyn Model>,
    pool: CpuPool,
    events: Mailbox,
    counters: Arc<Counters>,
) {
    let started = Instant::now();
    let Lead { members, slot } = lead;
    let name = model.metadata().name.clone();
    let rows: Vec<usize> = members.iter().map(|m| m.rows).collect();
    let total: usize = rows.iter().sum();
    let Gathered {
        mut parts,
        mut answers,
        outputs,
        parameters,
        trace,
        deadline,
        responses,
    } = gather(members, &name, total);
    let alone = parts.len() == 1;

    let joined = Instant::now();
    let inputs = if alone {
        Ok(parts.pop().unwrap_or_default())
    } else {
        join(parts, &pool).await
    };
    let input_time = joined.elapsed();
    let inputs = match inputs {
        Ok(inputs) => inputs,
        Err(message) => {
            let error = Error::internal(format!(
                "model '{name}': a batch could not be joined: {message}"
            ));
            fail(answers, &error);
            return;
        }
    };

    let computing = Instant::now();
    let elements: usize = inputs.iter().map(|t| t.data.len()).sum();
    let result = match model.execution(elements) {
        // On the caller's thread: a model that panics fails the batch, not
        // the connection it came on.
        Execution::Inline => infer_caught(model.as_ref(), &inputs, &outputs),
        Execution::Pool => {
            let (done, result) = oneshot::channel();
            let model = Arc::clone(&model);
            pool.spawn(move || {
                let _ = done.send(model.infer(&inputs, &outputs));
            });
            result.await.unwrap_or_else(|_| Err(crashed(&name)))
        }
        Execution::Async => {
            let call = InferCall {
                inputs,
                outputs,
                parameters,
                deadline,
                trace,
                responses,
                input_parameters: Vec::new(),
            };
            let call = Arc::clone(&model).infer_async(call);
            tokio::select! {
                result = call => result,
                () = all_gone(&mut answers) => {
                    tracing::debug!(model = %name, "every caller of the batch left mid-compute; the model's call is cancelled and its slot freed");
                    return;
                }
            }
        }
    };
    let compute = computing.elapsed();
    tracing::debug!(model = %name, "compute ended; slot freed");
    drop(slot);

    let cutting = Instant::now();
    let result = result.and_then(|outputs| {
        if alone {
            Ok(vec![outputs])
        } else {
            batch::split(outputs, &rows).map_err(|message| {
                Error::internal(format!(
                    "model '{name}' answered a batch of {total} rows wrongly: {message}"
                ))
            })
        }
    });
    let output_time = cutting.elapsed();
    let _ = events.send(Event::Ran {
        rows: total,
        took: started.elapsed(),
    });
    match result {
        Ok(each) => {
            counters.executed(total, input_time, compute, output_time);
            for ((outcome, queued), outputs) in answers.into_iter().zip(each) {
                let _ = outcome.send(Outcome::Computed {
                    outputs,
                    batch: total,
                    queued,
                    compute,
                });
            }
        }
        Err(error) => fail(answers, &error),
    }
}

/// A batch's members taken apart: each one's inputs, where each is
/// answered (with its time in the queue), and what the one call passes on.
struct Gathered {
    parts: Vec<Vec<Tensor>>,
    answers: Vec<(oneshot::Sender<Outcome>, Duration)>,
    outputs: Vec<usize>,
    parameters: wirespeed_core::Parameters,
    trace: Option<wirespeed_core::TraceContext>,
    /// The latest of the members' deadlines.
    deadline: Option<Instant>,
    /// A streaming request's sender (such a request is always alone).
    responses: Option<wirespeed_core::ResponseSender>,
}

fn gather(members: Vec<Member>, name: &str, total: usize) -> Gathered {
    let mut answers = Vec::with_capacity(members.len());
    let mut parts = Vec::with_capacity(members.len());
    let mut deadline: Option<Instant> = None;
    let mut shared = None;
    let mut responses = None;
    for Member {
        job,
        outcome,
        queued,
        span,
        ..
    } in members
    {
        span.in_scope(|| tracing::debug!(model = %name, batch = total, "computing in a batch"));
        deadline = match (deadline, job.deadline) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // A batch is one call: it passes on its first request's parameters
        // and trace context.
        shared.get_or_insert((job.outputs, job.parameters, job.trace));
        responses = responses.or(job.responses);
        parts.push(job.inputs);
        answers.push((outcome, queued));
    }
    let (outputs, parameters, trace) = shared.unwrap_or_default();
    Gathered {
        parts,
        answers,
        outputs,
        parameters,
        trace,
        deadline,
        responses,
    }
}

/// Joins the members' inputs, on the CPU pool when they are large.
async fn join(parts: Vec<Vec<Tensor>>, pool: &CpuPool) -> Result<Vec<Tensor>, String> {
    let bytes: usize = parts
        .iter()
        .flatten()
        .map(|t| wirespeed_core::raw::raw_len(&t.data))
        .sum();
    if bytes <= OFFLOAD_JOIN_BYTES {
        return batch::concat(parts);
    }
    let (done, joined) = oneshot::channel();
    pool.spawn(move || {
        let _ = done.send(batch::concat(parts));
    });
    joined
        .await
        .unwrap_or_else(|_| Err("the CPU pool dropped the job".into()))
}

/// Resolves once every member's caller has gone.
async fn all_gone(answers: &mut [(oneshot::Sender<Outcome>, Duration)]) {
    for (outcome, _) in answers.iter_mut() {
        outcome.closed().await;
    }
}

fn fail(answers: Vec<(oneshot::Sender<Outcome>, Duration)>, error: &Error) {
    for (outcome, _) in answers {
        let _ = outcome.send(Outcome::Failed(error.clone()));
    }
}

/// `model.infer`, with a panic turned into the request's error.
pub(crate) fn infer_caught(
    model: &dyn Model,
    inputs: &[Tensor],
    outputs: &[usize],
) -> Result<Vec<Tensor>, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.infer(inputs, outputs)
    }))
    .unwrap_or_else(|_| Err(crashed(&model.metadata().name)))
}

fn crashed(name: &str) -> Error {
    Error::internal(format!(
        "model '{name}' failed while computing (it panicked; see the message above)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Job;
    use tracing::Span;
    use wirespeed_core::{ParameterValue, TensorData};

    fn member(
        rows: &[f32],
        deadline: Option<Instant>,
        id: i64,
    ) -> (Member, oneshot::Receiver<Outcome>) {
        let (outcome, answer) = oneshot::channel();
        let job = Job {
            inputs: vec![Tensor {
                name: "x".into(),
                shape: vec![rows.len(), 1],
                data: TensorData::Fp32(rows.to_vec()),
                parameters: Vec::new(),
            }],
            outputs: vec![0],
            parameters: vec![("id".into(), ParameterValue::Int(id))],
            deadline,
            trace: None,
            responses: None,
            input_parameters: Vec::new(),
        };
        let member = Member {
            job,
            rows: rows.len(),
            outcome,
            queued: Duration::from_millis(id as u64),
            span: Span::none(),
        };
        (member, answer)
    }

    #[test]
    fn a_batch_passes_on_its_first_requests_parameters_and_its_latest_deadline() {
        let now = Instant::now();
        let (a, _a) = member(&[1.0], Some(now + Duration::from_millis(5)), 1);
        let (b, _b) = member(&[2.0, 3.0], Some(now + Duration::from_millis(50)), 2);
        let (c, _c) = member(&[4.0], None, 3);
        let gathered = gather(vec![a, b, c], "m", 4);
        assert_eq!(
            gathered.parameters,
            vec![("id".into(), ParameterValue::Int(1))]
        );
        assert_eq!(gathered.deadline, Some(now + Duration::from_millis(50)));
        assert_eq!(gathered.outputs, [0]);
        // Each member keeps its inputs and its time in the queue, in order.
        assert_eq!(gathered.parts.len(), 3);
        let queued: Vec<u128> = gathered
            .answers
            .iter()
            .map(|(_, q)| q.as_millis())
            .collect();
        assert_eq!(queued, [1, 2, 3]);
    }

    #[tokio::test]
    async fn members_inputs_join_along_the_first_dimension_inline_and_on_the_pool() {
        let pool = CpuPool::new(1).unwrap();
        let small = vec![
            vec![Tensor {
                name: "x".into(),
                shape: vec![1, 2],
                data: TensorData::Fp32(vec![1.0, 2.0]),
                parameters: Vec::new(),
            }],
            vec![Tensor {
                name: "x".into(),
                shape: vec![2, 2],
                data: TensorData::Fp32(vec![3.0, 4.0, 5.0, 6.0]),
                parameters: Vec::new(),
            }],
        ];
        let joined = join(small, &pool).await.unwrap();
        assert_eq!(joined[0].shape, [3, 2]);
        assert_eq!(
            joined[0].data,
            TensorData::Fp32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        // Past OFFLOAD_JOIN_BYTES the join runs on the pool, same result.
        let rows = OFFLOAD_JOIN_BYTES / 4;
        let large: Vec<Vec<Tensor>> = (0..2)
            .map(|i| {
                vec![Tensor {
                    name: "x".into(),
                    shape: vec![rows, 1],
                    data: TensorData::Fp32(vec![i as f32; rows]),
                    parameters: Vec::new(),
                }]
            })
            .collect();
        let joined = join(large, &pool).await.unwrap();
        assert_eq!(joined[0].shape, [2 * rows, 1]);
        let TensorData::Fp32(values) = &joined[0].data else {
            panic!("FP32 in, FP32 out");
        };
        assert_eq!((values[rows - 1], values[rows]), (0.0, 1.0));
    }

    #[test]
    fn a_failure_answers_every_member_with_the_error() {
        let (a, mut a_answer) = member(&[1.0], None, 1);
        let (b, mut b_answer) = member(&[2.0], None, 2);
        let gathered = gather(vec![a, b], "m", 2);
        fail(gathered.answers, &Error::model_failed("boom"));
        for answer in [&mut a_answer, &mut b_answer] {
            match answer.try_recv() {
                Ok(Outcome::Failed(e)) => assert_eq!(e.message(), "boom"),
                _ => panic!("each member gets the batch's error"),
            }
        }
    }
}
