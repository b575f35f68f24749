//! `engine = "onnxruntime"`: ONNX Runtime through the `ort` crate, behind
//! the `onnxruntime` cargo feature, loaded at run time, so building needs
//! no library and the default build stays pure Rust. The library is found
//! where users have it (`locate`): the one `ORT_DYLIB_PATH` names; else
//! the `libonnxruntime.so` the `onnxruntime` Python wheel ships (in
//! `onnxruntime/capi/`) in the Python environments at hand: the active
//! venv (`VIRTUAL_ENV`), the Python models' interpreter
//! (`WIRESPEED_PYTHON`), each `python3` on `PATH`, the user's site
//! (`~/.local`); else wherever the dynamic loader looks.
//!
//! `Session::run` takes `&mut self`, so a model holds one session an
//! instance (`instances`, by default the CPU pool's threads) and each
//! request computing takes one; the scheduler computes at most that many
//! at once, so a request always finds one free. Each session runs on one
//! intra-op thread: requests, not ONNX Runtime's own threads, share the
//! cores, as every other backend's do.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, TensorElementType, TensorRef, ValueType};
use wirespeed_core::{DataType, Error, ModelMetadata, Tensor, TensorData, TensorSpec};

use super::plan::{agree, undeclared};
use super::text;
use wirespeed_backend::TensorConfig;

/// The process's one ONNX Runtime environment, made at the first load.
static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

/// The library's name when ORT_DYLIB_PATH does not say where it is: the
/// dynamic loader looks for it where it looks for any (LD_LIBRARY_PATH,
/// the system's library folders).
const LIBRARY: &str = "libonnxruntime.so";

/// Where ONNX Runtime's library was found.
enum Found {
    /// `ORT_DYLIB_PATH` names it.
    Named,
    /// The `onnxruntime` package of a Python environment (its prefix).
    Python(PathBuf),
    /// Nowhere of ours: the dynamic loader's own search.
    Loader,
}

/// ONNX Runtime's library, and where it was found (see the module's doc).
fn locate() -> (OsString, Found) {
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH") {
        return (path, Found::Named);
    }
    for prefix in python_prefixes() {
        if let Some(library) = wheel_library(&prefix) {
            return (library.into_os_string(), Found::Python(prefix));
        }
    }
    (LIBRARY.into(), Found::Loader)
}

