//! Sequence batching, as `config.toml`'s `[sequence]` table (or Triton's
//! `sequence_batching`, read by `wirespeed-models`' `pbtxt.rs`) says it: a
//! stateful model's requests come in sequences, named by a correlation id,
//! the first flagged start and the last end; the server gives the model
//! Triton's control inputs and carries its implicit state from one request
//! of a sequence to the next.
//!
//! ```toml
//! max_batch_size = 8
//! [sequence]
//! strategy = "oldest"            # or "direct" (Triton's two); both batch
//! max_sequence_idle_us = 5000000 # an idle sequence is released after this
//! max_sequences = 1024           # sequences in flight; more are refused
//! max_queue_delay_us = 100       # how long a batch waits to fill
//! [[sequence.controls]]
//! name = "START"                 # an input the model takes, filled by the server
//! kind = "start"                 # start, end, ready or corrid
//! datatype = "INT32"
//! false_true = [0, 1]
//! [[sequence.controls]]
//! name = "CORRID"
//! kind = "corrid"
//! datatype = "UINT64"            # or a string id's BYTES
//! [[sequence.states]]
//! input = "INPUT_STATE"          # the model's input the state is given in
//! output = "OUTPUT_STATE"        # its output the next state is taken from
//! datatype = "INT32"
//! shape = [1]                    # one sequence's state (no batch dimension)
//! # data_file = "initial.raw"    # its start value, raw bytes (zeros otherwise)
//! ```
//!
//! Control and state tensors are inputs (and outputs) of the model that
//! clients never send nor see: [`extend`] adds them to the model's
//! declared tensors for its backend, and the server leaves them out of
//! the metadata it shows.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::raw::from_raw;
use wirespeed_core::{element_count, DataType, TensorData};

use crate::config::{ModelConfig, TensorConfig};

/// `[sequence]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequenceKeys {
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    max_sequence_idle_us: Option<u64>,
    #[serde(default)]
    max_sequences: Option<usize>,
    #[serde(default)]
    max_queue_delay_us: Option<u64>,
    #[serde(default)]
    preferred_batch_sizes: Vec<usize>,
    #[serde(default)]
    controls: Vec<ControlKeys>,
    #[serde(default)]
    states: Vec<StateKeys>,
    /// Triton's `iterative_sequence`: one request is a whole sequence,
    /// which the model runs over several executions (it reschedules the
    /// request); a client gives no correlation id.
    #[serde(default)]
    iterative: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ControlKeys {
    name: String,
    kind: String,
    #[serde(default)]
    datatype: Option<String>,
    #[serde(default)]
    false_true: Option<Vec<f64>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateKeys {
    input: String,
    output: String,
    datatype: String,
    shape: Vec<i64>,
    #[serde(default)]
    data_file: Option<String>,
}

/// Triton's two strategies. Both run any number of sequences at once
/// (up to `max_sequences`), one request of each at a time, and batch
/// requests of different sequences as dynamic batching does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Triton's `direct`.
    Direct,
    /// Triton's `oldest`.
    Oldest,
}

/// What a control input says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    /// 1 (its true value) on a sequence's first request.
    Start,
    /// True on its last.
    End,
    /// True on every request that carries data (always, here).
    Ready,
    /// The correlation id.
    Corrid,
}

/// One control input.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// The model's input.
    pub name: String,
    /// What it says.
    pub kind: ControlKind,
    /// Its datatype (a flag's, or the correlation id's).
    pub datatype: DataType,
    /// The values for false and true (not for `Corrid`).
    pub false_true: [f64; 2],
}

/// One implicit state.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// The input the model takes it in.
    pub input: String,
    /// The output the model gives its next value in.
    pub output: String,
    /// Its datatype.
    pub datatype: DataType,
    /// One sequence's state.
    pub shape: Vec<usize>,
    /// Its value at a sequence's start.
    pub initial: TensorData,
}

