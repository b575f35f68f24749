//! skl2onnx's default classifier output: `ZipMap` (`ai.onnx.ml`) turns
//! the probabilities tensor into a sequence of maps from class label to
//! probability, which no tensor protocol carries. wirespeed serves the
//! probabilities tensor itself under the ZipMap's output name (the same
//! numbers, one column per class, in the classifier's class order) and
//! gives the ZipMap's class labels to that output, so the classification
//! extension names the classes (`"0.92:1:setosa"`) and the model's
//! configuration lists them.
//!
//! Done on the graph before an engine reads it: the ZipMap node becomes
//! an `Identity`, and the graph output's type the tensor's.

use tract_onnx::pb::{tensor_shape_proto, type_proto, ModelProto, TensorShapeProto, TypeProto};

/// FLOAT, as a tensor's `elem_type`: ZipMap takes `tensor(float)`.
const FLOAT: i32 = 1;

/// Replaces each ZipMap that gives a graph output by the tensor it
/// zips; returns each such output's class labels.
pub(super) fn unzip(model: &mut ModelProto) -> Vec<(String, Vec<String>)> {
    let Some(graph) = model.graph.as_mut() else {
        return Vec::new();
    };
    let mut labelled = Vec::new();
    for node in graph.node.iter_mut() {
        if node.op_type != "ZipMap" {
            continue;
        }
        let Some(output) = node.output.first().cloned() else {
            continue;
        };
        let Some(value) = graph.output.iter_mut().find(|o| o.name == output) else {
            continue;
        };
        let labels: Vec<String> = node
            .attribute
            .iter()
            .find_map(|a| match a.name.as_str() {
                "classlabels_strings" => Some(
                    a.strings
                        .iter()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect(),
                ),
                "classlabels_int64s" => Some(a.ints.iter().map(i64::to_string).collect()),
                _ => None,
            })
            .unwrap_or_default();
        node.op_type = "Identity".to_owned();
        node.domain = String::new();
        node.attribute.clear();
        let unknown = || tensor_shape_proto::Dimension {
            denotation: String::new(),
            value: None,
        };
        value.r#type = Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto {
                    dim: vec![unknown(), unknown()],
                }),
            })),
        });
        labelled.push((output, labels));
    }
    labelled
}
