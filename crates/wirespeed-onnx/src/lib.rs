//! `backend = "onnx"`: ONNX models in-process, run by tract (`tract-onnx`,
//! pure Rust, so the default build serves ONNX with no system library).
//!
//! ```toml
//! backend = "onnx"
//! model_file = "model.onnx"   # the default
//! instances = 2               # optional: requests computed at once (default: the CPU pool's threads)
//! ```
//!
//! The inputs and outputs, their datatypes and shapes are read from the
//! graph, as Triton completes an ONNX model's configuration: `config.toml`
//! needs only the backend. Inputs and outputs it declares must agree with
//! the graph (names, datatypes, and every dimension the graph fixes); a
//! disagreement is a load error that names both. A dimension the graph
//! leaves symbolic (`N`, `batch`) or unknown stays variable (`-1`), so any
//! batch size runs through the one plan, optimized once at load.
//!
//! An operator tract lacks, an opset it does not know, or a file that does
//! not parse is a load error naming it, never an error at the first
//! request: the whole graph is typed and optimized at load. Compute runs on
//! the server's CPU pool, never on an I/O thread.

mod known;
mod ml;
mod plan;
#[cfg(feature = "onnxruntime")]
mod runtime;
mod zipmap;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use serde::Deserialize;
use tract_onnx::prelude::{
    tvec, DatumType, Framework, TValue, TVec, Tensor as TractTensor, TypedRunnableModel,
};
use wirespeed_core::{DataType, Error, Execution, Model, ModelMetadata, Tensor, TensorData};

use plan::plan;
use wirespeed_backend::{Backend, ModelSource};

/// `backend = "onnx"`.
pub struct Onnx;

impl Backend for Onnx {
    fn name(&self) -> &'static str {
        "onnx"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        Ok(Arc::new(OnnxModel::load(source)?))
    }
}

/// The onnx backend's own keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnnxKeys {
    /// The model's file, relative to its folder.
    #[serde(default = "default_model_file")]
    model_file: String,
    /// The engine that runs it.
    #[serde(default)]
    engine: Option<String>,
    /// Requests computed at once, when `max_concurrency` is not set.
    #[serde(default)]
    instances: Option<usize>,
}

fn default_model_file() -> String {
    "model.onnx".to_owned()
}

/// An ONNX model, ready on its engine.
pub struct OnnxModel {
    metadata: ModelMetadata,
    engine: Engine,
    instances: Option<usize>,
    /// Requests of fewer input elements run inline (0: none do).
    inline_elements: usize,
    /// The class labels of outputs a ZipMap gave (`zipmap.rs`).
    labels: Vec<(String, Vec<String>)>,
}

/// What runs the graph.
enum Engine {
    /// tract's plan, optimized once at load.
    Tract(Arc<TypedRunnableModel>),
    /// ONNX Runtime's sessions, one a request computed at once.
    #[cfg(feature = "onnxruntime")]
    OnnxRuntime(runtime::Sessions),
}