/// A model's sequence batching, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequencing {
    /// Triton's strategy, as configured.
    pub strategy: Strategy,
    /// An idle sequence is released after this.
    pub idle: Duration,
    /// Sequences in flight; a new one past it is refused.
    pub max_sequences: usize,
    /// The control inputs the server fills.
    pub controls: Vec<Control>,
    /// The implicit states the server carries.
    pub states: Vec<State>,
    /// The model reads its sequence from each request's parameters
    /// (`sequence_id`, `sequence_start`, `sequence_end`), as a Triton
    /// Python model reads `request.correlation_id()` and `request.flags()`;
    /// its worker is chosen by it. Set for Python models.
    pub flags_as_parameters: bool,
    /// Triton's iterative sequences: a request without a correlation id
    /// is a sequence of its own, which its model carries over its
    /// executions (`[sequence] iterative`).
    pub iterative: bool,
}

/// Triton's default `max_sequence_idle_microseconds`: one second.
const DEFAULT_IDLE_US: u64 = 1_000_000;
const DEFAULT_MAX_SEQUENCES: usize = 1024;

impl Sequencing {
    /// Checks `keys`; a state's `data_file` is read from `folder`.
    pub fn from_keys(keys: &SequenceKeys, folder: &Path) -> Result<Sequencing, String> {
        let strategy = match keys.strategy.as_deref() {
            None | Some("direct") => Strategy::Direct,
            Some("oldest") => Strategy::Oldest,
            Some(other) => {
                return Err(format!(
                    "[sequence] strategy '{other}': use \"direct\" or \"oldest\""
                ))
            }
        };
        let mut controls = Vec::new();
        for c in &keys.controls {
            let kind = match c.kind.as_str() {
                "start" => ControlKind::Start,
                "end" => ControlKind::End,
                "ready" => ControlKind::Ready,
                "corrid" => ControlKind::Corrid,
                other => {
                    return Err(format!(
                        "control '{}' has kind '{other}': use start, end, ready or corrid",
                        c.name
                    ))
                }
            };
            let datatype: DataType = c
                .datatype
                .as_deref()
                .unwrap_or(if kind == ControlKind::Corrid {
                    "UINT64"
                } else {
                    "INT32"
                })
                .parse()
                .map_err(|e| format!("control '{}': {e}", c.name))?;
            let allowed = match kind {
                ControlKind::Corrid => matches!(
                    datatype,
                    DataType::Uint64
                        | DataType::Int64
                        | DataType::Uint32
                        | DataType::Int32
                        | DataType::Bytes
                ),
                _ => matches!(datatype, DataType::Int32 | DataType::Fp32 | DataType::Bool),
            };
            if !allowed {
                return Err(format!(
                    "control '{}' ({}) cannot be {datatype}: a flag is INT32, FP32 or BOOL, a \
                     correlation id UINT64, INT64, UINT32, INT32 or BYTES (TYPE_STRING)",
                    c.name, c.kind
                ));
            }
            let false_true = match (&c.false_true, kind) {
                (_, ControlKind::Corrid) => [0.0, 0.0],
                (Some(pair), _) if pair.len() == 2 => [pair[0], pair[1]],
                (Some(pair), _) => {
                    return Err(format!(
                        "control '{}': false_true has {} values; give [false, true]",
                        c.name,
                        pair.len()
                    ))
                }
                (None, _) => [0.0, 1.0],
            };
            controls.push(Control {
                name: c.name.clone(),
                kind,
                datatype,
                false_true,
            });
        }
        let mut states = Vec::new();
        for s in &keys.states {
            let datatype: DataType = s
                .datatype
                .parse()
                .map_err(|e| format!("state '{}': {e}", s.input))?;
            let shape = s
                .shape
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    format!(
                        "state '{}' has shape {:?}: a state's shape is fixed (no -1)",
                        s.input, s.shape
                    )
                })?;
            let count = element_count(&shape)
                .ok_or_else(|| format!("state '{}': its shape overflows", s.input))?;
            let bytes = match &s.data_file {
                Some(file) => {
                    let path = crate::config::inside(folder, "data_file", file)?;
                    std::fs::read(&path)
                        .map_err(|e| format!("state '{}': {}: {e}", s.input, path.display()))?
                }
                None => {
                    let size = if datatype == DataType::Bytes {
                        4 * count
                    } else {
                        wirespeed_core::raw::raw_size(datatype, count).ok_or("too large")?
                    };
                    vec![0u8; size]
                }
            };
            let initial = from_raw(datatype, count, &bytes, usize::MAX)
                .map_err(|e| format!("state '{}': its initial value: {e}", s.input))?;
            states.push(State {
                input: s.input.clone(),
                output: s.output.clone(),
                datatype,
                shape,
                initial,
            });
        }
        let idle = Duration::from_micros(keys.max_sequence_idle_us.unwrap_or(DEFAULT_IDLE_US));
        let max_sequences = keys.max_sequences.unwrap_or(DEFAULT_MAX_SEQUENCES);
        if max_sequences == 0 || idle.is_zero() {
            return Err("[sequence] max_sequences and max_sequence_idle_us must be above 0".into());
        }
        Ok(Sequencing {
            strategy,
            idle,
            max_sequences,
            controls,
            states,
            flags_as_parameters: false,
            iterative: keys.iterative,
        })
    }

    /// Whether `name` is a tensor the server gives or takes (a control or
    /// a state), never a client's.
    pub fn hides(&self, name: &str) -> bool {
        self.controls.iter().any(|c| c.name == name)
            || self
                .states
                .iter()
                .any(|s| s.input == name || s.output == name)
    }
}

