//! `backend = "application"`: Clipper's model selection layer. An
//! application is served by several models (its candidates); a policy
//! chooses one of them per query, or blends all of their outputs, and
//! learns from feedback (Clipper's `POST /{app}/update`) which to prefer.
//!
//! ```toml
//! backend = "application"
//! policy = "exp4"            # exp3 | exp4 | fixed | weighted
//! candidates = ["titanic_xgb", { model = "titanic_lgbm", version = "2" }]
//! key = "uid"                # the request parameter that keys a user's own state
//! learning_rate = 0.2        # exp4's η; exp3 takes `exploration` (γ)
//! max_keys = 10000           # users with a state of their own, least recent out
//! state_file = "state.json"  # learned weights, saved and read back at load
//! [[inputs]] ...             # the application's tensors, as any model's;
//! [[outputs]] ...            # every candidate takes and gives them
//! [slo]                      # exp4: answer at the objective with who has answered
//! latency_ms = 20
//! default_output = { y = [0.0] }
//! ```
//!
//! `weighted` takes a `weight` per candidate (`{ model = "b", weight =
//! 20 }`): an A/B split or a canary, sticky by the key. `fixed` answers
//! with the first candidate. The policies are in `policy.rs`, what the
//! application asks of them in `selector.rs`; `run.rs` runs the chosen
//! candidates and learns from feedback.
//!
//! The learned state lives here, not in the candidates, so reloading a
//! candidate keeps it. With `state_file`, it is written at most once a
//! second after feedback and when the application is unloaded, and read
//! back when it loads, so a restart does not forget what was learned.

mod policy;
mod run;
mod selector;

use std::any::Any;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use wirespeed_core::{CpuPool, DataType, Error, Model, ModelMetadata, RequestedOutput, Tensor};
use wirespeed_scheduler::CallContext;

use policy::{Policy, SavedState, Selection};
use wirespeed_backend::composite::Served;
use wirespeed_backend::config::TensorConfig;
use wirespeed_backend::Run;
use wirespeed_backend::{Composed, Composite, CompositeBackend, ModelCaller, ModelSource, Slo};

use selector::{absolute_loss, numbers};
pub use selector::{Candidate, Choice, Draw, SelectionReport, Selector};

/// `backend = "application"`.
pub(crate) struct ApplicationBackend;

impl CompositeBackend for ApplicationBackend {
    fn name(&self) -> &'static str {
        "application"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Composite>, String> {
        let (metadata, selector) = ApplicationSelector::load(source)?;
        let slo = wirespeed_backend::scheduling::resolve(source.config(), &metadata)?.slo;
        Ok(Arc::new(Application {
            metadata,
            selector,
            slo,
        }))
    }
}

/// A served application: its tensors, its selector with what it learned,
/// and its latency objective.
pub struct Application {
    metadata: ModelMetadata,
    selector: ApplicationSelector,
    /// `[slo]`: an exp4 blend answers at this objective with the
    /// candidates that have answered, or with its defaults.
    slo: Option<Slo>,
}

impl Application {
    /// Its policy and the state it learned.
    pub fn selector(&self) -> &dyn Selector {
        &self.selector
    }

    /// Learns from feedback (Clipper's `POST /{app}/update`): `inputs`
    /// were answered, and `label` is the truth (one value, or one per
    /// element of the first output). The key is read from `call`'s
    /// parameters.
    pub async fn feedback(
        &self,
        inputs: Vec<Tensor>,
        label: &[f64],
        call: CallContext,
        calls: &dyn ModelCaller,
    ) -> Result<(), Error> {
        run::feedback(self, inputs, label, call, calls).await
    }
}

impl Model for Application {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }
}

