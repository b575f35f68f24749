//! Triton's model configuration extension: a served model described as
//! Triton's `ModelConfig`, for `GET /v2/models/{m}[/versions/{v}]/config`
//! and gRPC `ModelConfig`. perf_analyzer and Model Analyzer read it at
//! start, after the model's metadata, and stop if it is missing.
//!
//! wirespeed's shapes are whole, with `-1` for a variable dimension. A
//! model with neither `max_batch_size` (Triton's, from its `config.pbtxt`
//! or `config.toml`) nor `[batching]` takes no batch dimension of
//! Triton's, so `max_batch_size` is 0 and each input's `dims` is its whole
//! shape, as Triton writes a non-batching model's. One with either is
//! written as Triton writes a batching one: its `max_batch_size`, `dims`
//! without the first dimension, and with `[batching]` `dynamic_batching`
//! with its preferred sizes, queue delay, priority levels and queue
//! policies (`[queue]`).
//! `max_concurrency` is the CPU instance group's count; `max_queue` is a
//! parameter, beside the model's own (a `config.pbtxt`'s `parameters`,
//! `config.toml`'s `[parameters]`). An output's labels file is its `label_filename`.

use serde_json::{json, Value};
use wirespeed_core::DataType;
use wirespeed_models::{
    triton_data_type as data_type, ControlKind, Ensemble, LevelPolicy, Scheduling, Sequencing,
    Strategy, TimeoutAction, VersionPolicy,
};
use wirespeed_proto::inference as pb;

use wirespeed_engine::served::ServedModel;

/// The configuration of `model`, served as `name`.
pub(crate) fn model_config(name: &str, model: &ServedModel) -> pb::ModelConfig {
    let metadata = model.metadata();
    let scheduling = &model.scheduling;
    let batching = scheduling.batching.as_ref();
    // Triton's max_batch_size: the model's own (a config.pbtxt's, or
    // config.toml's `max_batch_size`), else its batcher's.
    let max_batch_size = match model.max_batch_size {
        0 => batching.map_or(0, |b| b.max_batch_size),
        n => n,
    };
    // A batching model's dims leave out the batch dimension, as Triton's.
    let dims = |shape: &[i64]| match max_batch_size {
        0 => shape.to_vec(),
        _ => shape.get(1..).unwrap_or(&[]).to_vec(),
    };
    let input = metadata
        .inputs
        .iter()
        .filter(|spec| model.shows(&spec.name))
        .map(|spec| pb::ModelInput {
            name: spec.name.clone(),
            data_type: data_type(spec.datatype) as i32,
            format: model
                .input_formats
                .iter()
                .find(|(input, _)| *input == spec.name)
                .and_then(|(_, f)| pb::model_input::Format::from_str_name(f))
                .unwrap_or(pb::model_input::Format::None) as i32,
            dims: dims(&spec.shape),
            optional: spec.optional,
            ..Default::default()
        })
        .collect();
    let output = metadata
        .outputs
        .iter()
        .filter(|spec| model.shows(&spec.name))
        .map(|spec| pb::ModelOutput {
            name: spec.name.clone(),
            data_type: data_type(spec.datatype) as i32,
            dims: dims(&spec.shape),
            label_filename: model
                .labels(&spec.name)
                .map(|l| l.file.clone())
                .unwrap_or_default(),
            ..Default::default()
        })
        .collect();
    let mut parameters: std::collections::HashMap<String, pb::ModelParameter> = model
        .parameters
        .iter()
        .map(|(k, v)| {
            let value = pb::ModelParameter {
                string_value: v.clone(),
            };
            (k.clone(), value)
        })
        .collect();
    parameters.insert(
        "max_queue".to_owned(),
        pb::ModelParameter {
            string_value: model.max_queue.to_string(),
        },
    );
    pb::ModelConfig {
        name: name.to_owned(),
        platform: metadata.platform.clone(),
        backend: model.backend.clone(),
        version_policy: Some(version_policy(&model.version_policy)),
        max_batch_size: i32::try_from(max_batch_size).unwrap_or(i32::MAX),
        input,
        output,
        scheduling_choice: match (model.composite_as::<Ensemble>(), &model.sequences) {
            (Some(ensemble), _) => Some(pb::model_config::SchedulingChoice::EnsembleScheduling(
                ensemble_scheduling(ensemble),
            )),
            (None, Some(sequences)) => Some(pb::model_config::SchedulingChoice::SequenceBatching(
                sequence_batching(sequences.sequencing(), scheduling),
            )),
            (None, None) => batching.map(|_| {
                pb::model_config::SchedulingChoice::DynamicBatching(dynamic_batching(scheduling))
            }),
        },
        instance_group: vec![pb::ModelInstanceGroup {
            name: name.to_owned(),
            // A model of instances (a Python model's workers) has their
            // number; one that computes on the server's threads, the
            // requests it computes at once.
            count: i32::try_from(model.model.instances().unwrap_or(model.max_concurrency))
                .unwrap_or(i32::MAX),
            kind: pb::model_instance_group::Kind::Cpu as i32,
            ..Default::default()
        }],
        default_model_filename: String::new(),
        parameters,
        // Clients check it before they stream (perf_analyzer, the Python
        // backend's own examples).
        model_transaction_policy: model
            .model
            .decoupled()
            .then_some(pb::ModelTransactionPolicy { decoupled: true }),
        ..Default::default()
    }
}

