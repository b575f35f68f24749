//! Graphs an engine is known to answer wrongly, found by the ONNX
//! backend test suite (`benchmarks/scripts/onnx_suite.py`, each against
//! the suite's expected outputs and onnxruntime's): a wrong answer is
//! worse than a refusal, so such a graph is refused by that engine, by
//! name and reason, and `engine = "auto"` gives it to the other.
//!
//! Checked on the graph's nodes (and their attributes) before an engine
//! sees it; what only a request's values would show (a shift amount) is
//! judged by the operator. Each entry says what goes wrong; drop it when
//! the engine's release that fixes it is ours.

use tract_onnx::pb::{GraphProto, ModelProto, NodeProto};

/// FP16, as a tensor's `elem_type`.
const FLOAT16: i32 = 10;

fn attribute<'a>(node: &'a NodeProto, name: &str) -> Option<&'a tract_onnx::pb::AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn text(node: &NodeProto, name: &str) -> Option<String> {
    attribute(node, name).map(|a| String::from_utf8_lossy(&a.s).into_owned())
}

fn nodes(graph: &GraphProto) -> impl Iterator<Item = &NodeProto> {
    graph.node.iter()
}

/// Whether a tensor of the graph (an input, an output, an initializer or
/// a typed value) is FP16.
fn has_float16(graph: &GraphProto) -> bool {
    let typed = graph
        .input
        .iter()
        .chain(&graph.output)
        .chain(&graph.value_info)
        .any(|v| {
            matches!(
                v.r#type.as_ref().and_then(|t| t.value.as_ref()),
                Some(tract_onnx::pb::type_proto::Value::TensorType(t)) if t.elem_type == FLOAT16
            )
        });
    typed || graph.initializer.iter().any(|t| t.data_type == FLOAT16)
}

/// Operators' inputs that are parameters (a shape, axes, pads, scales):
/// tract types a graph only when they are constants.
const PARAMETERS: &[(&str, usize, &str)] = &[
    ("Reshape", 1, "shape"),
    ("Expand", 1, "shape"),
    ("ConstantOfShape", 0, "shape"),
    ("Tile", 1, "repeats"),
    ("Slice", 1, "starts"),
    ("Slice", 2, "ends"),
    ("Slice", 3, "axes"),
    ("Slice", 4, "steps"),
    ("Pad", 1, "pads"),
    ("Resize", 1, "roi"),
    ("Resize", 2, "scales"),
    ("Resize", 3, "sizes"),
    ("Upsample", 1, "scales"),
    ("TopK", 1, "k"),
    ("Unsqueeze", 1, "axes"),
    ("Squeeze", 1, "axes"),
    ("ReduceSum", 1, "axes"),
    ("ReduceMean", 1, "axes"),
    ("ReduceMax", 1, "axes"),
    ("ReduceMin", 1, "axes"),
    ("ReduceProd", 1, "axes"),
    ("ReduceL1", 1, "axes"),
    ("ReduceL2", 1, "axes"),
    ("ReduceLogSum", 1, "axes"),
    ("ReduceLogSumExp", 1, "axes"),
    ("ReduceSumSquare", 1, "axes"),
    ("Range", 0, "start"),
    ("Range", 1, "limit"),
    ("Range", 2, "delta"),
    ("OneHot", 1, "depth"),
    ("Split", 1, "split"),
    ("CumSum", 1, "axis"),
    ("CenterCropPad", 1, "shape"),
    ("Col2Im", 1, "image_shape"),
    ("Col2Im", 2, "block_shape"),
];

/// The graph's inputs that feed an operator's parameter, each said as
/// "input 'shape' (the shape of Reshape node 'r')".
pub(super) fn parameter_inputs(model: &ModelProto) -> Vec<String> {
    let Some(graph) = model.graph.as_ref() else {
        return Vec::new();
    };
    let constants: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let inputs: std::collections::HashSet<&str> = graph
        .input
        .iter()
        .map(|i| i.name.as_str())
        .filter(|name| !constants.contains(name))
        .collect();
    let mut found = Vec::new();
    for node in nodes(graph) {
        for &(op, slot, what) in PARAMETERS {
            if node.op_type != op {
                continue;
            }
            if let Some(input) = node.input.get(slot).filter(|i| inputs.contains(i.as_str())) {
                found.push(format!(
                    "input '{input}' (the {what} of {op} node '{}')",
                    node.name
                ));
            }
        }
    }
    found
}

