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

/// Why tract may answer this graph wrongly, where ONNX Runtime answers
/// rightly: `auto` gives it to ONNX Runtime when its library is there, and
/// to tract otherwise (which answers most such graphs rightly).
pub(super) fn tract_doubtful(model: &ModelProto) -> Option<String> {
    let graph = model.graph.as_ref()?;
    // A masked softmax (an exported attention): a row masked whole gives
    // NaN on tract where ONNX gives 0.
    let softmax = nodes(graph).find(|n| n.op_type == "Softmax")?;
    nodes(graph).any(|n| n.op_type == "Where").then(|| {
        format!(
            "a masked Softmax (node '{}'): a row masked whole gives NaN on tract",
            softmax.name
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