/// A stateful model's sequence batching, as Triton's `sequence_batching`
/// (perf_analyzer sends sequences when it sees one).
fn sequence_batching(
    sequencing: &Sequencing,
    scheduling: &Scheduling,
) -> pb::ModelSequenceBatching {
    use pb::model_sequence_batching::{
        control::Kind, Control, ControlInput, State, StrategyChoice,
    };
    let delay = scheduling
        .batching
        .as_ref()
        .map_or(0, |b| b.max_queue_delay.as_micros() as u64);
    let control_input = sequencing
        .controls
        .iter()
        .map(|c| {
            let mut control = Control {
                kind: match c.kind {
                    ControlKind::Start => Kind::ControlSequenceStart,
                    ControlKind::End => Kind::ControlSequenceEnd,
                    ControlKind::Ready => Kind::ControlSequenceReady,
                    ControlKind::Corrid => Kind::ControlSequenceCorrid,
                } as i32,
                ..Default::default()
            };
            match (c.kind, c.datatype) {
                (ControlKind::Corrid, datatype) => control.data_type = data_type(datatype) as i32,
                (_, DataType::Fp32) => {
                    control.fp32_false_true = c.false_true.iter().map(|&v| v as f32).collect()
                }
                (_, DataType::Bool) => {
                    control.bool_false_true = c.false_true.iter().map(|&v| v != 0.0).collect()
                }
                _ => control.int32_false_true = c.false_true.iter().map(|&v| v as i32).collect(),
            }
            ControlInput {
                name: c.name.clone(),
                control: vec![control],
            }
        })
        .collect();
    let state = sequencing
        .states
        .iter()
        .map(|s| State {
            input_name: s.input.clone(),
            output_name: s.output.clone(),
            data_type: data_type(s.datatype) as i32,
            dims: s.shape.iter().map(|&d| d as i64).collect(),
            ..Default::default()
        })
        .collect();
    pb::ModelSequenceBatching {
        max_sequence_idle_microseconds: sequencing.idle.as_micros() as u64,
        control_input,
        state,
        strategy_choice: Some(match sequencing.strategy {
            Strategy::Direct => {
                StrategyChoice::Direct(pb::model_sequence_batching::StrategyDirect {
                    max_queue_delay_microseconds: delay,
                    minimum_slot_utilization: 0.0,
                })
            }
            Strategy::Oldest => {
                StrategyChoice::Oldest(pb::model_sequence_batching::StrategyOldest {
                    max_candidate_sequences: i32::try_from(sequencing.max_sequences)
                        .unwrap_or(i32::MAX),
                    max_queue_delay_microseconds: delay,
                    ..Default::default()
                })
            }
        }),
        iterative_sequence: false,
    }
}

/// An ensemble's steps, as Triton's `ensemble_scheduling` (perf_analyzer
/// reads it to find the composing models).
fn ensemble_scheduling(ensemble: &Ensemble) -> pb::ModelEnsembling {
    let map = |pairs: &[(String, String)]| pairs.iter().cloned().collect();
    pb::ModelEnsembling {
        step: ensemble
            .steps()
            .iter()
            .map(|step| pb::model_ensembling::Step {
                model_name: step.model.clone(),
                model_version: step
                    .version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(-1),
                input_map: map(&step.inputs),
                output_map: map(&step.outputs),
                model_namespace: String::new(),
            })
            .collect(),
    }
}

/// Triton's `version_policy` for `policy`.
fn version_policy(policy: &VersionPolicy) -> pb::ModelVersionPolicy {
    use pb::model_version_policy::{All, Latest, PolicyChoice, Specific};
    let choice = match policy {
        VersionPolicy::Latest(n) => PolicyChoice::Latest(Latest {
            num_versions: u32::try_from(*n).unwrap_or(u32::MAX),
        }),
        VersionPolicy::All => PolicyChoice::All(All {}),
        VersionPolicy::Specific(versions) => PolicyChoice::Specific(Specific {
            versions: versions
                .iter()
                .map(|&v| i64::try_from(v).unwrap_or(i64::MAX))
                .collect(),
        }),
    };
    pb::ModelVersionPolicy {
        policy_choice: Some(choice),
    }
}