/// The Python environments a user has at hand, most specific first: the
/// active venv, the Python models' interpreter, each `python3` (or
/// `python`) on `PATH`, the user's own site.
fn python_prefixes() -> Vec<PathBuf> {
    let mut prefixes = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        prefixes.push(PathBuf::from(venv));
    }
    if let Some(python) = std::env::var_os("WIRESPEED_PYTHON").map(PathBuf::from) {
        if let Some(prefix) = python.parent().and_then(Path::parent) {
            prefixes.push(prefix.to_owned());
        }
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if dir.join("python3").is_file() || dir.join("python").is_file() {
            if let Some(prefix) = dir.parent() {
                prefixes.push(prefix.to_owned());
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    let mut seen = std::collections::HashSet::new();
    prefixes.retain(|p| seen.insert(p.clone()));
    prefixes
}

/// The onnxruntime wheel's library under the Python `prefix`:
/// `lib/python3.*/site-packages/onnxruntime/capi/libonnxruntime.so*`.
fn wheel_library(prefix: &Path) -> Option<PathBuf> {
    let mut found = Vec::new();
    for python in std::fs::read_dir(prefix.join("lib")).ok()?.flatten() {
        if !python.file_name().to_string_lossy().starts_with("python3") {
            continue;
        }
        let capi = python.path().join("site-packages/onnxruntime/capi");
        for file in std::fs::read_dir(capi).into_iter().flatten().flatten() {
            if file.file_name().to_string_lossy().starts_with(LIBRARY) {
                found.push(file.path());
            }
        }
    }
    found.sort();
    found.pop()
}

/// The process's ONNX Runtime, loaded at the first call; the log says
/// where it was found, or why it was not.
pub(super) fn environment() -> Result<&'static Environment, String> {
    ENVIRONMENT
        .get_or_init(|| {
            let (library, found) = locate();
            // ort's loader panics on some failures rather than erring.
            let loaded = std::panic::catch_unwind(|| ort::init_from(&library))
                .map_err(|_| "its loader failed".to_owned())
                .and_then(|r| r.map_err(|e| e.to_string()));
            let shown = Path::new(&library).display().to_string();
            let loaded = match (loaded, found) {
                (Ok(loaded), found) => {
                    let how = match found {
                        Found::Named => "named by ORT_DYLIB_PATH".to_owned(),
                        Found::Python(prefix) => format!(
                            "the onnxruntime package of the Python at {}",
                            prefix.display()
                        ),
                        Found::Loader => "on the dynamic loader's path".to_owned(),
                    };
                    tracing::info!(library = %shown, found = %how, "ONNX Runtime found");
                    loaded
                }
                (Err(e), Found::Named) => return Err(format!("ORT_DYLIB_PATH: {e}")),
                (Err(e), Found::Python(_)) => return Err(format!("ONNX Runtime at {shown}: {e}")),
                (Err(_), Found::Loader) => {
                    let error = format!(
                        "ONNX Runtime's library is not found: no onnxruntime package in the \
                         Python environments at hand (VIRTUAL_ENV, WIRESPEED_PYTHON, python3 on \
                         PATH, ~/.local), and {LIBRARY} is not where the loader looks: pip \
                         install onnxruntime there, or set ORT_DYLIB_PATH to the library (e.g. \
                         the libonnxruntime.so.* in the onnxruntime wheel's capi folder)"
                    );
                    tracing::info!(reason = %error, "ONNX Runtime not found; ONNX models run on tract alone");
                    return Err(error);
                }
            };
            loaded
                .with_name("wirespeed")
                .with_telemetry(false)
                .build()
                .map_err(|e| format!("ONNX Runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A model's sessions, one an instance.
pub(super) struct Sessions {
    sessions: Vec<Mutex<Session>>,
    next: AtomicUsize,
}

/// The sessions, and the model's inputs and outputs as clients see them.
type Loaded = (Sessions, Vec<TensorSpec>, Vec<TensorSpec>);

impl Sessions {
    /// `count` sessions of the model at `path`, its inputs and outputs
    /// checked against the config's when it declares them.
    /// The graph is `path`'s, or `rewritten` when wirespeed changed it
    /// (`zipmap.rs`).
    pub(super) fn load(
        path: &Path,
        rewritten: Option<&[u8]>,
        count: usize,
        declared_inputs: &[TensorConfig],
        declared_outputs: &[TensorConfig],
    ) -> Result<Loaded, String> {
        let environment = environment()?;
        let file = super::file_name(path);
        let mut sessions = Vec::with_capacity(count);
        for _ in 0..count.max(1) {
            let session = Session::builder(environment)
                .and_then(|b| b.with_intra_threads(1).map_err(Into::into))
                .and_then(|mut b| match rewritten {
                    Some(bytes) => b.commit_from_memory(bytes),
                    None => b.commit_from_file(path),
                })
                .map_err(|e| format!("{file}: ONNX Runtime cannot load it: {e}"))?;
            sessions.push(session);
        }
        let first = &sessions[0];
        let specs = |outlets: &[ort::value::Outlet], what: &str| {
            outlets
                .iter()
                .map(|o| spec(o.name(), o.dtype(), what))
                .collect::<Result<Vec<_>, String>>()
        };
        let inputs = specs(first.inputs(), "input")?;
        let outputs = specs(first.outputs(), "output")?;
        for (specs, declared, what) in [
            (&inputs, declared_inputs, "input"),
            (&outputs, declared_outputs, "output"),
        ] {
            for spec in specs.iter() {
                if let Some(d) = declared.iter().find(|d| d.name == spec.name) {
                    agree(what, spec, &d.to_spec()?)?;
                }
            }
            undeclared(what, declared, specs)?;
        }
        let sessions = sessions.into_iter().map(Mutex::new).collect();
        Ok((
            Sessions {
                sessions,
                next: AtomicUsize::new(0),
            },
            inputs,
            outputs,
        ))
    }

    /// Runs `inputs` (in the graph's order) on a free session.
    pub(super) fn run(
        &self,
        metadata: &ModelMetadata,
        inputs: &[&Tensor],
        outputs: &[usize],
    ) -> Result<Vec<Tensor>, Error> {
        let values = inputs
            .iter()
            .map(|t| value(t).map_err(Error::invalid_input))
            .collect::<Result<Vec<SessionInputValue<'_>>, Error>>()?;
        let mut session = self.free();
        let results = session.run(values.as_slice()).map_err(|e| {
            Error::invalid_input(format!(
                "model '{}' cannot run on these inputs: {e}",
                metadata.name
            ))
        })?;
        outputs
            .iter()
            .map(|&i| {
                let name = &metadata.outputs[i].name;
                tensor(name, &results[i]).map_err(Error::internal)
            })
            .collect()
    }

    /// A session no other request holds: the scheduler computes at most
    /// one request a session, so one is free; should it not be, the next
    /// in turn is waited for.
    fn free(&self) -> std::sync::MutexGuard<'_, Session> {
        let n = self.sessions.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            if let Ok(session) = self.sessions[(start + k) % n].try_lock() {
                return session;
            }
        }
        self.sessions[start % n]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An input or output as clients see it.
fn spec(name: &str, dtype: &ValueType, what: &str) -> Result<TensorSpec, String> {
    let ValueType::Tensor { ty, shape, .. } = dtype else {
        return Err(format!(
            "{what} '{name}' is {dtype}, not a tensor; V2 carries tensors only (a ZipMap? convert \
             without it)"
        ));
    };
    let datatype = data_type(*ty)
        .ok_or_else(|| format!("{what} '{name}' is {ty:?}, which wirespeed cannot send"))?;
    Ok(TensorSpec {
        optional: false,
        name: name.to_owned(),
        datatype,
        shape: shape.iter().map(|&d| if d < 0 { -1 } else { d }).collect(),
    })
}

/// The datatypes both sides have, once: the wire datatype, the
/// `TensorData` variant and ONNX Runtime's element type.
macro_rules! datatypes {
    ($($variant:ident => $element:ident),+ $(,)?) => {
        fn data_type(ty: TensorElementType) -> Option<DataType> {
            match ty {
                $(TensorElementType::$element => Some(DataType::$variant),)+
                TensorElementType::String => Some(DataType::Bytes),
                _ => None,
            }
        }

        /// A request tensor as an ONNX Runtime value over its data.
        fn value(tensor: &Tensor) -> Result<SessionInputValue<'_>, String> {
            let shape: Vec<i64> = tensor.shape.iter().map(|&d| d as i64).collect();
            let made = match &tensor.data {
                $(TensorData::$variant(v) => {
                    TensorRef::from_array_view((shape, v.as_slice())).map(SessionInputValue::from)
                })+
                TensorData::Bytes(v) => {
                    let text = text(&tensor.name, v)?;
                    ort::value::Tensor::from_string_array((shape, text.as_slice()))
                        .map(SessionInputValue::from)
                }
            };
            made.map_err(|e| format!("input '{}': {e}", tensor.name))
        }

        /// An ONNX Runtime result as a response tensor called `name`.
        fn tensor(name: &str, value: &DynValue) -> Result<Tensor, String> {
            let ValueType::Tensor { ty, .. } = value.dtype() else {
                return Err(format!("output '{name}' is not a tensor"));
            };
            let fail = |e: ort::Error| format!("output '{name}': {e}");
            let (shape, data) = match ty {
                $(TensorElementType::$element => {
                    let (shape, data) = value.try_extract_tensor().map_err(fail)?;
                    (shape.to_vec(), TensorData::$variant(data.to_vec()))
                })+
                TensorElementType::String => {
                    let (shape, data) = value.try_extract_strings().map_err(fail)?;
                    (shape.to_vec(), TensorData::Bytes(data.into_iter().map(String::into_bytes).collect()))
                }
                other => return Err(format!("output '{name}' came out as {other:?}")),
            };
            Ok(Tensor {
                name: name.to_owned(),
                shape: shape.iter().map(|&d| d.max(0) as usize).collect(),
                data,
                parameters: Vec::new(),
            })
        }
    };
}

datatypes! {
    Bool => Bool,
    Uint8 => Uint8,
    Uint16 => Uint16,
    Uint32 => Uint32,
    Uint64 => Uint64,
    Int8 => Int8,
    Int16 => Int16,
    Int32 => Int32,
    Int64 => Int64,
    Fp16 => Float16,
    Bf16 => Bfloat16,
    Fp32 => Float32,
    Fp64 => Float64,
}
