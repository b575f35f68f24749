//! `backend = "python"`: a model written in Python, run in worker
//! processes, each with its own interpreter, so the model's Python never
//! holds up the server's threads and several instances compute at once.
//!
//! The model is a `model.py` with either of two APIs:
//! - ours: a class `Model` with `load(self, config)` and
//!   `predict(self, inputs, parameters)`, taking and returning dicts of
//!   numpy arrays by tensor name (either method may be `async`);
//! - Triton's Python backend: `TritonPythonModel` with `initialize(args)`,
//!   `execute(requests)` and `finalize()`, through the
//!   `triton_python_backend_utils` module the worker provides
//!   (`triton_python_backend_utils.py`), its `config.pbtxt` read for the
//!   inputs and outputs (`wirespeed-models`' `pbtxt.rs`).
//!
//! ```toml
//! backend = "python"
//! model_file = "model.py"      # beside config.toml (or in the version folder)
//! instances = 4                # worker processes; 1 unless set
//! # venv = "/opt/venvs/model"  # the model's Python: that venv's bin/python
//! # python = "python3.11"      # or an interpreter by name or path
//! # load_timeout_s = 300
//! # env = { OMP_NUM_THREADS = "1" }
//! [parameters]                 # given to Model.load in config["parameters"]
//! threshold = 0.5
//! ```
//!
//! Tensors cross through shared memory both ways (`segment.rs`): the
//! decoded inputs are copied once into a segment the worker maps and reads
//! as numpy views, and the worker writes the outputs into a segment the
//! server reads them from. Only a small JSON message per request crosses
//! the worker's socket (`wire.rs`).
//!
//! Each instance has a keeper thread in the server that starts its
//! process, hands it one request at a time from the model's queue, and
//! restarts it with growing waits when it dies (`keeper.rs`); its requests
//! then fail with a 500 naming the model, and the others go on. A request
//! past its deadline interrupts the model's code (KeyboardInterrupt),
//! and a worker that does not stop is killed and replaced. An exception in
//! `load` leaves the model not ready, its traceback in the log; one in
//! Triton's `initialize` fails the load, as in Triton.

mod bls;
mod decoupled;
#[cfg(test)]
mod framing_property;
mod keeper;
mod metrics;
mod process;
mod segment;
mod sklearn;
mod update;
mod wire;
mod workers;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::{
    Binding, Error, Execution, InferCall, InferFuture, Model, ModelMetadata, ParameterValue,
    Tensor, TensorSpec,
};
use wirespeed_proto::inference as pb;

use keeper::Job;
pub use metrics::{custom_metrics, CustomFamily, Labels, MetricKind, SeriesValue};
use process::Launch;
pub use sklearn::Sklearn;
use wirespeed_backend::{Backend, ModelSource};
use workers::Workers;

/// MLServer's settings file: a custom runtime's model file.
const MODEL_SETTINGS: &str = "model-settings.json";

/// `triton_python_backend_utils`, as the worker installs it.
const TRITON_UTILS: &str = concat!(
    include_str!("triton_python_backend_utils.py"),
    "\n",
    include_str!("triton_metrics.py"),
    "\n",
    include_str!("triton_logger.py")
);

/// `backend = "python"`.
#[derive(Default)]
pub struct Python {
    /// The worker pools of the models this backend loaded, for a load of
    /// the same model that changes only its instance count.
    live: update::LivePools,
}

impl Backend for Python {
    fn takes_optional_inputs(&self) -> bool {
        true
    }

    fn sequence_flags_as_parameters(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "python"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        let keys: PythonKeys = source.keys()?;
        Ok(Arc::new(PythonModel::start(
            source,
            keys,
            None,
            Some(&self.live),
        )?))
    }
}