/// Triton's `dynamic_batching` for a model with `[batching]`.
fn dynamic_batching(scheduling: &Scheduling) -> pb::ModelDynamicBatching {
    let batching = scheduling.batching.as_ref();
    let queue = &scheduling.queue;
    let levels = queue.levels.len();
    pb::ModelDynamicBatching {
        preferred_batch_size: batching
            .map(|b| b.preferred_batch_sizes.iter().map(|&s| s as i32).collect())
            .unwrap_or_default(),
        max_queue_delay_microseconds: batching.map_or(0, |b| b.max_queue_delay.as_micros() as u64),
        preserve_ordering: false,
        // One level is Triton's "no priorities": 0 levels.
        priority_levels: if levels > 1 { levels as u64 } else { 0 },
        default_priority_level: if levels > 1 {
            queue.default_level as u64 + 1
        } else {
            0
        },
        default_queue_policy: Some(queue_policy(&queue.levels[queue.default_level])),
        priority_queue_policy: if levels > 1 {
            queue
                .levels
                .iter()
                .enumerate()
                .map(|(i, p)| (i as u64 + 1, queue_policy(p)))
                .collect()
        } else {
            Default::default()
        },
    }
}

fn queue_policy(policy: &LevelPolicy) -> pb::ModelQueuePolicy {
    pb::ModelQueuePolicy {
        timeout_action: match policy.timeout_action {
            TimeoutAction::Reject => pb::model_queue_policy::TimeoutAction::Reject,
            TimeoutAction::Delay => pb::model_queue_policy::TimeoutAction::Delay,
        } as i32,
        default_timeout_microseconds: policy.default_timeout.map_or(0, |t| t.as_micros() as u64),
        allow_timeout_override: policy.allow_timeout_override,
        max_queue_size: u32::try_from(policy.max_queue_size).unwrap_or(u32::MAX),
    }
}

/// Triton's JSON of a `version_policy`, the latest version when unset.
/// `sequence_batching` in Triton's JSON.
fn sequence_batching_json(s: &pb::ModelSequenceBatching) -> Value {
    use pb::model_sequence_batching::StrategyChoice;
    let type_name = |t: i32| {
        pb::DataType::try_from(t)
            .unwrap_or(pb::DataType::TypeInvalid)
            .as_str_name()
    };
    let controls: Vec<Value> = s
        .control_input
        .iter()
        .map(|input| {
            let control: Vec<Value> = input
                .control
                .iter()
                .map(|c| {
                    json!({
                        "kind": pb::model_sequence_batching::control::Kind::try_from(c.kind)
                            .map(|k| k.as_str_name())
                            .unwrap_or("CONTROL_SEQUENCE_START"),
                        "int32_false_true": c.int32_false_true,
                        "fp32_false_true": c.fp32_false_true,
                        "bool_false_true": c.bool_false_true,
                        "data_type": type_name(c.data_type),
                    })
                })
                .collect();
            json!({ "name": input.name, "control": control })
        })
        .collect();
    let states: Vec<Value> = s
        .state
        .iter()
        .map(|st| {
            json!({
                "input_name": st.input_name,
                "output_name": st.output_name,
                "data_type": type_name(st.data_type),
                "dims": st.dims,
                "initial_state": [],
                "use_same_buffer_for_input_output": false,
                "use_growable_memory": false,
            })
        })
        .collect();
    let mut answer = json!({
        "max_sequence_idle_microseconds": s.max_sequence_idle_microseconds,
        "control_input": controls,
        "state": states,
        "iterative_sequence": false,
    });
    match &s.strategy_choice {
        Some(StrategyChoice::Oldest(o)) => {
            answer["oldest"] = json!({
                "max_candidate_sequences": o.max_candidate_sequences,
                "preferred_batch_size": o.preferred_batch_size,
                "max_queue_delay_microseconds": o.max_queue_delay_microseconds,
                "preserve_ordering": o.preserve_ordering,
            });
        }
        Some(StrategyChoice::Direct(d)) => {
            answer["direct"] = json!({
                "max_queue_delay_microseconds": d.max_queue_delay_microseconds,
                "minimum_slot_utilization": d.minimum_slot_utilization,
            });
        }
        None => {}
    }
    answer
}

fn version_policy_json(policy: Option<&pb::ModelVersionPolicy>) -> Value {
    use pb::model_version_policy::PolicyChoice;
    match policy.and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::All(_)) => json!({ "all": {} }),
        Some(PolicyChoice::Specific(s)) => json!({ "specific": { "versions": s.versions } }),
        Some(PolicyChoice::Latest(l)) => json!({ "latest": { "num_versions": l.num_versions } }),
        None => json!({ "latest": { "num_versions": 1 } }),
    }
}

