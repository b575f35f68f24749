//! Several requests on a worker's wire at once: the requests' inputs
//! written one after the other into the input segment, one message, and
//! each request's answer (or, for a decoupled model, each request's
//! number, its responses flowing as for one). Either a batch of Triton's
//! dynamic batcher, which a Python model's `execute` takes as one list
//! (`infer_batch`), or the requests that queued while the worker was busy,
//! each run on its own as if it had come alone (`infer_each`): one
//! wake-up of the worker and one message each way for all of them, where
//! a message per request would spend more on the two processes' hand-over
//! than the model spends on them (Triton's stub takes its requests from a
//! shared-memory queue in lists for the same reason).

use std::io;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use wirespeed_core::raw::{raw_bytes, write_raw};
use wirespeed_core::{Error, Tensor};

use super::super::wire::{self, Reply};
use super::{aligned, model_error, CallError, Launch, Process};

/// One request of a batch: its inputs, the outputs it asks for (by
/// index), its parameters.
pub(crate) type Queued<'a> = (
    &'a [Tensor],
    &'a [usize],
    serde_json::Map<String, serde_json::Value>,
);

/// Where each tensor of each request of a batch lies.
type Placements = Vec<Vec<Place>>;

/// Where an input lies for the worker: in its input segment, or, decoded
/// there, in the shared heap (`wirespeed_core::shared_heap`), which the
/// worker maps too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) heap: bool,
}

/// Triton's dynamic batcher, as a keeper runs it: rows at most, the sizes
/// sent at once, and how long the first request waits for more.
#[derive(Debug, Clone)]
pub(crate) struct BatchWindow {
    pub(crate) max_rows: usize,
    pub(crate) preferred: Vec<usize>,
    pub(crate) delay: Duration,
}

/// How the model's code is called for the requests of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calls {
    /// Once for them all: a batch of Triton's dynamic batcher.
    Together,
    /// Once for each, in order, as if each had come alone.
    Each,
}

impl Process {
    /// Runs several requests in one message: in one call of a Triton
    /// model's `execute`, as Triton's dynamic batcher does
    /// ([`Calls::Together`]), or each on its own ([`Calls::Each`]). Each
    /// request's answer, in order, or the worker lost. Past `deadline` (the
    /// batch's latest) the worker is interrupted, as for one request.
    pub(crate) fn infer_batch(
        &mut self,
        launch: &Launch,
        batch: Vec<Queued<'_>>,
        deadline: Option<Instant>,
        calls: Calls,
    ) -> Result<Vec<Result<Vec<Tensor>, Error>>, CallError> {
        let groups: Vec<&[Tensor]> = batch.iter().map(|(inputs, ..)| *inputs).collect();
        let (placed, used) = self
            .write_groups(&groups)
            .map_err(|e| CallError::Model(Error::internal(format!("shared memory: {e}"))))?;
        let wanted: Vec<&[usize]> = batch.iter().map(|(_, outputs, _)| *outputs).collect();
        let message = wire::InferBatch {
            op: match calls {
                Calls::Together => "infer_batch",
                Calls::Each => "infer_each",
            },
            size: self.inputs.len(),
            requests: batch
                .into_iter()
                .zip(&placed)
                .map(|((inputs, outputs, parameters), placed)| wire::Infer {
                    out: None,
                    ..self.message(launch, inputs, placed, outputs, parameters, None)
                })
                .collect(),
            out: wire::OutputPlacement::of(self.outputs.place()),
        };
        // Each request's caller may leave; the batch goes on for the others.
        let reply = self.exchange(
            launch,
            &message,
            deadline,
            std::pin::pin!(std::future::pending()),
        )?;
        self.inputs.settle(used);
        match reply {
            Reply::Answers { answers, metrics } if answers.len() == wanted.len() => {
                super::super::metrics::apply(&launch.model, metrics);
                let mut used = 0usize;
                let each = answers
                    .into_iter()
                    .zip(wanted)
                    .map(|(answer, outputs)| match answer {
                        wire::BatchAnswer {
                            outputs: Some(placed),
                            ..
                        } => {
                            used = used.max(wire::Placed::extent(&placed));
                            self.read_outputs(launch, outputs, &placed)
                        }
                        wire::BatchAnswer { kind, error, .. } => Err(model_error(
                            &launch.model,
                            kind.as_deref().unwrap_or("model"),
                            error.unwrap_or_default(),
                        )),
                    })
                    .collect();
                self.outputs.settle(used);
                Ok(each)
            }
            Reply::Error {
                kind,
                error,
                metrics,
                ..
            } => {
                super::super::metrics::apply(&launch.model, metrics);
                let error = model_error(&launch.model, &kind, error);
                Ok(wanted.iter().map(|_| Err(error.clone())).collect())
            }
            other => {
                self.kill();
                Err(self.lost(
                    launch,
                    format!("answered {other:?} to a batch, and was killed"),
                ))
            }
        }
    }

