//! An ONNX graph planned at load: read, its opsets checked, typed and
//! optimized by tract, its inputs and outputs checked against the ones
//! the configuration declares, and the requests small enough to run
//! inline on the I/O thread sized. `mod.rs` runs the plan.

use std::sync::Arc;

use tract_onnx::prelude::{
    tvec, DatumType, Framework, InferenceFact, InferenceModelExt, IntoRunnable, SpecialOps, TDim,
    TVec, TractResult, TypedModel, TypedRunnableModel,
};
use tract_onnx::tract_hir::infer::Factoid;
use wirespeed_core::{CpuPool, TensorSpec};

use super::{data_type, file_name, framework, known, ml};
use wirespeed_backend::TensorConfig;

/// A graph's plan, its inputs and outputs as clients see them, and
/// the requests small enough to run inline (`inline_elements`).
pub(super) type Planned = (
    Arc<TypedRunnableModel>,
    Vec<TensorSpec>,
    Vec<TensorSpec>,
    usize,
);

/// Reads, types and optimizes the graph at `path`, checking it against the
/// config's `inputs` and `outputs` when it declares them. Returns the plan
/// and the inputs and outputs as clients see them.
pub(super) fn plan(
    path: &std::path::Path,
    proto: Option<tract_onnx::pb::ModelProto>,
    declared_inputs: &[TensorConfig],
    declared_outputs: &[TensorConfig],
    pool: &CpuPool,
) -> Result<Planned, String> {
    // The model's folder names the model in every load error already.
    let file = file_name(path);
    let onnx = framework();
    let proto = match proto {
        Some(proto) => Ok(proto),
        None => onnx.proto_model_for_path(path),
    };
    let loaded = proto.and_then(|proto| {
        opsets(&proto).map_err(tract_onnx::prelude::TractError::msg)?;
        if let Some(why) = known::tract_wrong(&proto) {
            return Err(tract_onnx::prelude::TractError::msg(why));
        }
        let dir = path.parent().and_then(|d| d.to_str());
        let parsed = onnx.parse(&proto, dir)?;
        if !parsed.unresolved_inputs.is_empty() {
            return Err(tract_onnx::prelude::TractError::msg(format!(
                "inputs {:?} come from nowhere",
                parsed.unresolved_inputs
            )));
        }
        let declared: Vec<String> = proto
            .graph
            .as_ref()
            .map(|g| g.output.iter().map(|o| o.name.clone()).collect())
            .unwrap_or_default();
        Ok((
            parsed.model,
            light(&proto),
            known::parameter_inputs(&proto),
            declared,
        ))
    });
    let (mut model, light, parameters, graph_outputs) =
        loaded.map_err(|e| format!("{file} cannot be loaded: {e:#}"))?;
    // Every operator the engine lacks, at once, each with its node.
    let missing: Vec<String> = model
        .nodes()
        .iter()
        .filter_map(|node| {
            let op = node.op.name();
            let op = op.strip_prefix("Unimplemented(")?.strip_suffix(')')?;
            Some(format!("{op} (node '{}')", node.name))
        })
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{file} uses operators tract does not run: {}; docs/onnx.md lists those it does",
            missing.join(", ")
        ));
    }
    let outlets = model.input_outlets().map_err(|e| e.to_string())?.to_vec();
    let mut inputs = Vec::with_capacity(outlets.len());
    for (i, outlet) in outlets.iter().enumerate() {
        let name = model.node(outlet.node).name.clone();
        let fact = model.input_fact(i).map_err(|e| e.to_string())?.clone();
        let Some(datum) = fact.datum_type.concretize() else {
            return Err(format!("input '{name}' has no datatype in the graph"));
        };
        let datatype = data_type(datum)
            .ok_or_else(|| format!("input '{name}' is {datum:?}, which wirespeed cannot send"))?;
        if fact.shape.is_open() {
            return Err(format!(
                "input '{name}' has no rank in the graph; give it a shape"
            ));
        }
        // Unknown dimensions become symbols of their own: variable.
        let mut dims: TVec<TDim> = tvec![];
        for (d, dim) in fact.shape.dims().enumerate() {
            dims.push(match dim.concretize() {
                Some(dim) => dim,
                None => TDim::Sym(model.sym(&format!("{name}_{d}"))),
            });
        }
        let mut spec = TensorSpec {
            optional: false,
            name: name.clone(),
            datatype,
            shape: dims.iter().map(|d| d.to_i64().unwrap_or(-1)).collect(),
        };
        if let Some(declared) = declared_inputs.iter().find(|t| t.name == name) {
            let wanted = declared.to_spec()?;
            agree("input", &spec, &wanted)?;
            // The config may fix what the graph leaves variable.
            for (dim, &want) in dims.iter_mut().zip(&wanted.shape) {
                if want >= 0 && dim.to_i64().is_err() {
                    *dim = TDim::Val(want);
                }
            }
            spec.shape = wanted.shape;
        }
        model
            .set_input_fact(i, InferenceFact::dt_shape(datum, dims))
            .map_err(|e| format!("input '{name}': {e:#}"))?;
        inputs.push(spec);
    }
    undeclared("input", declared_inputs, &inputs)?;

    let mut typed = model.into_typed().map_err(|e| {
        if parameters.is_empty() {
            format!("{file}: the graph cannot be typed: {e:#}")
        } else {
            // Most graphs tract cannot type take an operator's
            // parameter (a shape, axes, pads, scales) as an input.
            format!(
                "{file}: tract types a graph only when these are constants in it: {}; bake \
                     them into the graph as initializers, or serve it on ONNX Runtime (engine \
                     \"auto\" with its library, or \"onnxruntime\")",
                parameters.join(", ")
            )
        }
    })?;
    int64_outputs(&mut typed).map_err(|e| format!("{file}: {e:#}"))?;
    let trees = ml::share_pool(&mut typed, pool);
    let mut outputs = Vec::new();
    for (i, outlet) in typed
        .output_outlets()
        .map_err(|e| e.to_string())?
        .iter()
        .enumerate()
    {
        // The graph's own names: tract's optimiser may merge two outputs
        // into one outlet (a constant and an Identity of it), whose label
        // is then one name twice.
        let name = graph_outputs.get(i).cloned().unwrap_or_else(|| {
            typed
                .outlet_label(*outlet)
                .map(str::to_owned)
                .unwrap_or_else(|| typed.node(outlet.node).name.clone())
        });
        let fact = typed.output_fact(i).map_err(|e| e.to_string())?;
        let datatype = data_type(fact.datum_type).ok_or_else(|| {
            format!(
                "output '{name}' is {:?}, which wirespeed cannot send",
                fact.datum_type
            )
        })?;
        let spec = TensorSpec {
            optional: false,
            name: name.clone(),
            datatype,
            shape: fact
                .shape
                .iter()
                .map(|d| d.to_i64().unwrap_or(-1))
                .collect(),
        };
        if let Some(declared) = declared_outputs.iter().find(|t| t.name == name) {
            agree("output", &spec, &declared.to_spec()?)?;
        }
        outputs.push(spec);
    }
    undeclared("output", declared_outputs, &outputs)?;
    let plan = typed
        .into_optimized()
        .and_then(|m| m.into_runnable())
        .map_err(|e| format!("{file}: the graph cannot be planned: {e:#}"))?;
    let inline = if light {
        inline_elements(&inputs, trees)
    } else {
        0
    };
    Ok((plan, inputs, outputs, inline))
}