impl Composite for Application {
    fn noun(&self) -> &'static str {
        "application"
    }

    fn callees(&self) -> Vec<(String, Option<String>)> {
        crate::composites::each_once(
            self.selector
                .candidates()
                .iter()
                .map(|c| (c.model.as_str(), c.version.as_deref())),
        )
    }

    fn check(&self, name: &str, served: &Served<'_>) -> Result<(), String> {
        check_candidates(name, &self.metadata, &self.selector, served)
    }

    fn run<'a>(
        &'a self,
        inputs: Vec<Tensor>,
        outputs: &'a [RequestedOutput],
        call: CallContext,
        calls: &'a dyn ModelCaller,
    ) -> Run<'a, Composed> {
        Box::pin(run::run(self, inputs, outputs, call, calls))
    }

    /// A key read from a header (`key = "header:x-user-id"`) comes as the
    /// parameter of the key's name.
    fn header_parameters(&self) -> Vec<(String, String)> {
        let key = self.selector.key();
        match key.strip_prefix("header:") {
            Some(header) => vec![(header.to_owned(), key.to_owned())],
            None => Vec::new(),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplicationKeys {
    policy: String,
    candidates: Vec<CandidateKeys>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    exploration: Option<f64>,
    #[serde(default)]
    learning_rate: Option<f64>,
    #[serde(default)]
    max_keys: Option<usize>,
    #[serde(default)]
    state_file: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CandidateKeys {
    Name(String),
    Table(CandidateTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateTable {
    model: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    weight: Option<f64>,
}

/// The request parameter that keys a query's state, unless `key` says.
const DEFAULT_KEY: &str = "uid";
/// Keys with a state of their own, unless `max_keys` says.
const DEFAULT_MAX_KEYS: usize = 10_000;
/// Exp3's γ and Exp4's η unless set.
const DEFAULT_EXPLORATION: f64 = 0.1;
const DEFAULT_LEARNING_RATE: f64 = 0.2;
/// The state file is written at most this often while feedback comes.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// An application's selector: its policy with the learned state, and
/// where that state is saved.
pub(crate) struct ApplicationSelector {
    /// The application's name.
    name: String,
    selection: Selection,
    key: String,
    state_file: Option<PathBuf>,
    saved: Mutex<Option<Instant>>,
    /// Where the periodic writes run.
    pool: CpuPool,
    /// Held while the file is written, so writes never overlap: the
    /// feedback count of the state last written.
    writer: Arc<Mutex<u64>>,
}

impl ApplicationSelector {
    /// The application's tensors, and its selector.
    fn load(source: &ModelSource<'_>) -> Result<(ModelMetadata, ApplicationSelector), String> {
        let keys: ApplicationKeys = source.keys()?;
        let config = source.config();
        if config.inputs.is_empty() || config.outputs.is_empty() {
            return Err(
                "an application declares its [[inputs]] and [[outputs]], which every \
                        candidate takes and gives"
                    .into(),
            );
        }
        if !config.warmup.is_empty() {
            return Err("an application is not warmed up itself; warm up its candidates".into());
        }
        let inputs = TensorConfig::specs(&config.inputs)?;
        let outputs = TensorConfig::specs(&config.outputs)?;
        if keys.candidates.is_empty() {
            return Err("'candidates' names no model; an application needs at least one".into());
        }
        let mut candidates = Vec::with_capacity(keys.candidates.len());
        let mut weights = Vec::with_capacity(keys.candidates.len());
        for c in keys.candidates {
            let (model, version, weight) = match c {
                CandidateKeys::Name(model) => (model, None, None),
                CandidateKeys::Table(t) => (t.model, t.version, t.weight),
            };
            if model == source.name() {
                return Err(format!(
                    "candidate '{model}' is the application itself; name the models that answer"
                ));
            }
            candidates.push(Candidate { model, version });
            weights.push(weight);
        }
        let policy = match keys.policy.as_str() {
            "exp3" => {
                let gamma = keys.exploration.unwrap_or(DEFAULT_EXPLORATION);
                if !(gamma > 0.0 && gamma <= 1.0) {
                    return Err(format!("'exploration' is {gamma}; exp3's γ is in (0, 1]"));
                }
                Policy::Exp3 { gamma }
            }
            "exp4" => {
                let eta = keys.learning_rate.unwrap_or(DEFAULT_LEARNING_RATE);
                if !(eta > 0.0 && eta.is_finite()) {
                    return Err(format!("'learning_rate' is {eta}; exp4's η is above 0"));
                }
                for o in &outputs {
                    if !matches!(
                        o.datatype,
                        DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64
                    ) {
                        return Err(format!(
                            "output '{}' is {}: exp4 averages its candidates' outputs, which \
                             must be floating point",
                            o.name, o.datatype
                        ));
                    }
                }
                Policy::Exp4 { eta }
            }
            "fixed" => Policy::Fixed,
            "weighted" => {
                let shares: Vec<f64> = weights
                    .iter()
                    .zip(&candidates)
                    .map(|(w, c)| match w {
                        Some(w) if *w >= 0.0 && w.is_finite() => Ok(*w),
                        Some(w) => Err(format!(
                            "candidate '{c}' has weight {w}; weights are 0 or more"
                        )),
                        None => Err(format!(
                            "candidate '{c}' has no weight; a weighted policy gives each \
                             candidate one ({{ model = \"{}\", weight = 20 }})",
                            c.model
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                let total: f64 = shares.iter().sum();
                if total <= 0.0 {
                    return Err("the candidates' weights add up to 0".into());
                }
                Policy::Weighted {
                    shares: shares.iter().map(|s| s / total).collect(),
                }
            }
            other => {
                return Err(format!(
                    "unknown policy '{other}': choose exp3, exp4, fixed or weighted"
                ))
            }
        };
        if !matches!(policy, Policy::Weighted { .. }) && weights.iter().any(Option::is_some) {
            return Err(format!(
                "candidates have weights, which only the weighted policy takes (this one is \
                 '{}')",
                policy.name()
            ));
        }
        if keys.exploration.is_some() && !matches!(policy, Policy::Exp3 { .. }) {
            return Err("'exploration' is exp3's; this policy does not take it".into());
        }
        if keys.learning_rate.is_some() && !matches!(policy, Policy::Exp4 { .. }) {
            return Err("'learning_rate' is exp4's; this policy does not take it".into());
        }
        let max_keys = NonZeroUsize::new(keys.max_keys.unwrap_or(DEFAULT_MAX_KEYS))
            .ok_or("'max_keys' is 0; keep at least one user's state")?;
        let selection = Selection::new(candidates, policy, max_keys, keys.seed);
        let state_file = keys
            .state_file
            .map(|f| source.file("state_file", &f))
            .transpose()?;
        if let Some(path) = &state_file {
            restore(&selection, path, source.name());
        }
        tracing::info!(
            model = %source.name(),
            policy = selection.policy().name(),
            candidates = %selection
                .candidates()
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            "loaded application"
        );
        let metadata = ModelMetadata {
            name: source.name().to_owned(),
            versions: vec![config.version.clone()],
            platform: "application".to_owned(),
            inputs,
            outputs,
        };
        let selector = ApplicationSelector {
            name: source.name().to_owned(),
            selection,
            key: key_parameter(keys.key)?,
            state_file,
            saved: Mutex::new(None),
            pool: source.pool().clone(),
            writer: Arc::new(Mutex::new(0)),
        };
        Ok((metadata, selector))
    }

    /// Writes the state file now (at unload), after any write under way.
    fn save(&self) {
        if let Some(path) = &self.state_file {
            let mut written = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            write_state(path, &self.selection.save(), &self.name, &mut written);
        }
    }
}

/// Writes `saved` to `path` through a temporary file renamed over it, so
/// a crash leaves the old one whole; unless a state learned from more
/// feedback was `written` already (a periodic write that comes late).
fn write_state(path: &std::path::Path, saved: &SavedState, name: &str, written: &mut u64) {
    if saved.feedback < *written {
        return;
    }
    *written = saved.feedback;
    let text = match serde_json::to_vec(saved) {
        Ok(text) => text,
        Err(e) => {
            tracing::error!(model = %name, error = %e, "cannot write the selection state");
            return;
        }
    };
    let mut temporary = path.to_owned().into_os_string();
    temporary.push(".tmp");
    let written = std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, path));
    if let Err(e) = written {
        tracing::error!(
            model = %name,
            file = %path.display(),
            error = %e,
            "cannot save the selection state"
        );
    }
}

/// The request parameter that keys a query (`uid` unless set); a header's
/// (`header:x-user-id`), by its name in lower case as HTTP/2 and gRPC
/// write it.
fn key_parameter(key: Option<String>) -> Result<String, String> {
    let Some(key) = key else {
        return Ok(DEFAULT_KEY.to_owned());
    };
    match key.strip_prefix("header:") {
        Some(header) if header.is_empty() || !header.bytes().all(|b| b.is_ascii_graphic()) => Err(
            format!("'key' names header '{header}', which is no header name"),
        ),
        Some(header) => Ok(format!("header:{}", header.to_ascii_lowercase())),
        None if key.is_empty() => Err("'key' is empty; name a request parameter (uid) or a \
                                      header (header:x-user-id)"
            .into()),
        None => Ok(key),
    }
}

/// Reads a saved state into `selection`, or logs why it starts afresh.
fn restore(selection: &Selection, path: &std::path::Path, name: &str) {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(model = %name, file = %path.display(), error = %e, "cannot read the selection state; starting afresh");
            return;
        }
    };
    let restored = serde_json::from_slice::<SavedState>(&text)
        .map_err(|e| e.to_string())
        .and_then(|saved| selection.restore(saved));
    match restored {
        Ok(()) => {
            tracing::info!(model = %name, file = %path.display(), "restored the selection state")
        }
        Err(e) => {
            tracing::warn!(model = %name, file = %path.display(), error = %e, "the saved selection state does not fit; starting afresh")
        }
    }
}

impl Drop for ApplicationSelector {
    fn drop(&mut self) {
        self.save();
    }
}

impl Selector for ApplicationSelector {
    fn candidates(&self) -> &[Candidate] {
        self.selection.candidates()
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn choose(&self, key: Option<&str>) -> Choice {
        self.selection.choose(key)
    }

    fn to_score(&self, key: Option<&str>) -> Vec<Draw> {
        self.selection.to_score(key)
    }

    fn learn(&self, key: Option<&str>, scored: &[(Draw, f64)]) {
        self.selection.learn(key, scored);
        let Some(path) = &self.state_file else {
            return;
        };
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        if saved.is_none_or(|at| at.elapsed() >= SAVE_EVERY) {
            *saved = Some(Instant::now());
            drop(saved);
            // Feedback comes on an I/O thread: the state is copied here,
            // and written on the CPU pool.
            let snapshot = self.selection.save();
            let (path, name, writer) = (path.clone(), self.name.clone(), Arc::clone(&self.writer));
            self.pool.spawn(move || {
                let mut written = writer.lock().unwrap_or_else(|e| e.into_inner());
                write_state(&path, &snapshot, &name, &mut written);
            });
        }
    }

    fn straggled(&self, candidate: usize) {
        self.selection.straggled(candidate);
    }

    fn report(&self) -> SelectionReport {
        self.selection.report()
    }
}

/// Whether every candidate of `selector` (the application `name`, of
/// `metadata`) fits the model it names, as `lookup` finds it by name and
/// version: it is served, takes each of the application's inputs and gives
/// each of its outputs, with the same datatypes. The first misfit, named.
fn check_candidates(
    name: &str,
    metadata: &ModelMetadata,
    selector: &dyn Selector,
    lookup: &Served<'_>,
) -> Result<(), String> {
    for candidate in selector.candidates() {
        let at = |what: String| format!("application '{name}' candidate '{candidate}': {what}");
        let model = lookup(&candidate.model, candidate.version.as_deref()).map_err(|e| {
            at(format!(
                "{e} (an application's candidates are served models)"
            ))
        })?;
        let theirs = model.metadata();
        for (own, their, kind) in [
            (&metadata.inputs, &theirs.inputs, "input"),
            (&metadata.outputs, &theirs.outputs, "output"),
        ] {
            for spec in own {
                match their.iter().find(|s| s.name == spec.name) {
                    None => {
                        return Err(at(format!(
                            "the model has no {kind} '{}' (it has {})",
                            spec.name,
                            their
                                .iter()
                                .map(|s| format!("'{}'", s.name))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )))
                    }
                    Some(s) if s.datatype != spec.datatype => {
                        return Err(at(format!(
                            "its {kind} '{}' is {} and the application's is {}",
                            spec.name, s.datatype, spec.datatype
                        )))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(())
}
