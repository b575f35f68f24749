//! Triton's model configuration extension: a served model described as
//! Triton's `ModelConfig`, for `GET /v2/models/{m}[/versions/{v}]/config`
//! and gRPC `ModelConfig`. perf_analyzer and Model Analyzer read it at
//! start, after the model's metadata, and stop if it is missing.
//!
//! wirespeed takes no batch dimension of Triton's (its shapes are whole,
//! with `-1` for a variable dimension), so `max_batch_size` is 0 and each
//! input's `dims` is its whole shape, as Triton writes a non-batching
//! model's. `max_concurrency` is the CPU instance group's count;
//! `max_queue` is the queue policy's size. An output's labels file is its
//! `label_filename`.

use serde_json::{json, Value};
use wirespeed_core::DataType;
use wirespeed_proto::inference as pb;

use crate::models::ServedModel;

/// Triton's name for `datatype`: `TYPE_` and the V2 name, with BYTES as
/// `TYPE_STRING`.
fn data_type(datatype: DataType) -> pb::DataType {
    if datatype == DataType::Bytes {
        return pb::DataType::TypeString;
    }
    pb::DataType::from_str_name(&format!("TYPE_{}", datatype.as_str()))
        .unwrap_or(pb::DataType::TypeInvalid)
}

/// The configuration of `model`, served as `name`.
pub(crate) fn model_config(name: &str, model: &ServedModel) -> pb::ModelConfig {
    let metadata = model.metadata();
    let input = metadata
        .inputs
        .iter()
        .map(|spec| pb::ModelInput {
            name: spec.name.clone(),
            data_type: data_type(spec.datatype) as i32,
            format: pb::model_input::Format::None as i32,
            dims: spec.shape.clone(),
            optional: false,
        })
        .collect();
    let output = metadata
        .outputs
        .iter()
        .map(|spec| pb::ModelOutput {
            name: spec.name.clone(),
            data_type: data_type(spec.datatype) as i32,
            dims: spec.shape.clone(),
            label_filename: model
                .labels(&spec.name)
                .map(|l| l.file.clone())
                .unwrap_or_default(),
        })
        .collect();
    let mut parameters = std::collections::HashMap::new();
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
        max_batch_size: 0,
        input,
        output,
        scheduling_choice: None,
        instance_group: vec![pb::ModelInstanceGroup {
            name: name.to_owned(),
            count: i32::try_from(model.max_concurrency).unwrap_or(i32::MAX),
            kind: pb::model_instance_group::Kind::Cpu as i32,
        }],
        default_model_filename: String::new(),
        parameters,
    }
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
                "format": "FORMAT_NONE",
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
    json!({
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "runtime": "",
        "version_policy": { "latest": { "num_versions": 1 } },
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
    })
}