impl OnnxModel {
    fn load(source: &ModelSource<'_>) -> Result<OnnxModel, String> {
        let keys: OnnxKeys = source.keys()?;
        if keys.instances == Some(0) {
            return Err("instances must be at least 1".to_owned());
        }
        let path = source.file("model_file", &keys.model_file)?;
        if !path.is_file() {
            return Err(format!("model_file {} does not exist", path.display()));
        }
        let config = source.config();
        // What no engine here answers rightly is refused before either
        // sees it (a file tract cannot read is left to the engines).
        #[cfg_attr(not(feature = "onnxruntime"), allow(unused_assignments))]
        let mut preferred = None;
        let mut labels = Vec::new();
        // The graph, read once (a file tract cannot read is left to the
        // engines to report).
        let mut proto = framework().proto_model_for_path(&path).ok();
        if let Some(proto) = proto.as_mut() {
            if let Some(why) = known::wrong_everywhere(proto) {
                return Err(format!("{}: {why}", file_name(&path)));
            }
            preferred = known::prefer_onnxruntime(proto);
            #[cfg(not(feature = "onnxruntime"))]
            let _ = &preferred;
            labels = zipmap::unzip(proto);
        }
        // A graph changed here goes to ONNX Runtime as bytes.
        #[cfg(feature = "onnxruntime")]
        let rewritten = (!labels.is_empty())
            .then(|| proto.as_ref().map(prost::Message::encode_to_vec))
            .flatten();
        // The graph goes to tract as read (its weights are not copied);
        // each load plans it once.
        let proto = std::cell::RefCell::new(proto);
        let on_tract = || {
            let given = proto.borrow_mut().take();
            // tract reports what it cannot read as errors; a panic deep
            // in the engine is caught here too, so that it is a load
            // error of this model and the server serves the others.
            let planned = std::panic::catch_unwind(AssertUnwindSafe(|| {
                plan(&path, given, &config.inputs, &config.outputs, source.pool())
            }))
            .unwrap_or_else(|_| {
                Err(format!(
                    "{}: tract failed on this graph (the engine panicked while typing or \
                     optimizing it)",
                    file_name(&path)
                ))
            })?;
            let (plan, inputs, outputs, inline_elements) = planned;
            Ok::<_, String>((Engine::Tract(plan), inputs, outputs, inline_elements))
        };
        #[cfg(feature = "onnxruntime")]
        let on_onnxruntime = || {
            let count = keys.instances.unwrap_or(source.pool().threads());
            let (sessions, inputs, outputs) = runtime::Sessions::load(
                &path,
                rewritten.as_deref(),
                count,
                &config.inputs,
                &config.outputs,
            )?;
            Ok::<_, String>((Engine::OnnxRuntime(sessions), inputs, outputs, 0))
        };
        let (engine, inputs, outputs, inline_elements) = match keys.engine.as_deref() {
            Some("tract") => on_tract()?,
            // tract first (pure Rust, and the tree runtime for ai.onnx.ml's
            // ensembles); what it cannot run, or would run wrongly, on ONNX
            // Runtime when its library is there.
            #[cfg(feature = "onnxruntime")]
            None | Some("auto") if preferred.is_some() && runtime::environment().is_ok() => {
                match on_onnxruntime() {
                    Ok(served) => {
                        tracing::info!(
                            model = %source.name(),
                            reason = %preferred.as_deref().unwrap_or_default(),
                            "ONNX Runtime serves this graph (engine auto)"
                        );
                        served
                    }
                    Err(_) => on_tract()?,
                }
            }
            #[cfg(feature = "onnxruntime")]
            None | Some("auto") => match on_tract() {
                Ok(planned) => planned,
                Err(refused) => match runtime::environment() {
                    Ok(_) => {
                        let served = on_onnxruntime().map_err(|e| {
                            format!("{refused}\nand ONNX Runtime cannot serve it either: {e}")
                        })?;
                        tracing::info!(
                            model = %source.name(),
                            reason = %refused,
                            "tract cannot serve this graph; ONNX Runtime serves it (engine auto)"
                        );
                        served
                    }
                    Err(missing) => {
                        return Err(format!(
                            "{refused}\n(ONNX Runtime could serve what tract cannot, and is not \
                             loaded: {missing})"
                        ))
                    }
                },
            },
            #[cfg(not(feature = "onnxruntime"))]
            None | Some("auto") => on_tract()?,
            #[cfg(feature = "onnxruntime")]
            Some("onnxruntime") => on_onnxruntime()?,
            #[cfg(not(feature = "onnxruntime"))]
            Some("onnxruntime") => {
                return Err(
                    "engine 'onnxruntime': this wirespeed was built without it; build \
                     with `cargo build --release -p wirespeed --features onnxruntime`"
                        .to_owned(),
                )
            }
            Some(other) => {
                return Err(format!(
                    "unknown engine '{other}'; the onnx backend runs models on 'auto' (the \
                     default: tract, else ONNX Runtime), 'tract' or 'onnxruntime'"
                ))
            }
        };
        let made = |engine: Engine, inputs, outputs, inline_elements, labels| OnnxModel {
            metadata: ModelMetadata {
                name: source.name().to_owned(),
                versions: vec![config.version.clone()],
                platform: engine.platform().to_owned(),
                inputs,
                outputs,
            },
            engine,
            instances: keys.instances,
            inline_elements,
            labels,
        };
        #[cfg_attr(not(feature = "onnxruntime"), allow(unused_mut))]
        let mut model = made(engine, inputs, outputs, inline_elements, labels.clone());
        // A graph tract plans and then cannot run at all (a trial on
        // zeros fails where ONNX Runtime's succeeds) goes to ONNX Runtime
        // under `auto`: nothing that loads fails every request.
        #[cfg(feature = "onnxruntime")]
        if matches!(keys.engine.as_deref(), None | Some("auto"))
            && matches!(model.engine, Engine::Tract(_))
            && runtime::environment().is_ok()
        {
            if let Err(why) = model.trial() {
                if let Ok((engine, inputs, outputs, inline)) = on_onnxruntime() {
                    let other = made(engine, inputs, outputs, inline, labels);
                    if other.trial().is_ok() {
                        tracing::info!(
                            model = %source.name(),
                            reason = %why,
                            "tract cannot run this graph; ONNX Runtime serves it (engine auto)"
                        );
                        model = other;
                    }
                }
            }
        }
        Ok(model)
    }