/// The Python backend's own keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PythonKeys {
    #[serde(default)]
    model_file: Option<String>,
    #[serde(default)]
    instances: Option<usize>,
    #[serde(default)]
    python: Option<String>,
    #[serde(default)]
    venv: Option<String>,
    #[serde(default)]
    load_timeout_s: Option<f64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    parameters: Option<toml::Table>,
    /// Triton's model configuration as JSON, when it came from a
    /// `config.pbtxt` (`wirespeed-models`' `pbtxt.rs`): `initialize`'s `args["model_config"]`.
    #[serde(default)]
    triton_model_config: Option<String>,
    /// The model answers a request with a stream of responses (Triton's
    /// `model_transaction_policy { decoupled: true }`).
    #[serde(default)]
    decoupled: bool,
    /// Whose API the model is written to: ours or Triton's (unset; told
    /// apart by its classes), `"mlserver"` (`model_file` is its
    /// `model-settings.json`, whose `implementation` names an
    /// `mlserver.MLModel`) or `"kserve"` (`model_file` defines a
    /// `kserve.Model`).
    #[serde(default)]
    api: Option<String>,
}

/// What the sklearn backend (`sklearn.rs`) starts: a scikit-learn model
/// run by the worker's own runtime.
pub(crate) struct Runtime {
    /// The model's inputs and outputs, as the backend worked them out.
    pub(crate) inputs: Vec<TensorSpec>,
    pub(crate) outputs: Vec<TensorSpec>,
    /// The worker's settings for it.
    pub(crate) settings: serde_json::Value,
}

/// A model served by Python worker processes.
pub struct PythonModel {
    metadata: ModelMetadata,
    /// Shared with the model it was loaded in place of, when only the
    /// instance count changed.
    workers: Arc<Workers>,
    binding: Binding,
    /// The batches its keepers ran, when they gather them.
    executions: Arc<wirespeed_core::Executions>,
    /// The requests each worker's keeper holds at most ([`held`]).
    held: usize,
}

/// The requests each worker's keeper holds, one computing and the next
/// ones in its queue, which it sends the moment the worker answers.
///
/// A request past them waits in the scheduler's queue, and each of those
/// costs four thread hops (to the queue's actor and back, then to the
/// keeper) on the cores the worker needs: on the 2-core machine one
/// `add_sub` worker answered 7,000 requests a second at 16 connections
/// holding two, and 11,100-12,500 holding every one
/// (`benchmarks/scripts/triton.py`). The keeper's queue is first come,
/// first served and skips a request whose caller left, as the
/// scheduler's does; so a model whose configuration asks nothing more of
/// the scheduler's queue (no bound on it, `max_queue`; no priority levels
/// or queue timeouts, `[queue]`; no latency objective, `[slo]`; no
/// batches the scheduler forms) has its keepers hold up to [`HELD`] each.
/// One that does holds two, and the rest wait where those rules apply.
fn held(config: &wirespeed_backend::ModelConfig, keeper_batches: bool) -> usize {
    let plain = config.max_queue.is_none()
        && config.queue.is_none()
        && config.slo.is_none()
        && (config.batching.is_none() || keeper_batches);
    if plain {
        HELD
    } else {
        2
    }
}

/// The requests a keeper holds when the scheduler's queue adds nothing.
const HELD: usize = 64;

