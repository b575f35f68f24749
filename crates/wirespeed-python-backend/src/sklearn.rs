//! `backend = "sklearn"`: a scikit-learn model saved with joblib or pickle,
//! run by Python workers with the model's own scikit-learn and called once
//! per batch (`sklearn_runtime.py`).
//!
//! ```toml
//! backend = "sklearn"
//! model_file = "model.joblib"    # or model.pkl, model.pickle
//! # convention = "mlserver"      # outputs named as MLServer's runtime names them (the default),
//! #                              # or "kserve": one output, `output-0`, as KServe's sklearnserver
//! # predict_fn = "predict_proba" # the output a request that names none gets (MLServer's `extra.predict_fn`)
//! # predict_proba = true         # kserve: output-0 is predict_proba (KServe's PREDICT_PROBA)
//! # venv = "/opt/venvs/model"    # and the other keys of a Python model: python, instances, env, load_timeout_s
//! [batching]                     # a batch of requests is one call of the model
//! max_batch_size = 32
//! ```
//!
//! Its signature is the model's own: at load, the model's Python loads it
//! once more and calls each of its functions on one row of zeros (or one
//! empty string, for a text pipeline), which gives the input (FP64 of
//! `n_features_in_` columns, or BYTES strings) and each output's datatype
//! and width. With the `mlserver` convention the outputs are `predict`,
//! `predict_proba` and `transform`, those the model has, `[n]` answered as
//! `[n, 1]` (MLServer's numpy codec); with `kserve`, `output-0` as the
//! function gives it. A request's one input is the model's whatever its
//! name, its numbers cast to FP64
//! ([`Binding::FirstInput`](wirespeed_core::Binding)).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::{DataType, Model, TensorSpec};

use super::{interpreter, PythonKeys, PythonModel, Runtime};
use wirespeed_backend::{Backend, ModelSource};

/// The runtime, as the worker runs it and as the probe runs it.
pub(super) const RUNTIME: &str = include_str!("sklearn_runtime.py");

/// How long the probe may take to load the model and try it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(300);

/// `backend = "sklearn"`.
pub struct Sklearn;

impl Backend for Sklearn {
    fn name(&self) -> &'static str {
        "sklearn"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<std::sync::Arc<dyn Model>, String> {
        Ok(std::sync::Arc::new(load(source)?))
    }
}

/// The sklearn backend's own keys; the rest are a Python model's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SklearnKeys {
    #[serde(default)]
    convention: Option<String>,
    #[serde(default)]
    predict_fn: Option<String>,
    #[serde(default)]
    predict_proba: bool,
}

/// What the probe found.
#[derive(Debug, Deserialize)]
struct Probe {
    features: Option<i64>,
    /// `FP64` or `BYTES`: the first kind of row a function took.
    input: Option<String>,
    functions: BTreeMap<String, Answer>,
    #[serde(default)]
    errors: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    datatype: String,
    dims: Vec<i64>,
}