    /// Runs the model once on zeros (a variable dimension 1), every
    /// output asked for: whether it can run at all.
    #[cfg(feature = "onnxruntime")]
    fn trial(&self) -> Result<(), String> {
        let zeros = self
            .metadata
            .inputs
            .iter()
            .map(|spec| {
                let shape: Vec<usize> = spec.shape.iter().map(|&d| d.max(1) as usize).collect();
                let count = wirespeed_core::element_count(&shape).unwrap_or(0);
                let size = match spec.datatype {
                    DataType::Bytes => 4 * count,
                    datatype => wirespeed_core::raw::raw_size(datatype, count).unwrap_or(0),
                };
                let data = wirespeed_core::raw::from_raw(
                    spec.datatype,
                    count,
                    &vec![0u8; size],
                    usize::MAX,
                )
                .map_err(|e| e.to_string())?;
                Ok(Tensor {
                    name: spec.name.clone(),
                    shape,
                    data,
                    parameters: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let outputs: Vec<usize> = (0..self.metadata.outputs.len()).collect();
        std::panic::catch_unwind(AssertUnwindSafe(|| self.infer(&zeros, &outputs)))
            .map_err(|_| "the engine panicked".to_owned())?
            .map(drop)
            .map_err(|e| e.message().to_owned())
    }
}

impl Engine {
    /// The model's platform, as Triton names it.
    fn platform(&self) -> &'static str {
        match self {
            Engine::Tract(_) => "onnx_tract",
            #[cfg(feature = "onnxruntime")]
            Engine::OnnxRuntime(_) => "onnxruntime_onnx",
        }
    }
}

/// A BYTES input's elements as the UTF-8 strings ONNX's are.
fn text(name: &str, elements: &[Vec<u8>]) -> Result<Vec<String>, String> {
    elements
        .iter()
        .map(|b| String::from_utf8(b.clone()))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|_| format!("input '{name}' has an element that is not UTF-8 text"))
}

/// The datatypes both sides have, once: each wire datatype with its
/// `TensorData` variant and tract's datum type, and the three conversions
/// made from the one table.
macro_rules! datatypes {
    ($($variant:ident => $datum:ident),+ $(,)?) => {
        /// The wire datatype of a tract datum type.
        fn data_type(datum: DatumType) -> Option<DataType> {
            match datum {
                $(DatumType::$datum => Some(DataType::$variant),)+
                DatumType::String => Some(DataType::Bytes),
                _ => None,
            }
        }

        /// A request tensor as tract's.
        fn to_tract(tensor: &Tensor) -> Result<TractTensor, String> {
            let made = match &tensor.data {
                $(TensorData::$variant(v) => TractTensor::from_shape(&tensor.shape, v),)+
                TensorData::Bytes(v) => {
                    tract_onnx::prelude::tensor1(&text(&tensor.name, v)?).into_shape(&tensor.shape)
                }
                other => {
                    return Err(format!(
                        "input '{}' is {}, which ONNX models here do not take",
                        tensor.name,
                        other.datatype().as_str()
                    ))
                }
            };
            made.map_err(|e| format!("input '{}': {e}", tensor.name))
        }

        /// A tract result as a response tensor called `name`.
        fn from_tract(name: &str, value: &TractTensor) -> Result<Tensor, String> {
            let plain = value.try_as_plain_ram().map_err(|e| e.to_string())?;
            let data = match value.datum_type() {
                $(DatumType::$datum => TensorData::$variant(
                    plain.as_slice().map_err(|e| e.to_string())?.to_vec(),
                ),)+
                DatumType::String => TensorData::Bytes(
                    plain
                        .as_slice::<String>()
                        .map_err(|e| e.to_string())?
                        .iter()
                        .map(|s| s.as_bytes().to_vec())
                        .collect(),
                ),
                other => return Err(format!("output '{name}' came out as {other:?}")),
            };
            Ok(Tensor {
                name: name.to_owned(),
                shape: value.shape().to_vec(),
                data,
                parameters: Vec::new(),
            })
        }
    };
}

datatypes! {
    Bool => Bool,
    Uint8 => U8,
    Uint16 => U16,
    Uint32 => U32,
    Uint64 => U64,
    Int8 => I8,
    Int16 => I16,
    Int32 => I32,
    Int64 => I64,
    Fp16 => F16,
    Fp32 => F32,
    Fp64 => F64,
}

impl Model for OnnxModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn class_labels(&self) -> Vec<(String, Vec<String>)> {
        self.labels.clone()
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        // In the graph's order, whatever the request's.
        let ordered = self
            .metadata
            .inputs
            .iter()
            .map(|spec| {
                inputs.iter().find(|t| t.name == spec.name).ok_or_else(|| {
                    Error::invalid_input(format!("input '{}' is missing", spec.name))
                })
            })
            .collect::<Result<Vec<&Tensor>, Error>>()?;
        // Without the onnxruntime feature, tract is the only engine.
        #[cfg_attr(
            not(feature = "onnxruntime"),
            allow(clippy::infallible_destructuring_match)
        )]
        let plan = match &self.engine {
            Engine::Tract(plan) => plan,
            #[cfg(feature = "onnxruntime")]
            Engine::OnnxRuntime(sessions) => {
                return sessions.run(&self.metadata, &ordered, outputs);
            }
        };
        let mut values: TVec<TValue> = tvec![];
        for tensor in ordered {
            values.push(to_tract(tensor).map_err(Error::invalid_input)?.into());
        }
        let results = plan.run(values).map_err(|e| {
            Error::invalid_input(format!(
                "model '{}' cannot run on these inputs: {e:#}",
                self.metadata.name
            ))
        })?;
        outputs
            .iter()
            .map(|&i| {
                let name = &self.metadata.outputs[i].name;
                from_tract(name, &results[i]).map_err(Error::internal)
            })
            .collect()
    }

    fn default_concurrency(&self) -> Option<usize> {
        self.instances
    }

    /// The CPU pool, since a graph's cost is not its input's size (a
    /// small image through a CNN takes milliseconds); but a small request
    /// to a graph of light operators (a tabular model) runs inline.
    fn execution(&self, elements: usize) -> Execution {
        if elements < self.inline_elements {
            Execution::Inline
        } else {
            Execution::Pool
        }
    }
}