impl PythonModel {
    /// Loads the model, or, when `live` holds its workers from a load that
    /// differs only in the instance count, changes their number in place.
    fn start(
        source: &ModelSource<'_>,
        keys: PythonKeys,
        runtime: Option<Runtime>,
        live: Option<&update::LivePools>,
    ) -> Result<PythonModel, String> {
        let config = source.config();
        let api: &'static str = match (keys.api.as_deref(), &runtime) {
            (_, Some(_)) => "sklearn",
            (None | Some("wirespeed" | "triton"), None) => "",
            (Some("mlserver"), None) => "mlserver",
            (Some("kserve"), None) => "kserve",
            (Some(other), None) => {
                return Err(format!(
                    "api '{other}' is not one: a Python model is written to ours or Triton's \
                     (leave api out), \"mlserver\" or \"kserve\""
                ))
            }
        };
        let binding = match api {
            "mlserver" | "kserve" => Binding::Open,
            "sklearn" => Binding::FirstInput,
            _ => Binding::Declared,
        };
        let (inputs, outputs, settings) = match runtime {
            Some(runtime) => (runtime.inputs, runtime.outputs, runtime.settings),
            None => {
                // A model may take no inputs (Triton serves one that
                // only answers); one that declares nothing at all is a
                // configuration left out.
                if binding == Binding::Declared
                    && config.inputs.is_empty()
                    && config.outputs.is_empty()
                {
                    return Err(
                        "a Python model declares its inputs and outputs in config.toml \
                         ([[inputs]] and [[outputs]]), or in Triton's config.pbtxt"
                            .into(),
                    );
                }
                (
                    wirespeed_backend::TensorConfig::specs(&config.inputs)?,
                    wirespeed_backend::TensorConfig::specs(&config.outputs)?,
                    serde_json::Value::Null,
                )
            }
        };
        let default_file = match api {
            "mlserver" => MODEL_SETTINGS,
            _ => "model.py",
        };
        let file = source.file(
            "model_file",
            keys.model_file.as_deref().unwrap_or(default_file),
        )?;
        if !file.is_file() {
            return Err(format!("the model's code {} is not a file", file.display()));
        }
        let instances = keys.instances.unwrap_or(1);
        if instances == 0 {
            return Err("instances must be at least 1".into());
        }
        let python = interpreter(source.folder(), &keys)?;
        let load_timeout = match keys.load_timeout_s {
            Some(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s.min(86_400.0)),
            Some(s) => return Err(format!("load_timeout_s must be a positive number, not {s}")),
            None => Duration::from_secs(300),
        };
        let name = source.name().to_owned();
        let version = config.version.clone();
        let tensor_json = |t: &TensorSpec| serde_json::json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape});
        let parameters = keys
            .parameters
            .as_ref()
            .map(|t| serde_json::to_value(t).unwrap_or_default())
            .unwrap_or_else(|| serde_json::json!({}));
        let triton_config = match &keys.triton_model_config {
            Some(json) => json.clone(),
            None => wirespeed_proto::model_config::to_json(&triton_config(
                &name, config, &inputs, &outputs, instances,
            )),
        };
        let folder = source.folder().display().to_string();
        // The workers read large inputs where the server decoded them.
        if let Err(e) = wirespeed_core::shared_heap::start() {
            tracing::debug!("no shared heap ({e}): every input is copied to the workers");
        }
        // The worker's poll for its next request and the keeper's, alike.
        let linger = linger_us(instances);
        let load = wire::Load {
            op: "load",
            file: file.display().to_string(),
            config: serde_json::json!({
                "name": name,
                "version": version,
                "folder": folder,
                "inputs": inputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "outputs": outputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "parameters": parameters,
            }),
            triton_args: BTreeMap::from([
                ("model_config".into(), triton_config),
                ("model_instance_kind".into(), "CPU".into()),
                ("model_instance_device_id".into(), "0".into()),
                (
                    "model_repository".into(),
                    model_repository(source.folder(), &version),
                ),
                ("model_version".into(), version.clone()),
                ("model_name".into(), name.clone()),
            ]),
            outputs: outputs.iter().map(tensor_json).collect(),
            modules: match api {
                "sklearn" => BTreeMap::from([("wirespeed_sklearn", sklearn::RUNTIME)]),
                _ => BTreeMap::from([("triton_python_backend_utils", TRITON_UTILS)]),
            },
            decoupled: keys.decoupled,
            api,
            runtime: settings,
            linger_us: linger,
            pool_limit: wire::pool_limit(),
        };
        // Triton's API fails the load when initialize raises, as Triton
        // does; ours leaves the model not ready, saying why.
        let triton_api = api.is_empty()
            && std::fs::read_to_string(&file)
                .map(|code| code.contains("class TritonPythonModel"))
                .unwrap_or(false);
        let executions = Arc::new(wirespeed_core::Executions::default());
        let launch = Launch {
            model: name.clone(),
            python,
            env: keys.env.into_iter().collect(),
            load: serde_json::to_value(&load).map_err(|e| e.to_string())?,
            load_timeout,
            outputs: outputs.clone(),
            open: binding == Binding::Open,
            // Neither Triton's Python backend nor MLServer checks an
            // output's shape against the declared one.
            shapes_as_produced: triton_api || api == "mlserver",
            executions: Arc::clone(&executions),
            linger: Duration::from_micros(linger),
            batch: match (&config.batching, triton_api) {
                (Some(batching), true) => {
                    batching
                        .dynamic_window()
                        .map(|(max_rows, preferred, delay)| process::BatchWindow {
                            max_rows: max_rows.max(1),
                            preferred,
                            delay,
                        })
                }
                _ => None,
            },
            caller: source.caller().clone(),
        };
        let held = held(config, launch.batch.is_some());
        let workers = match live {
            Some(live) => {
                let signature = update::signature(&launch, held, source.folder(), config.confined);
                live.workers(&name, &version, signature, launch, instances, triton_api)?
            }
            None => Arc::new(Workers::start(launch, instances, triton_api)?),
        };
        Ok(PythonModel {
            metadata: ModelMetadata {
                name,
                versions: vec![version],
                platform: "python".into(),
                inputs,
                outputs,
            },
            workers,
            binding,
            executions,
            held,
        })
    }
}