fn load(source: &ModelSource<'_>) -> Result<PythonModel, String> {
    // The sklearn keys come out; what stays is a Python model's.
    let mut table: toml::Table = source.keys()?;
    let mut own = toml::Table::new();
    for key in ["convention", "predict_fn", "predict_proba"] {
        if let Some(value) = table.remove(key) {
            own.insert(key.into(), value);
        }
    }
    let own: SklearnKeys = own.try_into().map_err(|e: toml::de::Error| e.to_string())?;
    if table.contains_key("api") || table.contains_key("decoupled") {
        return Err("a sklearn model takes no 'api' or 'decoupled'".into());
    }
    let mut keys: PythonKeys = table
        .try_into()
        .map_err(|e: toml::de::Error| e.to_string())?;
    let file = source.file(
        "model_file",
        keys.model_file.as_deref().unwrap_or("model.joblib"),
    )?;
    if !file.is_file() {
        return Err(format!("the model file {} is not a file", file.display()));
    }
    keys.model_file = Some(file.display().to_string());
    let python = interpreter(source.folder(), &keys)?;
    let probe = probe(&python, &keys.env, &file)?;
    let mlserver = match own.convention.as_deref() {
        None | Some("mlserver") => true,
        Some("kserve") => false,
        Some(other) => {
            return Err(format!(
                "convention '{other}' is not one: \"mlserver\" or \"kserve\""
            ))
        }
    };
    if probe.functions.is_empty() {
        let why: Vec<String> = probe
            .errors
            .iter()
            .map(|(f, e)| format!("{f}: {}", e.join("; ")))
            .collect();
        return Err(format!(
            "{} answered none of predict, predict_proba and transform on one row of zeros nor \
             on one string ({})",
            file.display(),
            why.join("; ")
        ));
    }
    let input = match probe.input.as_deref() {
        Some("BYTES") => TensorSpec {
            name: "input-0".into(),
            datatype: DataType::Bytes,
            shape: vec![-1],
            optional: false,
        },
        _ => TensorSpec {
            name: "input-0".into(),
            datatype: DataType::Fp64,
            shape: vec![-1, probe.features.unwrap_or(-1)],
            optional: false,
        },
    };
    let spec = |name: &str, answer: &Answer, column: bool| -> Result<TensorSpec, String> {
        let mut shape = vec![-1];
        shape.extend(&answer.dims);
        if column && shape.len() == 1 {
            shape.push(1);
        }
        Ok(TensorSpec {
            name: name.into(),
            datatype: answer.datatype.parse().map_err(|e| format!("{e}"))?,
            shape,
            optional: false,
        })
    };
    let mut functions = serde_json::Map::new();
    let mut outputs = Vec::new();
    if mlserver {
        // The default output first: `predict_fn`, else predict.
        let first = own.predict_fn.clone().unwrap_or_else(|| "predict".into());
        if !probe.functions.contains_key(&first) {
            return Err(format!(
                "predict_fn '{first}' is not a function the model answers ({})",
                probe
                    .functions
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let order = std::iter::once(first.as_str()).chain(
            ["predict", "predict_proba", "transform"]
                .into_iter()
                .filter(|f| *f != first),
        );
        for function in order {
            if let Some(answer) = probe.functions.get(function) {
                outputs.push(spec(function, answer, true)?);
                functions.insert(function.into(), function.into());
            }
        }
    } else {
        let function = if own.predict_proba && probe.functions.contains_key("predict_proba") {
            "predict_proba"
        } else {
            "predict"
        };
        let answer = probe
            .functions
            .get(function)
            .ok_or_else(|| format!("{} has no {function}", file.display()))?;
        outputs.push(spec("output-0", answer, false)?);
        functions.insert("output-0".into(), function.into());
    }
    if own.predict_fn.is_some() && !mlserver {
        return Err(
            "predict_fn is MLServer's; with convention \"kserve\" give predict_proba".into(),
        );
    }
    tracing::info!(
        model = %source.name(),
        input = %format!("{} {}", input.datatype, input.shape_display()),
        outputs = %outputs.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(","),
        "scikit-learn model probed"
    );
    let runtime = Runtime {
        inputs: vec![input],
        outputs,
        settings: serde_json::json!({"functions": functions, "column": mlserver}),
    };
    PythonModel::start(source, keys, Some(runtime), None)
}

/// Loads the model in its own Python once and tries its functions.
fn probe(
    python: &str,
    env: &BTreeMap<String, String>,
    file: &std::path::Path,
) -> Result<Probe, String> {
    let child = std::process::Command::new(python)
        .arg("-c")
        .arg(RUNTIME)
        .arg("probe")
        .arg(file)
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the model's Python '{python}': {e}"))?;
    let mut child = child;
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            text
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "loading {} took more than {} s",
                    file.display(),
                    PROBE_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("the probe of {}: {e}", file.display())),
        }
    };
    let output = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if !output.status.success() {
        return Err(format!(
            "{} cannot be loaded by {python}:\n{}",
            file.display(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        ));
    }
    let out = String::from_utf8_lossy(&output.stdout);
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .map_err(|e| format!("the probe of {} answered {line:?}: {e}", file.display()))
}