/// tract's ONNX reader with wirespeed's `ai.onnx.ml` operators (`ml/`).
/// The model file's name, for messages: the repository's error names
/// the model's folder before them.
fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn framework() -> tract_onnx::Onnx {
    let mut onnx = tract_onnx::onnx();
    ml::register(&mut onnx.op_register);
    onnx
}

/// The ONNX operators the onnx backend runs, in name order (`docs/onnx.md`
/// lists them).
pub fn supported_operators() -> Vec<String> {
    let mut ops: Vec<String> = framework()
        .op_register
        .0
        .keys()
        .filter(|op| op.as_str() != "ZipMap")
        .cloned()
        .collect();
    ops.sort();
    ops
}

#[cfg(test)]
mod tests {
    use tract_onnx::pb::{GraphProto, ModelProto, NodeProto};

    fn graph_of(ops: &[&str]) -> ModelProto {
        ModelProto {
            graph: Some(GraphProto {
                node: ops
                    .iter()
                    .map(|op| NodeProto {
                        op_type: (*op).to_owned(),
                        ..NodeProto::default()
                    })
                    .collect(),
                ..GraphProto::default()
            }),
            ..ModelProto::default()
        }
    }

    /// A light graph's requests run inline up to 1024 elements, fewer as
    /// its trees cost more: a 100-tree forest of 8 features inlines 40
    /// rows; 100,000 trees, none.
    #[test]
    fn trees_bound_what_runs_inline() {
        let input = |shape: Vec<i64>| wirespeed_core::TensorSpec {
            optional: false,
            name: "x".into(),
            datatype: wirespeed_core::DataType::Fp32,
            shape,
        };
        assert_eq!(super::plan::inline_elements(&[input(vec![-1, 8])], 0), 1024);
        assert_eq!(
            super::plan::inline_elements(&[input(vec![-1, 8])], 100),
            327
        );
        assert_eq!(
            super::plan::inline_elements(&[input(vec![-1, -1])], 100_000),
            0
        );
    }

    /// A converted scikit-learn pipeline is light; a graph with one
    /// convolution or matrix product is not.
    #[test]
    fn tabular_graphs_are_light_and_others_not() {
        assert!(super::plan::light(&graph_of(&[
            "Scaler",
            "TreeEnsembleClassifier",
            "Cast"
        ])));
        assert!(!super::plan::light(&graph_of(&["Scaler", "Conv"])));
        assert!(!super::plan::light(&graph_of(&["MatMul"])));
        assert!(!super::plan::light(&ModelProto::default()));
    }

    /// docs/onnx.md lists exactly the operators tract registers, so the
    /// page cannot drift from the engine it documents.
    #[test]
    fn the_docs_list_every_supported_operator() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/onnx.md"))
                .unwrap();
        let listed: Vec<&str> = doc
            .split("<!-- operators -->")
            .nth(1)
            .expect("docs/onnx.md has an operators section")
            .split(", ")
            .map(|op| op.trim().trim_matches('`'))
            .filter(|op| !op.is_empty())
            .collect();
        let supported = super::supported_operators();
        assert_eq!(
            listed,
            supported.iter().map(String::as_str).collect::<Vec<_>>()
        );
    }
}