/// The newest operator sets published (ONNX 1.23): the default domain's
/// and `ai.onnx.ml`'s. A model that declares a newer one was written for
/// operators whose meaning no engine here knows.
const NEWEST_OPSET: i64 = 28;
const NEWEST_ML_OPSET: i64 = 5;

/// Refuses opsets that do not exist (yet).
fn opsets(proto: &tract_onnx::pb::ModelProto) -> Result<(), String> {
    for opset in &proto.opset_import {
        let (name, newest) = match opset.domain.as_str() {
            "" | "ai.onnx" => ("the default domain", NEWEST_OPSET),
            "ai.onnx.ml" => ("ai.onnx.ml", NEWEST_ML_OPSET),
            _ => continue,
        };
        if opset.version < 1 || opset.version > newest {
            return Err(format!(
                "it declares opset {} of {name}, which does not exist: the newest is {newest}",
                opset.version
            ));
        }
    }
    Ok(())
}

/// Operators whose cost is a few operations an element: a graph of only
/// these (a tabular model: trees, scalers, a linear model, the casts
/// around them) answers a small request in microseconds.
#[rustfmt::skip]
const LIGHT_OPERATORS: &[&str] = &[
    // ai.onnx.ml
    "TreeEnsembleClassifier", "TreeEnsembleRegressor", "Scaler", "Imputer", "Binarizer",
    "LinearClassifier", "LinearRegressor", "Normalizer", "ArrayFeatureExtractor", "CategoryMapper",
    // element-wise and shape operators
    "Abs", "Add", "And", "ArgMax", "ArgMin", "Cast", "CastLike", "Ceil", "Clip", "Concat",
    "Constant", "ConstantOfShape", "Div", "Equal", "Erf", "Exp", "Flatten", "Floor", "Gather",
    "Greater", "GreaterOrEqual", "Identity", "IsNaN", "Less", "LessOrEqual", "Log", "Max", "Min",
    "Mul", "Neg", "Not", "Or", "Pow", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceSum", "Relu", "Reshape", "Round", "Shape", "Sigmoid", "Slice", "Softmax", "Split",
    "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Where",
];