/// How long an idle worker polls for its next request, and a keeper at
/// light load for its worker's answer and its next request: 200 µs while
/// the model's workers leave a core free for the server (the poll then
/// costs nobody), none when they would take every core (a polling worker
/// would take it from another). Measured on the 2-core machine: one
/// worker of a custom MLServer runtime answers 31% more requests polling;
/// two slow down 19%. The keeper's poll spares two sleeps and wake-ups a
/// request at one connection: `add_sub`'s p50 under `wrk -c1`, four
/// rounds each, 154-187 µs without it and 92-173 µs with it (the
/// machine's wake-ups are that noisy).
fn linger_us(instances: usize) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if instances < cores {
        200
    } else {
        0
    }
}

/// The folder Triton gives as `args["model_repository"]`: the model's own
/// folder (the version folder's parent).
fn model_repository(files: &Path, version: &str) -> String {
    let model = match files.file_name() {
        Some(last) if last == version => files.parent().unwrap_or(files),
        _ => files,
    };
    model.display().to_string()
}

/// The model's interpreter: its venv's, the one named, `WIRESPEED_PYTHON`,
/// or `python3`.
fn interpreter(folder: &Path, keys: &PythonKeys) -> Result<String, String> {
    match (&keys.venv, &keys.python) {
        (Some(_), Some(_)) => Err("set venv or python, not both".into()),
        (Some(venv), None) => {
            let python = folder.join(venv).join("bin").join("python");
            if !python.exists() {
                return Err(format!(
                    "venv '{venv}' has no bin/python ({} does not exist)",
                    python.display()
                ));
            }
            Ok(python.display().to_string())
        }
        (None, Some(python)) if python.contains('/') => {
            Ok(folder.join(python).display().to_string())
        }
        (None, Some(python)) => Ok(python.clone()),
        (None, None) => Ok(std::env::var("WIRESPEED_PYTHON").unwrap_or_else(|_| "python3".into())),
    }
}