/// The `[batching]` a `[sequence]` table implies for a model with a batch
/// dimension: its requests, of different sequences, are batched.
pub fn batching(keys: &SequenceKeys, max_batch_size: usize) -> toml::Table {
    let mut batching = toml::Table::new();
    batching.insert("max_batch_size".into(), (max_batch_size as i64).into());
    if !keys.preferred_batch_sizes.is_empty() {
        batching.insert(
            "preferred_batch_sizes".into(),
            toml::Value::Array(
                keys.preferred_batch_sizes
                    .iter()
                    .map(|&n| (n as i64).into())
                    .collect(),
            ),
        );
    }
    let delay = keys.max_queue_delay_us.unwrap_or(0);
    batching.insert(
        "max_queue_delay_us".into(),
        i64::try_from(delay).unwrap_or(i64::MAX).into(),
    );
    batching
}

/// Adds the control and state tensors to the tensors the backend loads
/// (those the config does not declare already), with the batch dimension
/// when the model has one.
pub fn extend(config: &mut ModelConfig, sequencing: &Sequencing, batch: bool) {
    let tensor = |name: &str, datatype: DataType, dims: &[i64]| {
        let mut shape = Vec::with_capacity(dims.len() + 1);
        if batch {
            shape.push(-1);
        }
        shape.extend_from_slice(dims);
        TensorConfig {
            name: name.to_owned(),
            datatype: datatype.as_str().to_owned(),
            shape,
            labels: None,
            format: None,
            reshape: None,
            optional: false,
            backend_keys: toml::Table::new(),
        }
    };
    let declared = |tensors: &[TensorConfig], name: &str| tensors.iter().any(|t| t.name == name);
    for control in &sequencing.controls {
        if !declared(&config.inputs, &control.name) {
            let added = tensor(&control.name, control.datatype, &[1]);
            config.inputs.push(added);
        }
    }
    for state in &sequencing.states {
        let dims: Vec<i64> = state.shape.iter().map(|&d| d as i64).collect();
        if !declared(&config.inputs, &state.input) {
            let added = tensor(&state.input, state.datatype, &dims);
            config.inputs.push(added);
        }
        if !declared(&config.outputs, &state.output) {
            let added = tensor(&state.output, state.datatype, &dims);
            config.outputs.push(added);
        }
    }
}
