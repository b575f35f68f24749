//! Triton's model repository extension (index, load, unload, on REST and
//! gRPC) and `--model-control-mode`:
//!
//! - `none`: every model in `--models` loads at start, and stays.
//! - `explicit`: the models named by `--load-model` load at start (`*` for
//!   all, none by default), and clients load and unload models through the
//!   API; a load may carry a configuration to use instead of
//!   `config.toml`, as Triton's does.
//! - `poll`: every model loads at start, and the repository is scanned every
//!   `--repository-poll-secs`: a new folder is loaded, a removed one
//!   unloaded, a folder whose files changed (size or time) loaded again.
//!
//! A load swaps the model atomically (`models.rs` `ServedModels::replace`):
//! a request holds the model it started on by an `Arc`, so requests in
//! flight finish on the old one and later ones take the new one, and none
//! fails for the swap. A load that fails leaves whatever was served
//! serving, and says why in the error, the log and the index. Loading reads
//! files and builds trees, so it runs on the CPU pool, never on an I/O
//! thread; loads and unloads take turns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use wirespeed_core::{CpuPool, Error, ErrorKind};
use wirespeed_models::{is_valid_model_name, load_model, model_folders_in, Registry};
use wirespeed_storage::Mirror;

mod load_request;

use load_request::write_files;
pub use load_request::{load_request, LoadRequest, LoadValue};

use super::composite;
use super::readiness::Readiness;
use super::served::ServedModels;
use super::timing::timed_on;

/// How models are loaded and unloaded while serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelControl {
    /// Every model at start, and no change.
    None,
    /// The models named at start (`*` for all), then as clients ask.
    Explicit {
        /// The models to load at start.
        startup: Vec<String>,
    },
    /// Every model at start, then the repository scanned this often.
    Poll(Duration),
}

impl ModelControl {
    fn name(&self) -> &'static str {
        match self {
            ModelControl::None => "none",
            ModelControl::Explicit { .. } => "explicit",
            ModelControl::Poll(_) => "poll",
        }
    }
}

/// A model of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The model's name.
    pub name: String,
    /// The version served; empty when none is.
    pub version: String,
    /// `READY`, `UNAVAILABLE`, or empty for a model never loaded.
    pub state: &'static str,
    /// Why the model is not ready; empty when it is.
    pub reason: String,
    /// Whose server its clients know: MLServer's index writes every
    /// entry's `reason`, empty ones too.
    pub dialect: wirespeed_core::Dialect,
}

/// What the repository knows of a model beyond whether it is served.
#[derive(Debug, Clone)]
struct Note {
    /// Why it is not served, or why its last load failed.
    reason: String,
    /// Poll mode: the folder's files when last loaded (or tried).
    seen: Option<Fingerprint>,
    /// The versions it served before it was unloaded, which the index
    /// still lists (as Triton and MLServer do).
    versions: Vec<String>,
    /// Whose server its clients know, when it was served.
    dialect: wirespeed_core::Dialect,
}

/// A model folder's files: path, length and modification time of each.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The model repository while serving.
pub struct Repository {
    /// The served models, which loads and unloads change.
    models: Arc<ServedModels>,
    /// Whether the server is shutting down, for the index's states.
    readiness: Arc<Readiness>,
    /// The repository's folders (Triton's `--model-repository` may be
    /// given more than once).
    dirs: Vec<PathBuf>,
    registry: Registry,
    pool: CpuPool,
    control: ModelControl,
    notes: Mutex<BTreeMap<String, Note>>,
    /// Models loaded from files sent with their load: the private folder
    /// each was written to, removed when it is no longer served.
    uploaded: Mutex<BTreeMap<String, PathBuf>>,
    /// Loads and unloads take turns.
    changing: tokio::sync::Mutex<()>,
    /// How deep a load is in loading the steps of ensembles.
    step_depth: std::sync::atomic::AtomicUsize,
    /// The repositories in object storage, whose copies are among `dirs`.
    mirrors: Vec<Arc<Mirror>>,
}

impl Repository {
    /// Where a model with no folder yet would be: the first repository.
    fn first_dir(&self) -> &Path {
        self.dirs.first().map_or(Path::new("."), PathBuf::as_path)
    }