/// Triton's configuration of a model configured by `config.toml`, for
/// `initialize`'s `args["model_config"]`.
fn triton_config(
    name: &str,
    config: &wirespeed_backend::ModelConfig,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
    instances: usize,
) -> pb::ModelConfig {
    let max_batch_size = config.batching.as_ref().map(|b| b.max_batch_size());
    let dims = |shape: &[i64]| match max_batch_size {
        Some(_) => shape.get(1..).unwrap_or(&[]).to_vec(),
        None => shape.to_vec(),
    };
    pb::ModelConfig {
        name: name.into(),
        backend: "python".into(),
        max_batch_size: max_batch_size.unwrap_or(0) as i32,
        input: inputs
            .iter()
            .map(|t| pb::ModelInput {
                name: t.name.clone(),
                data_type: wirespeed_proto::model_config::data_type(t.datatype) as i32,
                dims: dims(&t.shape),
                ..Default::default()
            })
            .collect(),
        output: outputs
            .iter()
            .map(|t| pb::ModelOutput {
                name: t.name.clone(),
                data_type: wirespeed_proto::model_config::data_type(t.datatype) as i32,
                dims: dims(&t.shape),
                ..Default::default()
            })
            .collect(),
        instance_group: vec![pb::ModelInstanceGroup {
            // Triton's name for a group the configuration leaves unnamed.
            name: format!("{name}_0"),
            count: instances as i32,
            kind: pb::model_instance_group::Kind::Cpu as i32,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A request's parameters as the model's `predict` gets them.
fn parameters_json(
    parameters: &[(String, ParameterValue)],
) -> serde_json::Map<String, serde_json::Value> {
    parameters
        .iter()
        .map(|(name, value)| {
            let value = match value {
                ParameterValue::Bool(b) => serde_json::Value::from(*b),
                ParameterValue::Int(i) => serde_json::Value::from(*i),
                ParameterValue::Float(f) => serde_json::Value::from(*f),
                ParameterValue::String(s) => serde_json::Value::from(s.as_str()),
            };
            (name.clone(), value)
        })
        .collect()
}

impl Model for PythonModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn execution(&self, _elements: usize) -> Execution {
        Execution::Async
    }

    fn binding(&self) -> Binding {
        self.binding
    }

    /// The requests the workers' keepers hold ([`held`]). With one per
    /// worker, every request waited for the scheduler's queue to hand it
    /// over after the worker was free (a thread hop, on the worker's
    /// time): a custom MLServer runtime answered 6,753 requests a second
    /// on one worker, and 11,655 with two in hand
    /// (`benchmarks/scripts/folders.py`).
    fn instances(&self) -> Option<usize> {
        Some(self.workers.instances())
    }

    fn default_concurrency(&self) -> Option<usize> {
        // A model that gathers its batches holds a batch's requests
        // for each one it would hold.
        let rows = self.workers.batch_rows().unwrap_or(1);
        Some(self.workers.instances() * self.held * rows)
    }

    fn batches_itself(&self) -> bool {
        self.workers.batch_rows().is_some()
    }

    fn executions(&self) -> Option<&wirespeed_core::Executions> {
        self.batches_itself().then_some(&*self.executions)
    }

    fn decoupled(&self) -> bool {
        self.workers.decoupled()
    }

    fn metadata_answer(&self) -> Option<&str> {
        self.workers.metadata()
    }

    fn ready(&self) -> Result<(), String> {
        self.workers.ready()
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let mut responses = call.responses;
        // A decoupled model asked by a caller that takes one answer (a
        // warmup, a BLS call, an ensemble's step): its stream, collected.
        let collect = match (self.workers.decoupled(), &responses) {
            (true, None) => {
                let (sender, receiver) = wirespeed_core::response_channel();
                responses = Some(sender);
                Some(receiver)
            }
            _ => None,
        };
        let mut parameters = parameters_json(&call.parameters);
        if !call.input_parameters.is_empty() {
            // The inputs' own, under a key no request parameter has
            // (`wire.rs`); the worker takes it out before the model sees
            // the parameters.
            let inputs: serde_json::Map<String, serde_json::Value> = call
                .input_parameters
                .iter()
                .map(|(name, own)| {
                    (
                        name.clone(),
                        serde_json::Value::Object(parameters_json(own)),
                    )
                })
                .collect();
            parameters.insert(wire::INPUT_PARAMETERS.into(), inputs.into());
        }
        let job = Job {
            parameters,
            inputs: call.inputs,
            outputs: call.outputs,
            deadline: call.deadline,
            responses,
            reply,
        };
        // A sequence's requests go to one worker, picked by its id.
        let pinned = call.parameters.iter().find_map(|(key, value)| {
            (key == "sequence_id").then(|| {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                match value {
                    ParameterValue::Int(n) => n.hash(&mut hasher),
                    ParameterValue::String(s) => s.hash(&mut hasher),
                    other => format!("{other:?}").hash(&mut hasher),
                }
                hasher.finish()
            })
        });
        let ends = call
            .parameters
            .iter()
            .any(|(key, value)| key == "sequence_end" && *value == ParameterValue::Bool(true));
        let sent = self.workers.submit(job, pinned, ends);
        if let Some(receiver) = collect {
            let name = self.metadata.name.clone();
            return Box::pin(async move {
                sent?;
                only_response(&name, answer, receiver).await
            });
        }
        Box::pin(async move {
            sent?;
            answer.await.unwrap_or_else(|_| {
                Err(Error::internal(
                    "the Python model's keeper dropped a request",
                ))
            })
        })
    }
}

/// The one response of a decoupled model's stream, for a caller that
/// takes one answer: read while `execute` runs (a model may send before
/// it returns), an error when there are none or several.
async fn only_response(
    model: &str,
    executed: tokio::sync::oneshot::Receiver<Result<Vec<Tensor>, Error>>,
    mut receiver: wirespeed_core::ResponseReceiver,
) -> Result<Vec<Tensor>, Error> {
    let mut executed = Some(executed);
    let mut one = wirespeed_core::OneResponse::default();
    loop {
        tokio::select! {
            done = async { executed.as_mut().expect("guarded").await }, if executed.is_some() => {
                executed = None;
                done.unwrap_or_else(|_| Err(Error::internal("the Python model's keeper dropped a request")))?;
            }
            item = receiver.next() => match item {
                Some(streamed) => {
                    if !one.take(streamed.result) {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    one.finish(
        model,
        "a call that takes one answer (a warmup, an ensemble's step, a BLS call without \
         decoupled=True) expects exactly 1",
    )
}

/// Triton's auto-complete of a Python model's configuration: the model's
/// `TritonPythonModel.auto_complete_config`, when it has one, run once in
/// a process of its own on `config` (Triton's JSON of the configuration so
/// far) with the interpreter `WIRESPEED_PYTHON` names (or `python3`), the
/// completed JSON returned. Its traceback, when it raises, is the error.
pub fn auto_complete(config: &str, file: &Path) -> Result<String, String> {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};

    const SCRIPT: &str = include_str!("auto_complete.py");
    const TIMEOUT: Duration = Duration::from_secs(120);
    let python = std::env::var("WIRESPEED_PYTHON").unwrap_or_else(|_| "python3".into());
    let config: serde_json::Value =
        serde_json::from_str(config).map_err(|e| format!("the configuration: {e}"))?;
    let message = serde_json::json!({
        "utils": TRITON_UTILS,
        "file": file.display().to_string(),
        "config": config,
    });
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {python} for auto_complete_config: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let written = stdin.write_all(message.to_string().as_bytes());
    drop(stdin);
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
    });
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if started.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "auto_complete_config did not return within {}s",
                    TIMEOUT.as_secs()
                ));
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let out = out.join().ok().and_then(Result::ok).unwrap_or_default();
    let err = err.join().ok().and_then(Result::ok).unwrap_or_default();
    if !status.success() || written.is_err() {
        return Err(format!(
            "auto_complete_config of {} failed:\n{}",
            file.display(),
            err.trim_end()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod held_requests {
    use super::{held, HELD};
    use wirespeed_backend::ModelConfig;

    fn config(toml: &str) -> ModelConfig {
        ModelConfig::parse(&format!("backend = \"python\"\n{toml}")).unwrap()
    }

    /// A keeper holds every request when the scheduler's queue adds
    /// nothing, and two when the configuration asks that queue for more.
    #[test]
    fn a_keeper_holds_requests_unless_the_queue_has_rules() {
        assert_eq!(held(&config(""), false), HELD);
        assert_eq!(held(&config("max_queue = 4"), false), 2);
        assert_eq!(
            held(
                &config("[slo]\nlatency_ms = 5\ndefault_output = { y = [0.0] }"),
                false
            ),
            2
        );
        let batching = "[batching]\nmax_batch_size = 4";
        assert_eq!(held(&config(batching), false), 2);
        // A Triton model's keepers gather its batches themselves.
        assert_eq!(held(&config(batching), true), HELD);
    }
}