/// Whether every node of the graph is a light operator.
pub(super) fn light(proto: &tract_onnx::pb::ModelProto) -> bool {
    proto.graph.as_ref().is_some_and(|graph| {
        graph
            .node
            .iter()
            .all(|node| LIGHT_OPERATORS.contains(&node.op_type.as_str()))
    })
}

/// Requests of fewer input elements than this, to a graph of light
/// operators, run on the I/O thread that read them: their compute
/// (microseconds: one row through 100 trees takes 3 µs) costs less than
/// handing them to the CPU pool and back.
const LIGHT_INLINE_ELEMENTS: usize = 1024;

/// Tree walks (a row through a tree, about 10 ns) a request may cost and
/// still run inline.
const LIGHT_INLINE_WALKS: usize = 4096;

/// The input elements below which a light graph's request runs inline:
/// [`LIGHT_INLINE_ELEMENTS`], fewer when its `trees` would make that many
/// elements cost more than [`LIGHT_INLINE_WALKS`] (a row is the first
/// input's elements past its first dimension; a variable one counts 1).
pub(super) fn inline_elements(inputs: &[TensorSpec], trees: usize) -> usize {
    if trees == 0 {
        return LIGHT_INLINE_ELEMENTS;
    }
    let row: usize = inputs.first().map_or(1, |spec| {
        spec.shape
            .iter()
            .skip(1)
            .map(|&d| usize::try_from(d).unwrap_or(1).max(1))
            .product()
    });
    (LIGHT_INLINE_WALKS.saturating_mul(row) / trees).min(LIGHT_INLINE_ELEMENTS)
}

/// tract reads ONNX's INT64 casts as its symbolic dimension type (`TDim`);
/// an output of that type is cast back to `i64`, the INT64 the graph
/// declares (skl2onnx and onnxmltools cast class labels so).
fn int64_outputs(typed: &mut TypedModel) -> TractResult<()> {
    let mut outlets = typed.output_outlets()?.to_vec();
    let mut changed = false;
    for (i, outlet) in outlets.iter_mut().enumerate() {
        if typed.outlet_fact(*outlet)?.datum_type != DatumType::TDim {
            continue;
        }
        let label = typed
            .outlet_label(*outlet)
            .map(str::to_owned)
            .unwrap_or_else(|| typed.node(outlet.node).name.clone());
        // Named by the output's place: two outputs may be one outlet.
        let cast = typed.wire_node(
            format!("{label}.as_i64.{i}"),
            tract_onnx::tract_core::ops::cast::cast(DatumType::I64),
            &[*outlet],
        )?[0];
        typed.set_outlet_label(cast, label)?;
        *outlet = cast;
        changed = true;
    }
    if changed {
        typed.select_output_outlets(&outlets)?;
    }
    Ok(())
}

/// Whether the graph's `graph` and the config's `config` agree: the same
/// datatype and rank, and the config's dimension wherever the graph fixes
/// one.
pub(super) fn agree(what: &str, graph: &TensorSpec, config: &TensorSpec) -> Result<(), String> {
    let fits = graph.datatype == config.datatype
        && graph.shape.len() == config.shape.len()
        && graph
            .shape
            .iter()
            .zip(&config.shape)
            .all(|(&g, &c)| g < 0 || g == c);
    if fits {
        return Ok(());
    }
    Err(format!(
        "{what} '{}': config.toml says {} {:?}, the graph says {} {:?} (-1: variable)",
        graph.name,
        config.datatype.as_str(),
        config.shape,
        graph.datatype.as_str(),
        graph.shape
    ))
}

/// A declared tensor the graph does not have.
pub(super) fn undeclared(
    what: &str,
    declared: &[TensorConfig],
    graph: &[TensorSpec],
) -> Result<(), String> {
    match declared
        .iter()
        .find(|d| !graph.iter().any(|g| g.name == d.name))
    {
        Some(d) => Err(format!(
            "config.toml declares {what} '{}', which the graph does not have; its {what}s are {}",
            d.name,
            graph
                .iter()
                .map(|g| format!("'{}'", g.name))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => Ok(()),
    }
}