    /// Sends a decoupled model's requests, each with its number, through
    /// `writer`: one `infer`, or a batch's `infer_batch` (Triton's dynamic
    /// batcher, one call of `execute`). The input segment's bytes used,
    /// free again once `execute` has returned for each.
    pub(crate) fn send_requests(
        &mut self,
        launch: &Launch,
        batch: &mut [(u64, super::super::keeper::Job)],
        writer: &std::sync::Mutex<UnixStream>,
    ) -> Result<usize, Error> {
        if let [(id, job)] = batch {
            let parameters = std::mem::take(&mut job.parameters);
            return self.send_request(launch, *id, &job.inputs, &job.outputs, parameters, writer);
        }
        let groups: Vec<&[Tensor]> = batch.iter().map(|(_, job)| &job.inputs[..]).collect();
        let (placed, used) = self
            .write_groups(&groups)
            .map_err(|e| Error::internal(format!("shared memory: {e}")))?;
        let message = wire::InferBatch {
            op: "infer_batch",
            size: self.inputs.len(),
            requests: batch
                .iter_mut()
                .zip(&placed)
                .map(|((id, job), placed)| {
                    let parameters = std::mem::take(&mut job.parameters);
                    self.message(
                        launch,
                        &job.inputs,
                        placed,
                        &job.outputs,
                        parameters,
                        Some(*id),
                    )
                })
                .collect(),
            // A decoupled model's outputs come on the socket.
            out: None,
        };
        self.hand_over(launch, &message, writer)?;
        Ok(used)
    }

    /// Writes the tensors of several requests one after the other into
    /// the input segment, but those in the shared heap, which the worker
    /// reads where they are: where each of each request's lies, and the
    /// segment's bytes used.
    pub(super) fn write_groups(&mut self, groups: &[&[Tensor]]) -> io::Result<(Placements, usize)> {
        let mut placed = Vec::with_capacity(groups.len());
        let mut end = 0usize;
        for inputs in groups {
            let mut mine = Vec::with_capacity(inputs.len());
            for tensor in *inputs {
                let len = wirespeed_core::raw::raw_len(&tensor.data);
                let shared = raw_bytes(&tensor.data)
                    .filter(|bytes| self.heap && bytes.len() == len)
                    .and_then(wirespeed_core::shared_heap::locate);
                if let Some(offset) = shared {
                    mine.push(Place {
                        offset,
                        len,
                        heap: true,
                    });
                    continue;
                }
                mine.push(Place {
                    offset: end,
                    len,
                    heap: false,
                });
                end = end
                    .checked_add(aligned(len))
                    .ok_or_else(|| io::Error::other("inputs too large"))?;
            }
            placed.push(mine);
        }
        let segment = self.inputs.reserve(end)?;
        let mut scratch = Vec::new();
        for (inputs, mine) in groups.iter().zip(&placed) {
            for (tensor, place) in inputs.iter().zip(mine) {
                let &Place {
                    offset,
                    len,
                    heap: false,
                } = place
                else {
                    continue;
                };
                let target = &mut segment[offset..offset + len];
                match raw_bytes(&tensor.data) {
                    Some(bytes) => target.copy_from_slice(bytes),
                    None => {
                        scratch.clear();
                        write_raw(&tensor.data, &mut scratch);
                        target.copy_from_slice(&scratch);
                    }
                }
            }
        }
        Ok((placed, end))
    }
}
