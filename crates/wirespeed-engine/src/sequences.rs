//! Sequence batching while serving (Triton's sequence batcher): a stateful
//! model's requests name their sequence (`sequence_id`, an integer or a
//! string), the first says `sequence_start` and the last `sequence_end`.
//! For each request the server
//!
//! - waits for its sequence's turn: one request of a sequence computes at
//!   a time, in the order they came (a fair lock per sequence), while
//!   requests of other sequences go on and batch with it;
//! - gives the model Triton's control inputs (`START`, `END`, `READY`,
//!   `CORRID`, as the model's `[sequence]` names them) and its implicit
//!   state (the initial value at a start, else what the sequence's last
//!   request left in the state output);
//! - takes the next state from the model's state output, which the
//!   client never sees, and releases the sequence at its end.
//!
//! A sequence idle past `max_sequence_idle_us` is released (a task sweeps
//! them and logs each); a request of a sequence that is not open (never
//! started, ended or released) is refused, as is a new sequence past
//! `max_sequences`. A sequence's requests go to the same Python worker
//! (`python/keeper.rs` routes by the correlation id), so state a Python
//! model keeps itself stays with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use wirespeed_core::{
    DataType, Error, ErrorKind, InferRequest, ParameterValue, Parameters, RequestedOutput, Tensor,
    TensorData,
};
use wirespeed_models::{ControlKind, Sequencing};

/// A sequence's name: Triton takes an unsigned integer or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    /// An unsigned integer id.
    Number(u64),
    /// A string id.
    Text(String),
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorrelationId::Number(n) => write!(f, "{n}"),
            CorrelationId::Text(s) => write!(f, "'{s}'"),
        }
    }
}

/// What a request says of its sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// The sequence's id (`sequence_id`).
    pub id: CorrelationId,
    /// The request starts the sequence (`sequence_start`).
    pub start: bool,
    /// The request ends the sequence (`sequence_end`).
    pub end: bool,
}

/// Takes `sequence_id`, `sequence_start` and `sequence_end` out of
/// `parameters`: `None` when the request names no sequence (no id, or
/// Triton's 0 or empty string for none).
pub fn flags(parameters: &mut Parameters) -> Result<Option<Flags>, Error> {
    let mut id = None;
    let mut start = false;
    let mut end = false;
    let mut bad = None;
    parameters.retain(|(key, value)| {
        match (key.as_str(), value) {
            ("sequence_id", ParameterValue::Int(0)) => {}
            ("sequence_id", ParameterValue::Int(n)) if *n > 0 => {
                id = Some(CorrelationId::Number(*n as u64))
            }
            ("sequence_id", ParameterValue::String(s)) if s.is_empty() => {}
            ("sequence_id", ParameterValue::String(s)) => id = Some(CorrelationId::Text(s.clone())),
            ("sequence_start", ParameterValue::Bool(b)) => start = *b,
            ("sequence_end", ParameterValue::Bool(b)) => end = *b,
            ("sequence_id" | "sequence_start" | "sequence_end", other) => {
                bad = Some(format!(
                    "parameter '{key}' must be {}, not {other:?}",
                    if key == "sequence_id" {
                        "a non-negative integer or a string"
                    } else {
                        "a boolean"
                    }
                ))
            }
            _ => return true,
        }
        false
    });
    if let Some(message) = bad {
        return Err(Error::invalid_input(message));
    }
    Ok(match id {
        Some(id) => Some(Flags { id, start, end }),
        None if start || end => {
            return Err(Error::invalid_input(
                "sequence_start or sequence_end is set without a sequence_id",
            ))
        }
        None => None,
    })
}

/// A stateful model's open sequences.
pub struct Sequences {
    model: String,
    sequencing: Sequencing,
    /// The model has a batch dimension.
    batch: bool,
    open: Mutex<HashMap<CorrelationId, Arc<Sequence>>>,
}

struct Sequence {
    /// Its state, held by the request whose turn it is.
    data: Arc<tokio::sync::Mutex<Data>>,
    touched: Mutex<Instant>,
}