    /// The repository over the served `models`, whose loads and unloads flip `readiness`.
    pub fn new(
        models: Arc<ServedModels>,
        readiness: Arc<Readiness>,
        dirs: &[PathBuf],
        registry: Registry,
        pool: CpuPool,
        control: ModelControl,
    ) -> Repository {
        Repository {
            models,
            readiness,
            dirs: dirs.to_vec(),
            registry,
            pool,
            control,
            notes: Mutex::new(BTreeMap::new()),
            uploaded: Mutex::new(BTreeMap::new()),
            changing: tokio::sync::Mutex::new(()),
            step_depth: std::sync::atomic::AtomicUsize::new(0),
            mirrors: Vec::new(),
        }
    }

    /// The repositories in object storage whose copies are among the
    /// folders: a poll refreshes them first, and a load asks them for the
    /// model first.
    pub fn with_mirrors(mut self, mirrors: Vec<Arc<Mirror>>) -> Repository {
        self.mirrors = mirrors;
        self
    }

    /// The repositories in object storage, for their failures on `/metrics`.
    pub fn mirrors(&self) -> &[Arc<Mirror>] {
        &self.mirrors
    }

    /// Fetches model `name` from the first repository in object storage
    /// that holds it, when its copy is not current.
    async fn fetch(&self, name: &str) -> Result<(), Error> {
        for mirror in &self.mirrors {
            match mirror.fetch(name).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.note_failure(name, e.to_string());
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("failed to load '{name}': {e}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Notes why model `name` could not be fetched: its last copy (if any)
    /// stays served, and the index says why.
    fn note_failure(&self, name: &str, reason: String) {
        let mut notes = self.notes();
        let note = notes.entry(name.to_owned()).or_insert_with(|| Note {
            reason: String::new(),
            seen: None,
            versions: Vec::new(),
            dialect: Default::default(),
        });
        note.reason = reason;
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Note>> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the files of each model loaded at start, for polling.
    pub fn loaded_at_start(&self, loaded: &[String]) {
        if !matches!(self.control, ModelControl::Poll(_)) {
            return;
        }
        let mut notes = self.notes();
        for name in loaded {
            notes.insert(
                name.clone(),
                Note {
                    reason: String::new(),
                    seen: self.folder(name).ok().map(|folder| fingerprint(&folder)),
                    versions: Vec::new(),
                    dialect: Default::default(),
                },
            );
        }
    }

    /// Notes the models that failed to load at start (Triton's
    /// `--exit-on-error=false`): the index lists each as unavailable, with
    /// why.
    pub fn failed_at_start(&self, failed: &[(String, String)]) {
        let mut notes = self.notes();
        for (name, reason) in failed {
            self.readiness.failed(name);
            notes.insert(
                name.clone(),
                Note {
                    reason: reason.clone(),
                    seen: self.folder(name).ok().map(|folder| fingerprint(&folder)),
                    versions: Vec::new(),
                    dialect: Default::default(),
                },
            );
        }
    }

    /// Every model in the repository folder and every served version, in
    /// name and version order; only those ready when `ready_only`. A model
    /// with no version served is listed once, with its name alone (never
    /// loaded) or as `UNAVAILABLE` with the reason.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let unversioned = |name: &str| IndexEntry {
            name: name.to_owned(),
            version: String::new(),
            state: "",
            reason: String::new(),
            dialect: Default::default(),
        };
        let mut models: BTreeMap<String, IndexEntry> = BTreeMap::new();
        // A repository that cannot be read lists what is served.
        for (name, _) in model_folders_in(&self.dirs).unwrap_or_default() {
            models.insert(name.clone(), unversioned(&name));
        }
        let mut unloaded = Vec::new();
        for (name, note) in self.notes().iter() {
            let entry = models
                .entry(name.clone())
                .or_insert_with(|| unversioned(name));
            if !note.reason.is_empty() {
                entry.state = "UNAVAILABLE";
                entry.reason = note.reason.clone();
            }
            entry.dialect = note.dialect;
            unloaded.push((name.clone(), note.versions.clone()));
        }
        for name in self.models.names() {
            models
                .entry(name.clone())
                .or_insert_with(|| unversioned(&name));
        }
        let mut entries = Vec::new();
        for (name, model) in models {
            let versions = self.models.versions(&name);
            if versions.is_empty() {
                // Unloaded: each version it served, unavailable.
                let before = unloaded
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_slice())
                    .unwrap_or_default();
                if before.is_empty() {
                    entries.push(model);
                    continue;
                }
                for version in before {
                    let mut entry = IndexEntry {
                        version: version.clone(),
                        ..model.clone()
                    };
                    if entry.dialect == wirespeed_core::Dialect::Mlserver {
                        // MLServer gives an unloaded model no reason.
                        entry.reason.clear();
                    }
                    entries.push(entry);
                }
                continue;
            }
            for served in versions {
                let (state, reason) = match self.readiness.model_ready(&served) {
                    // A failed reload leaves the last good load serving.
                    Ok(()) if !model.reason.is_empty() => (
                        "READY",
                        format!(
                            "serving the last good load; the latest one failed: {}",
                            model.reason
                        ),
                    ),
                    Ok(()) => ("READY", String::new()),
                    Err(reason) => ("UNAVAILABLE", reason),
                };
                entries.push(IndexEntry {
                    name: name.clone(),
                    version: served.version().to_owned(),
                    state,
                    reason,
                    dialect: served.dialect,
                });
            }
        }
        entries.retain(|e| !ready_only || e.state == "READY");
        entries
    }

    /// Refuses a load or unload the control mode does not allow.
    fn allow(&self, what: &str) -> Result<(), Error> {
        match self.control {
            ModelControl::Explicit { .. } => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "explicit model {what} is not allowed in model control mode {}: start the \
                     server with --model-control-mode explicit",
                    self.control.name()
                ),
            )),
        }
    }

    /// The folder of model `name`, which must exist.
    fn folder(&self, name: &str) -> Result<PathBuf, Error> {
        if !is_valid_model_name(name) {
            return Err(Error::malformed(format!(
                "'{}' cannot be a model name: names use only letters, digits, '_', '-' and '.'",
                name.chars().take(64).collect::<String>().escape_debug()
            )));
        }
        // A model's folder is named as it is, but MLServer's may be named
        // by their settings and lie deeper.
        let folder = model_folders_in(&self.dirs)
            .ok()
            .and_then(|folders| folders.into_iter().find(|(n, _)| n == name))
            .map_or_else(|| self.first_dir().join(name), |(_, folder)| folder);
        if !folder.is_dir() {
            return Err(Error::new(
                ErrorKind::ModelNotFound,
                // Triton's words first, which its clients look for.
                format!(
                    "failed to load '{name}': no model '{name}' in the repository: {} has no \
                     such folder",
                    self.dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" nor ")
                ),
            ));
        }
        Ok(folder)
    }

    /// Loads (or loads again) model `name`, from its `config.toml` or from
    /// the request's `config` (JSON with the same keys, or Triton's), and
    /// serves it in place of the one served, if any. With files, the model
    /// is loaded from them, written to a private folder of its own that
    /// lives as long as that load is served.
    pub async fn load(&self, name: &str, request: LoadRequest) -> Result<(), Error> {
        self.allow("load")?;
        if request.files.is_empty() {
            let _turn = self.changing.lock().await;
            if is_valid_model_name(name) {
                self.fetch(name).await?;
            }
            let folder = self.folder(name)?;
            return self.load_folder(name, folder, request.config).await;
        }
        if !is_valid_model_name(name) {
            return Err(Error::malformed(format!(
                "'{}' cannot be a model name: names use only letters, digits, '_', '-' and '.'",
                name.chars().take(64).collect::<String>().escape_debug()
            )));
        }
        let folder = write_files(name, &request.files).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("failed to load '{name}': cannot write its files: {e}"),
            )
        })?;
        let _turn = self.changing.lock().await;
        match self.load_folder(name, folder.clone(), request.config).await {
            Ok(()) => {
                let previous = self.uploaded().insert(name.to_owned(), folder);
                if let Some(previous) = previous {
                    let _ = std::fs::remove_dir_all(previous);
                }
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&folder);
                Err(e)
            }
        }
    }

    /// The folders of models loaded from files sent with their load.
    fn uploaded(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PathBuf>> {
        self.uploaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn load_folder(
        &self,
        name: &str,
        folder: PathBuf,
        config: Option<String>,
    ) -> Result<(), Error> {
        let (registry, pool, owned) = (self.registry.clone(), self.pool.clone(), name.to_owned());
        let seen_folder = folder.clone();
        let (loaded, seen) = on_pool(&self.pool, move || {
            let seen = fingerprint(&seen_folder);
            let loaded = load_model(&owned, &folder, &registry, &pool, config.as_deref());
            (loaded, seen)
        })
        .await?;
        // As Triton, an ensemble's load loads its steps' models that are
        // not served yet, from their folders; then its steps must fit the
        // models served.
        if let Ok(loaded) = &loaded {
            self.load_steps(loaded).await;
        }
        let loaded = loaded.map_err(|e| e.to_string()).and_then(|loaded| {
            for l in &loaded {
                if let Some(composite) = &l.composite {
                    composite::check_model(&self.models, name, composite.as_ref())?;
                }
            }
            Ok(loaded)
        });
        match loaded {
            Ok(loaded) => {
                let versions: Vec<String> = loaded
                    .iter()
                    .map(|m| m.model.metadata().versions.join(","))
                    .collect();
                self.models.replace(name, loaded);
                self.readiness.settled(name);
                // The index first, then the log: whoever reads the log line
                // finds the index already saying so.
                self.notes().insert(
                    name.to_owned(),
                    Note {
                        reason: String::new(),
                        seen: Some(seen),
                        versions: Vec::new(),
                        dialect: Default::default(),
                    },
                );
                tracing::info!(model = %name, versions = %versions.join(","), "serving the new load");
                Ok(())
            }
            Err(e) => {
                let reason = e.to_string();
                self.notes().insert(
                    name.to_owned(),
                    Note {
                        reason: reason.clone(),
                        seen: Some(seen),
                        versions: Vec::new(),
                        dialect: Default::default(),
                    },
                );
                tracing::error!(model = %name, error = %reason, "cannot load the model; whatever was served stays served");
                Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("failed to load '{name}': {reason}"),
                ))
            }
        }
    }

    /// Loads the models of `loaded` ensembles' steps that are not served,
    /// each from its folder (a failure is reported by the steps' check that
    /// follows). Ensembles of ensembles load theirs in turn, up to a depth
    /// that a cycle of them cannot pass.
    fn load_steps<'a>(
        &'a self,
        loaded: &'a [wirespeed_models::LoadedModel],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        use std::sync::atomic::Ordering;
        Box::pin(async move {
            if self.step_depth.fetch_add(1, Ordering::AcqRel) >= 8 {
                self.step_depth.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            for l in loaded {
                for (callee, _) in l.callees() {
                    if self.models.get(&callee, None).is_ok() {
                        continue;
                    }
                    let Ok(folder) = self.folder(&callee) else {
                        continue;
                    };
                    tracing::info!(model = %callee, caller = %l.name, "loading a model it calls");
                    let _ = self.load_folder(&callee, folder, None).await;
                }
            }
            self.step_depth.fetch_sub(1, Ordering::AcqRel);
        })
    }

    /// Stops serving model `name`; requests in flight finish.
    pub async fn unload(&self, name: &str) -> Result<(), Error> {
        self.allow("unload")?;
        let _turn = self.changing.lock().await;
        let in_repository = self.folder(name).is_ok();
        let served = self.models.versions(name);
        let versions: Vec<String> = served.iter().map(|m| m.version().to_owned()).collect();
        let dialect = served.first().map(|m| m.dialect).unwrap_or_default();
        let removed = self.models.remove(name).is_some();
        self.readiness.settled(name);
        if let Some(folder) = self.uploaded().remove(name) {
            let _ = std::fs::remove_dir_all(folder);
        }
        if !removed && !in_repository {
            return Err(Error::new(
                ErrorKind::ModelNotFound,
                format!("no model '{name}' is served or in the repository"),
            ));
        }
        tracing::info!(model = %name, "unloaded model");
        self.notes().insert(
            name.to_owned(),
            Note {
                reason: "unloaded".to_owned(),
                seen: None,
                versions,
                dialect,
            },
        );
        Ok(())
    }

    /// One scan of the repository in poll mode: new and changed folders
    /// loaded, removed ones unloaded.
    async fn poll_once(&self) {
        // The copies of repositories in object storage first: a model's
        // new files are in place, whole, before the scan sees them.
        for mirror in &self.mirrors {
            for (name, why) in mirror.refresh().await {
                self.note_failure(
                    &name,
                    format!("cannot fetch its files from {}: {why}", mirror.url()),
                );
            }
        }
        let dirs = self.dirs.clone();
        let scanned = on_pool(&self.pool, move || {
            model_folders_in(&dirs).map(|folders| {
                folders
                    .into_iter()
                    .map(|(name, folder)| {
                        let seen = fingerprint(&folder);
                        (name, folder, seen)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .await;
        let folders = match scanned {
            Ok(Ok(folders)) => folders,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot scan the model repository; serving what is loaded");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot scan the model repository");
                return;
            }
        };
        let _turn = self.changing.lock().await;
        for (name, folder, seen) in &folders {
            let known = self.notes().get(name).and_then(|n| n.seen.clone());
            if known.as_ref() == Some(seen) {
                continue;
            }
            if known.is_some() {
                tracing::info!(model = %name, "model files changed; loading again");
            }
            let _ = self.load_folder(name, folder.clone(), None).await;
        }
        let present: Vec<&str> = folders.iter().map(|(n, _, _)| n.as_str()).collect();
        for name in self.models.names() {
            if !present.contains(&name.as_str()) && self.notes().contains_key(&name) {
                self.models.remove(&name);
                self.notes().remove(&name);
                tracing::info!(model = %name, "model folder removed; unloaded");
            }
        }
        // A folder that failed to load and is gone is forgotten.
        self.notes()
            .retain(|name, _| present.contains(&name.as_str()));
    }
}

/// Runs `work` (file reads, model loads) on the CPU pool, never on an I/O
/// thread, and waits for it.
async fn on_pool<T: Send + 'static>(
    pool: &CpuPool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let mut spent = Duration::ZERO;
    timed_on(pool, true, &mut spent, move || Ok(work())).await
}

/// Polls the repository every `period` while the server lives.
pub async fn poll(repository: Weak<Repository>, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(repository) = repository.upgrade() else {
            return;
        };
        repository.poll_once().await;
    }
}

/// The files of a model folder, two levels deep (a version folder's files
/// included), in path order.
fn fingerprint(folder: &Path) -> Fingerprint {
    fn walk(dir: &Path, depth: usize, out: &mut Fingerprint) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if depth > 0 {
                    walk(&path, depth - 1, out);
                }
            } else {
                out.push((path, meta.len(), meta.modified().ok()));
            }
        }
    }
    let mut files = Vec::new();
    walk(folder, 2, &mut files);
    files.sort();
    files
}

impl Drop for Repository {
    /// The folders of loads that came with their files go with the server.
    fn drop(&mut self) {
        for folder in self.uploaded().values() {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

/// The index as Triton's REST answer: a JSON array.
pub fn index_json(entries: &[IndexEntry]) -> serde_json::Value {
    serde_json::Value::Array(
        entries
            .iter()
            .map(|e| {
                let mut entry = serde_json::json!({ "name": e.name });
                if !e.version.is_empty() {
                    entry["version"] = e.version.clone().into();
                }
                if !e.state.is_empty() {
                    entry["state"] = e.state.into();
                }
                if !e.reason.is_empty() || e.dialect == wirespeed_core::Dialect::Mlserver {
                    entry["reason"] = e.reason.clone().into();
                }
                entry
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_changes_with_a_file() {
        let dir = std::env::temp_dir().join(format!("wirespeed-fp-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::write(dir.join("config.toml"), "a").unwrap();
        let before = fingerprint(&dir);
        assert_eq!(before.len(), 1);
        std::fs::write(dir.join("1/model.json"), "{}").unwrap();
        let after = fingerprint(&dir);
        assert_eq!(after.len(), 2);
        assert_ne!(before, after);
        assert_eq!(after, fingerprint(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