fn queue_policy_json(policy: &pb::ModelQueuePolicy) -> Value {
    let action = pb::model_queue_policy::TimeoutAction::try_from(policy.timeout_action)
        .unwrap_or(pb::model_queue_policy::TimeoutAction::Reject);
    json!({
        "timeout_action": action.as_str_name(),
        "default_timeout_microseconds": policy.default_timeout_microseconds,
        "allow_timeout_override": policy.allow_timeout_override,
        "max_queue_size": policy.max_queue_size,
    })
}

/// The REST answer: Triton's JSON for the message, fields by their proto
/// names, enums by their names, and every field present, as Triton prints
/// them (perf_analyzer reads some without checking they are there).
pub(crate) fn to_json(config: &pb::ModelConfig) -> Value {
    let type_name = |t: i32| {
        pb::DataType::try_from(t)
            .unwrap_or(pb::DataType::TypeInvalid)
            .as_str_name()
    };
    let inputs: Vec<Value> = config
        .input
        .iter()
        .map(|i| {
            json!({
                "name": i.name,
                "data_type": type_name(i.data_type),
                "format": pb::model_input::Format::try_from(i.format)
                    .unwrap_or(pb::model_input::Format::None)
                    .as_str_name(),
                "dims": i.dims,
                "is_shape_tensor": false,
                "allow_ragged_batch": false,
                "optional": i.optional,
                "is_non_linear_format_io": false,
            })
        })
        .collect();
    let outputs: Vec<Value> = config
        .output
        .iter()
        .map(|o| {
            json!({
                "name": o.name,
                "data_type": type_name(o.data_type),
                "dims": o.dims,
                "label_filename": o.label_filename,
                "is_shape_tensor": false,
                "is_non_linear_format_io": false,
            })
        })
        .collect();
    let groups: Vec<Value> = config
        .instance_group
        .iter()
        .map(|g| {
            json!({
                "name": g.name,
                "kind": "KIND_CPU",
                "count": g.count,
                "gpus": [],
                "secondary_devices": [],
                "profile": [],
                "passive": false,
                "host_policy": "",
            })
        })
        .collect();
    let parameters: serde_json::Map<String, Value> = config
        .parameters
        .iter()
        .map(|(k, v)| (k.clone(), json!({ "string_value": v.string_value })))
        .collect();
    let mut answer = json!({
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "runtime": "",
        "version_policy": version_policy_json(config.version_policy.as_ref()),
        "max_batch_size": config.max_batch_size,
        "input": inputs,
        "output": outputs,
        "batch_input": [],
        "batch_output": [],
        "optimization": {
            "priority": "PRIORITY_DEFAULT",
            "input_pinned_memory": { "enable": true },
            "output_pinned_memory": { "enable": true },
            "gather_kernel_buffer_threshold": 0,
            "eager_batching": false,
        },
        "instance_group": groups,
        "default_model_filename": config.default_model_filename,
        "cc_model_filenames": {},
        "metric_tags": {},
        "parameters": parameters,
        "model_warmup": [],
    });
    if let Some(pb::model_config::SchedulingChoice::DynamicBatching(d)) = &config.scheduling_choice
    {
        let policies: serde_json::Map<String, Value> = d
            .priority_queue_policy
            .iter()
            .map(|(level, p)| (level.to_string(), queue_policy_json(p)))
            .collect();
        answer["dynamic_batching"] = json!({
            "preferred_batch_size": d.preferred_batch_size,
            "max_queue_delay_microseconds": d.max_queue_delay_microseconds,
            "preserve_ordering": d.preserve_ordering,
            "priority_levels": d.priority_levels,
            "default_priority_level": d.default_priority_level,
            "default_queue_policy": d.default_queue_policy.as_ref().map(queue_policy_json),
            "priority_queue_policy": policies,
        });
    }
    if let Some(pb::model_config::SchedulingChoice::EnsembleScheduling(e)) =
        &config.scheduling_choice
    {
        let steps: Vec<Value> = e
            .step
            .iter()
            .map(|step| {
                json!({
                    "model_name": step.model_name,
                    "model_version": step.model_version,
                    "input_map": step.input_map,
                    "output_map": step.output_map,
                    "model_namespace": step.model_namespace,
                })
            })
            .collect();
        answer["ensemble_scheduling"] = json!({ "step": steps });
    }
    if let Some(pb::model_config::SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice
    {
        answer["sequence_batching"] = sequence_batching_json(s);
    }
    if let Some(policy) = &config.model_transaction_policy {
        answer["model_transaction_policy"] = json!({ "decoupled": policy.decoupled });
    }
    answer
}