struct Data {
    /// Each state's value now, in `Sequencing::states` order.
    states: Vec<TensorData>,
}

/// One request's turn in its sequence: its state is its own until it
/// ends. A turn that ends with the sequence's end releases it, whether
/// or not the request was answered.
pub struct Turn {
    sequences: Arc<Sequences>,
    sequence: Arc<Sequence>,
    data: OwnedMutexGuard<Data>,
    flags: Flags,
}

impl Drop for Turn {
    fn drop(&mut self) {
        *self
            .sequence
            .touched
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if self.flags.end {
            let mut open = self.sequences.open();
            if open
                .get(&self.flags.id)
                .is_some_and(|s| Arc::ptr_eq(s, &self.sequence))
            {
                open.remove(&self.flags.id);
            }
        }
    }
}

impl Sequences {
    /// The open sequences of `model`; their idle ones are swept while the
    /// runtime that made them runs.
    pub fn new(model: &str, sequencing: Sequencing, batch: bool) -> Arc<Sequences> {
        let sequences = Arc::new(Sequences {
            model: model.to_owned(),
            sequencing,
            batch,
            open: Mutex::default(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&sequences)));
        }
        sequences
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<CorrelationId, Arc<Sequence>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `name` is a control or state tensor: the server's, never
    /// a client's.
    pub fn hides(&self, name: &str) -> bool {
        self.sequencing.hides(name)
    }

    /// Whether the model's requests carry a batch dimension.
    pub fn batches(&self) -> bool {
        self.batch
    }

    /// The model's sequence batching.
    pub fn sequencing(&self) -> &Sequencing {
        &self.sequencing
    }

    /// Waits for `request`'s turn in its sequence (`flags`), then adds
    /// the control and state inputs, and asks for the state outputs.
    pub async fn admit(
        self: &Arc<Self>,
        request: &mut InferRequest,
        flags: Option<Flags>,
    ) -> Result<Turn, Error> {
        let model = &self.model;
        let Some(flags) = flags else {
            return Err(Error::invalid_input(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty \
                 correlation ID (sequence_id): it is a sequence model"
            )));
        };
        if let Some(input) = request.inputs.iter().find(|t| self.hides(&t.name)) {
            return Err(Error::invalid_input(format!(
                "input '{}' of model '{model}' is a sequence control or state, which the server \
                 gives; leave it out",
                input.name
            )));
        }
        let rows = if self.batch {
            let rows = request
                .inputs
                .iter()
                .find_map(|t| t.shape.first().copied())
                .unwrap_or(1);
            if rows != 1 {
                return Err(Error::invalid_input(format!(
                    "a request of sequence {} to model '{model}' has batch size {rows}; each \
                     request of a sequence is one row",
                    flags.id
                )));
            }
            Some(1)
        } else {
            None
        };
        let sequence = {
            let mut open = self.open();
            match (open.get(&flags.id), flags.start) {
                (Some(sequence), false) => Arc::clone(sequence),
                (None, false) => {
                    return Err(Error::invalid_input(format!(
                        "inference request for sequence {} to model '{model}' must specify the \
                         START flag on the first request of the sequence (it is not open: never \
                         started, ended, or released after idling)",
                        flags.id
                    )))
                }
                (existing, true) => {
                    if existing.is_none() && open.len() >= self.sequencing.max_sequences {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            format!(
                                "model '{model}' has {} sequences open, its limit \
                                 (max_sequences); end one, or retry when one is released",
                                open.len()
                            ),
                        ));
                    }
                    // A start restarts a sequence that is open.
                    let sequence = Arc::new(Sequence {
                        data: Arc::new(tokio::sync::Mutex::new(Data {
                            states: self
                                .sequencing
                                .states
                                .iter()
                                .map(|s| s.initial.clone())
                                .collect(),
                        })),
                        touched: Mutex::new(Instant::now()),
                    });
                    open.insert(flags.id.clone(), Arc::clone(&sequence));
                    sequence
                }
            }
        };
        let data = Arc::clone(&sequence.data).lock_owned().await;
        let shape = |dims: &[usize]| match rows {
            Some(rows) => std::iter::once(rows).chain(dims.iter().copied()).collect(),
            None => dims.to_vec(),
        };
        for control in &self.sequencing.controls {
            let data = match control.kind {
                ControlKind::Corrid => corrid(&flags.id, control.datatype).map_err(|m| {
                    Error::invalid_input(format!("model '{model}' control '{}': {m}", control.name))
                })?,
                kind => {
                    let on = match kind {
                        ControlKind::Start => flags.start,
                        ControlKind::End => flags.end,
                        _ => true,
                    };
                    flag(control.datatype, control.false_true[usize::from(on)])
                }
            };
            request.inputs.push(Tensor {
                name: control.name.clone(),
                shape: shape(&[1]),
                data,
                parameters: Vec::new(),
            });
        }
        for (state, value) in self.sequencing.states.iter().zip(&data.states) {
            request.inputs.push(Tensor {
                name: state.input.clone(),
                shape: shape(&state.shape),
                data: value.clone(),
                parameters: Vec::new(),
            });
            if !request.outputs.is_empty() {
                request.outputs.push(RequestedOutput {
                    name: state.output.clone(),
                    parameters: Vec::new(),
                });
            }
        }
        Ok(Turn {
            sequences: Arc::clone(self),
            sequence,
            data,
            flags,
        })
    }
}