/// Why tract would answer this graph wrongly, when it would.
pub(super) fn tract_wrong(model: &ModelProto) -> Option<String> {
    let graph = model.graph.as_ref()?;
    for node in nodes(graph) {
        let op = node.op_type.as_str();
        let why = match op {
            // Shifts by a negative amount or past the width wrap instead of
            // giving 0 (the amounts come with the request).
            "BitShift" => Some("shifts past the bit width or by a negative amount"),
            // alpha is ignored.
            "Celu" => Some("its alpha is ignored"),
            "Swish" if attribute(node, "alpha").is_some_and(|a| a.f != 1.0) => {
                Some("its alpha is ignored")
            }
            // The reverse direction's Y and Y_h are wrong.
            "RNN" | "GRU" | "LSTM"
                if matches!(
                    text(node, "direction").as_deref(),
                    Some("reverse") | Some("bidirectional")
                ) =>
            {
                Some("its reverse direction is computed wrongly")
            }
            // CRD is computed as DCR.
            "SpaceToDepth" | "DepthToSpace" if text(node, "mode").as_deref() == Some("CRD") => {
                Some("mode CRD is computed as DCR")
            }
            _ => None,
        };
        if let Some(why) = why {
            return Some(format!(
                "{op} (node '{}'): {why} by tract, so it does not run there",
                node.name
            ));
        }
    }
    // FP16 attention and convolutions accumulate in FP16 and drift past
    // the suite's tolerance.
    if has_float16(graph) {
        if let Some(node) = nodes(graph).find(|n| {
            matches!(
                n.op_type.as_str(),
                "Softmax" | "LogSoftmax" | "Sigmoid" | "Conv" | "MatMul"
            )
        }) {
            return Some(format!(
                "{} (node '{}') on FP16: tract accumulates in FP16, past the suite's tolerance, so \
                 it does not run there",
                node.op_type, node.name
            ));
        }
    }
    None
}

/// Why ONNX Runtime should serve this graph rather than tract, when its
/// library is there (`auto` gives it to tract otherwise, which answers
/// such graphs, rightly but for the first case's corner):
/// - a masked `Softmax` (an exported attention): a row masked whole gives
///   NaN on tract where ONNX gives 0;
/// - convolutions and attention: ONNX Runtime's kernels are 2x to 6x
///   faster than tract's on them, at batch 1 already (docs/onnx.md,
///   "How fast, in-process"), where tract is the faster on tabular models
///   and small dense networks.
pub(super) fn prefer_onnxruntime(model: &ModelProto) -> Option<String> {
    let graph = model.graph.as_ref()?;
    if let Some(softmax) = nodes(graph).find(|n| n.op_type == "Softmax") {
        if nodes(graph).any(|n| n.op_type == "Where") {
            return Some(format!(
                "a masked Softmax (node '{}'): a row masked whole gives NaN on tract",
                softmax.name
            ));
        }
    }
    nodes(graph)
        .find(|n| {
            matches!(
                n.op_type.as_str(),
                "Conv" | "ConvTranspose" | "Softmax" | "Attention" | "LayerNormalization"
            )
        })
        .map(|n| {
            format!(
                "{} (node '{}'): ONNX Runtime's kernels are the faster on it",
                n.op_type, n.name
            )
        })
}

/// Why neither engine here answers this graph as ONNX defines it, when
/// they do not: refused whatever the engine.
pub(super) fn wrong_everywhere(model: &ModelProto) -> Option<String> {
    let graph = model.graph.as_ref()?;
    for node in nodes(graph) {
        let op = node.op_type.as_str();
        let why = match op {
            // Both differ from the current definition's outputs.
            "DFT" | "STFT" => Some("its outputs differ from ONNX's current definition"),
            "MaxUnpool" if node.input.len() >= 3 && !node.input[2].is_empty() => {
                Some("with an output_shape, its outputs differ from ONNX's definition")
            }
            "Resize"
                if text(node, "coordinate_transformation_mode").as_deref()
                    == Some("align_corners")
                    && matches!(text(node, "mode").as_deref(), Some("linear") | Some("cubic")) =>
            {
                Some("align_corners with linear or cubic interpolation differs from ONNX's definition when it downsamples")
            }
            "Attention"
                if attribute(node, "is_causal").is_some_and(|a| a.i != 0)
                    && (node.input.get(4).is_some_and(|past| !past.is_empty())
                        || has_float16(graph)) =>
            {
                Some("causal masking with past keys, or on FP16, differs from ONNX's definition")
            }
            _ => None,
        };
        if let Some(why) = why {
            return Some(format!(
                "{op} (node '{}'): {why} in the engines wirespeed has, so it is refused",
                node.name
            ));
        }
    }
    None
}