impl Turn {
    /// The request's sequence.
    pub fn flags(&self) -> &Flags {
        &self.flags
    }

    /// Adds the request's sequence to the `parameters` the model gets,
    /// when the model reads it there (`Sequencing::flags_as_parameters`).
    pub fn add_parameters(&self, parameters: &mut Parameters) {
        if !self.sequences.sequencing.flags_as_parameters {
            return;
        }
        let flags = &self.flags;
        parameters.push((
            "sequence_id".to_owned(),
            match &flags.id {
                CorrelationId::Number(n) => {
                    ParameterValue::Int(i64::try_from(*n).unwrap_or(i64::MAX))
                }
                CorrelationId::Text(s) => ParameterValue::String(s.clone()),
            },
        ));
        parameters.push((
            "sequence_start".to_owned(),
            ParameterValue::Bool(flags.start),
        ));
        parameters.push(("sequence_end".to_owned(), ParameterValue::Bool(flags.end)));
    }

    /// Takes the state outputs out of a computed request's `outputs`: the
    /// sequence's next state.
    pub fn finish(mut self, outputs: &mut Vec<Tensor>) -> Result<(), Error> {
        let sequencing = &self.sequences.sequencing;
        for (i, state) in sequencing.states.iter().enumerate() {
            let Some(at) = outputs.iter().position(|t| t.name == state.output) else {
                return Err(Error::model_failed(format!(
                    "model '{}' did not return its state output '{}'",
                    self.sequences.model, state.output
                )));
            };
            let tensor = outputs.remove(at);
            if tensor.data.datatype() != state.datatype || tensor.data.len() != state.initial.len()
            {
                return Err(Error::model_failed(format!(
                    "model '{}' returned state '{}' as {} {:?}; its state is {} {:?}",
                    self.sequences.model,
                    state.output,
                    tensor.data.datatype(),
                    tensor.shape,
                    state.datatype,
                    state.shape
                )));
            }
            self.data.states[i] = tensor.data;
        }
        Ok(())
    }
}

/// A flag's value in its datatype.
fn flag(datatype: DataType, value: f64) -> TensorData {
    match datatype {
        DataType::Fp32 => TensorData::Fp32(vec![value as f32]),
        DataType::Bool => TensorData::Bool(vec![value != 0.0]),
        _ => TensorData::Int32(vec![value as i32]),
    }
}

/// The correlation id in the control's datatype.
fn corrid(id: &CorrelationId, datatype: DataType) -> Result<TensorData, String> {
    let number = match id {
        CorrelationId::Text(text) if datatype == DataType::Bytes => {
            return Ok(TensorData::Bytes(vec![text.clone().into_bytes()]))
        }
        CorrelationId::Number(n) if datatype == DataType::Bytes => {
            return Ok(TensorData::Bytes(vec![n.to_string().into_bytes()]))
        }
        CorrelationId::Number(n) => *n,
        CorrelationId::Text(text) => text.parse::<u64>().map_err(|_| {
            format!("the string sequence id {text:?} is not a number, which {datatype} needs")
        })?,
    };
    let range = || format!("sequence id {number} does not fit {datatype}");
    Ok(match datatype {
        DataType::Uint64 => TensorData::Uint64(vec![number]),
        DataType::Int64 => TensorData::Int64(vec![i64::try_from(number).map_err(|_| range())?]),
        DataType::Uint32 => TensorData::Uint32(vec![u32::try_from(number).map_err(|_| range())?]),
        _ => TensorData::Int32(vec![i32::try_from(number).map_err(|_| range())?]),
    })
}

/// Releases sequences idle past their model's limit, until the model goes.
async fn sweep(sequences: Weak<Sequences>) {
    let every = match sequences.upgrade() {
        Some(s) => (s.sequencing.idle / 4).clamp(Duration::from_millis(1), Duration::from_secs(1)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(sequences) = sequences.upgrade() else {
            return;
        };
        let idle = sequences.sequencing.idle;
        let mut open = sequences.open();
        open.retain(|id, sequence| {
            // A sequence whose turn is taken is busy, not idle.
            let busy = sequence.data.try_lock().is_err();
            let since = sequence
                .touched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            let keep = busy || since < idle;
            if !keep {
                tracing::info!(
                    model = %sequences.model,
                    sequence = %id,
                    idle_ms = since.as_millis() as u64,
                    "sequence released after idling past max_sequence_idle_us"
                );
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, ParameterValue)]) -> Parameters {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn flags_are_taken_out_of_the_parameters() {
        let mut p = params(&[
            ("sequence_id", ParameterValue::Int(1001)),
            ("sequence_start", ParameterValue::Bool(true)),
            ("other", ParameterValue::Int(3)),
        ]);
        let f = flags(&mut p).unwrap().unwrap();
        assert_eq!(f.id, CorrelationId::Number(1001));
        assert!(f.start && !f.end);
        assert_eq!(p.len(), 1);
        let mut p = params(&[("sequence_id", ParameterValue::String("abc".into()))]);
        assert_eq!(
            flags(&mut p).unwrap().unwrap().id,
            CorrelationId::Text("abc".into())
        );
        assert!(
            flags(&mut params(&[("sequence_id", ParameterValue::Int(0))]))
                .unwrap()
                .is_none()
        );
        let e = flags(&mut params(&[("sequence_end", ParameterValue::Bool(true))])).unwrap_err();
        assert!(e.message().contains("without a sequence_id"), "{e}");
        let e = flags(&mut params(&[("sequence_start", ParameterValue::Int(1))])).unwrap_err();
        assert!(e.message().contains("boolean"), "{e}");
    }

    #[test]
    fn correlation_ids_take_the_control_datatype() {
        let n = CorrelationId::Number(7);
        assert_eq!(
            corrid(&n, DataType::Uint64).unwrap(),
            TensorData::Uint64(vec![7])
        );
        assert_eq!(
            corrid(&n, DataType::Int32).unwrap(),
            TensorData::Int32(vec![7])
        );
        let t = CorrelationId::Text("42".into());
        assert_eq!(
            corrid(&t, DataType::Int64).unwrap(),
            TensorData::Int64(vec![42])
        );
        assert!(corrid(&CorrelationId::Text("x".into()), DataType::Uint64).is_err());
        assert!(corrid(&CorrelationId::Number(u64::MAX), DataType::Int32).is_err());
    }
}
