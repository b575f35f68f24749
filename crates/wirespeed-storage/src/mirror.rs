//! A repository in object storage, mirrored into a local folder that the
//! server reads as any repository.
//!
//! The folder is `<cache>/<url's name>/`: one folder per model, as in the
//! store, beside `.listings/` (what each was copied from) and `.incoming/`
//! (copies being made). A model's folder is fetched whole into
//! `.incoming/`, each file's length checked, then renamed into place: the
//! server never reads half a model. A restart finds the copies whose
//! listing has not changed and fetches only the rest.
//!
//! While serving, [`Mirror::refresh`] (each poll) compares the store's
//! listing with the copies'. A changed folder is fetched only once its
//! listing holds still from one poll to the next, so a version being
//! uploaded file by file is not loaded until its upload pauses for a whole
//! poll period; an object appears in a listing only once its upload is
//! complete. A store that does not answer leaves every copy as it is, and
//! is asked again after a backoff that doubles to 5 minutes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;

use crate::download::{self, Copy};
use crate::listing::{self, Folder, Listing};
use crate::location::Location;

/// Where copies go and how large a model may be.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// The cache: each repository's copy is a folder in it.
    pub cache_dir: PathBuf,
    /// A model folder larger than this (all its files) is not fetched.
    pub max_model_bytes: u64,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            cache_dir: std::env::temp_dir().join("wirespeed-models"),
            max_model_bytes: 64 << 30,
        }
    }
}

/// Why a repository in object storage cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageError {
    /// The repository's URL (without a query).
    pub url: String,
    /// What went wrong, and what to check.
    pub cause: String,
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot read the model repository {}: {}",
            self.url, self.cause
        )
    }
}

impl std::error::Error for StorageError {}

/// A repository in object storage and its local copy.
pub struct Mirror {
    location: Location,
    store: Arc<dyn ObjectStore>,
    dir: PathBuf,
    options: MirrorOptions,
    state: tokio::sync::Mutex<State>,
    failures: AtomicU64,
}

#[derive(Default)]
struct State {
    /// What each copied folder was copied from.
    copied: Listing,
    /// A change seen at the last refresh, fetched if the next one sees it
    /// again (`None`: the folder was gone).
    pending: BTreeMap<String, Option<Folder>>,
    /// Refreshes failed in a row, and when to try again.
    failing: u32,
    retry_at: Option<Instant>,
    /// Copies made, for unique names in `.incoming/`.
    made: u64,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("url", &self.location.shown())
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Mirror {
    /// The repository at `location`, copied under `options.cache_dir`.
    /// Reads what earlier copies left; asks the store nothing yet.
    pub fn open(location: Location, options: MirrorOptions) -> Result<Mirror, StorageError> {
        let error = |cause: String| StorageError {
            url: location.shown().to_owned(),
            cause,
        };
        let store = crate::stores::store(&location).map_err(error)?;
        let dir = options.cache_dir.join(location.cache_name());
        for sub in [&dir, &dir.join(".listings")] {
            std::fs::create_dir_all(sub).map_err(|e| {
                error(format!(
                    "cannot make its cache folder {}: {e} (see --model-cache-dir)",
                    sub.display()
                ))
            })?;
        }
        let _ = std::fs::remove_dir_all(dir.join(".incoming"));
        let mut copied = Listing::new();
        if let Ok(entries) = std::fs::read_dir(dir.join(".listings")) {
            for entry in entries.filter_map(Result::ok) {
                let Some(name) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                    .map(str::to_owned)
                else {
                    continue;
                };
                let folder = if name == "_root" { String::new() } else { name };
                let read = std::fs::read(entry.path()).ok();
                if let Some(listed) = read.and_then(|b| serde_json::from_slice::<Folder>(&b).ok()) {
                    copied.insert(folder, listed);
                }
            }
        }
        Ok(Mirror {
            location,
            store,
            dir,
            options,
            state: tokio::sync::Mutex::new(State {
                copied,
                ..State::default()
            }),
            failures: AtomicU64::new(0),
        })
    }

    /// The local copy: a repository folder like any other.
    pub fn local_dir(&self) -> &Path {
        &self.dir
    }

    /// The repository's URL, as the log shows it.
    pub fn url(&self) -> &str {
        self.location.shown()
    }

    /// Listings or fetches that failed since start, for `/metrics`.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn error(&self, cause: impl Into<String>) -> StorageError {
        StorageError {
            url: self.url().to_owned(),
            cause: cause.into(),
        }
    }

    /// The first copy, at start: every model folder fetched (those whose
    /// copy is current kept), folders gone from the store removed. An
    /// error if the store cannot be listed or holds nothing there; the
    /// folders that could not be fetched, with why, otherwise.
    pub async fn start(&self) -> Result<Vec<(String, String)>, StorageError> {
        let listing = listing::list(self.store.as_ref(), &self.location, None)
            .await
            .map_err(|e| {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.error(crate::fault::cause(&e))
            })?;
        if listing
            .values()
            .all(|f| f.files.is_empty() && f.refused.is_none())
        {
            return Err(self.error(format!(
                "it holds no objects{}: check the bucket and the path",
                if self.location.prefix.is_empty() {
                    String::new()
                } else {
                    format!(" under '{}/'", self.location.prefix)
                }
            )));
        }
        let mut state = self.state.lock().await;
        let mut failed = Vec::new();
        let gone: Vec<String> = state
            .copied
            .keys()
            .filter(|name| !listing.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&mut state, &name).await;
        }
        let (mut fetched, mut kept) = (0usize, 0usize);
        for (name, folder) in &listing {
            if state.copied.get(name) == Some(folder) && self.copy_exists(name) {
                kept += 1;
                continue;
            }
            match self.fetch_folder(&mut state, name, folder).await {
                Ok(()) => fetched += 1,
                Err(why) => failed.push((shown(name), why)),
            }
        }
        tracing::info!(
            repository = %self.url(),
            copy = %self.dir.display(),
            fetched,
            kept,
            failed = failed.len(),
            "copied the model repository"
        );
        Ok(failed)
    }

    /// One poll: folders whose listing changed and held still since the
    /// last poll fetched again (or removed), the others left as they are.
    /// Returns the folders that could not be fetched, and why (their last
    /// copy stays); a store that cannot be listed is logged and counted.
    pub async fn refresh(&self) -> Vec<(String, String)> {
        let mut state = self.state.lock().await;
        if state.retry_at.is_some_and(|at| Instant::now() < at) {
            return Vec::new();
        }
        let listing = match listing::list(self.store.as_ref(), &self.location, None).await {
            Ok(listing) => listing,
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                state.failing += 1;
                let wait =
                    Duration::from_secs(1 << state.failing.min(9)).min(Duration::from_secs(300));
                state.retry_at = Some(Instant::now() + wait);
                let cause = crate::fault::cause(&e);
                tracing::warn!(
                    repository = %self.url(),
                    error = %cause,
                    retry_in_secs = wait.as_secs(),
                    "cannot list the model repository; every model loaded keeps serving"
                );
                return Vec::new();
            }
        };
        if state.failing > 0 {
            tracing::info!(repository = %self.url(), "the model repository answers again");
        }
        state.failing = 0;
        state.retry_at = None;
        let mut failed = Vec::new();
        let names: std::collections::BTreeSet<String> =
            listing.keys().chain(state.copied.keys()).cloned().collect();
        for name in names {
            let now = listing.get(&name);
            if state.copied.get(&name) == now {
                state.pending.remove(&name);
                continue;
            }
            if state.pending.get(&name) != Some(&now.cloned()) {
                tracing::info!(
                    repository = %self.url(),
                    model = %shown(&name),
                    "the model's files changed in the store; fetched once they hold still until the next poll"
                );
                state.pending.insert(name, now.cloned());
                continue;
            }
            state.pending.remove(&name);
            match now {
                Some(folder) => {
                    if let Err(why) = self.fetch_folder(&mut state, &name, folder).await {
                        failed.push((shown(&name), why));
                    }
                }
                None => self.remove(&mut state, &name).await,
            }
        }
        failed
    }

    /// Fetches model folder `name` now, if the store's differs from the
    /// copy (a load asked for by a client): `Ok(false)` if the store has
    /// no such folder.
    pub async fn fetch(&self, name: &str) -> Result<bool, StorageError> {
        if listing::check_path(name).is_err() || name.contains('/') {
            return Ok(false);
        }
        let listing = listing::list(self.store.as_ref(), &self.location, Some(name))
            .await
            .map_err(|e| {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.error(crate::fault::cause(&e))
            })?;
        let Some(folder) = listing.get(name) else {
            return Ok(false);
        };
        let mut state = self.state.lock().await;
        if state.copied.get(name) == Some(folder) && self.copy_exists(name) {
            return Ok(true);
        }
        self.fetch_folder(&mut state, name, folder)
            .await
            .map_err(|why| self.error(format!("model '{name}': {why}")))?;
        Ok(true)
    }

    fn copy_exists(&self, name: &str) -> bool {
        name.is_empty() || self.dir.join(name).is_dir()
    }

    /// Fetches one folder into `.incoming/`, then puts it in place.
    async fn fetch_folder(
        &self,
        state: &mut State,
        name: &str,
        folder: &Folder,
    ) -> Result<(), String> {
        let result = self.fetch_folder_inner(state, name, folder).await;
        if let Err(why) = &result {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                repository = %self.url(),
                model = %shown(name),
                error = %why,
                "cannot fetch the model's files; its last copy stays"
            );
        }
        result
    }

    async fn fetch_folder_inner(
        &self,
        state: &mut State,
        name: &str,
        folder: &Folder,
    ) -> Result<(), String> {
        if let Some(why) = &folder.refused {
            return Err(why.clone());
        }
        if name.starts_with('.') {
            return Err("a folder whose name starts with '.' is no model's".to_owned());
        }
        let bytes = folder.bytes();
        if bytes > self.options.max_model_bytes {
            return Err(format!(
                "its files hold {bytes} bytes, more than --max-model-bytes {}",
                self.options.max_model_bytes
            ));
        }
        state.made += 1;
        let incoming =
            self.dir
                .join(".incoming")
                .join(format!("{}.{}", listed_name(name), state.made));
        let copies: Vec<Copy> = folder
            .files
            .iter()
            .map(|(path, object)| Copy {
                object: object.clone(),
                target: incoming.join(path),
            })
            .collect();
        let targets: Vec<PathBuf> = copies.iter().map(|c| c.target.clone()).collect();
        blocking(move || {
            for target in &targets {
                let parent = target.parent().unwrap_or(target);
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot write {}: {e}", parent.display()))?;
            }
            Ok(())
        })
        .await?;
        let fetched = download::fetch(&self.store, copies).await;
        let (dir, owned, listed) = (self.dir.clone(), name.to_owned(), folder.clone());
        blocking(move || {
            let placed = fetched.and_then(|()| put_in_place(&dir, &owned, &listed, &incoming));
            let _ = std::fs::remove_dir_all(&incoming);
            placed?;
            let record = serde_json::to_vec(&listed).map_err(|e| e.to_string())?;
            let path = dir
                .join(".listings")
                .join(format!("{}.json", listed_name(&owned)));
            std::fs::write(&path, record)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        })
        .await?;
        state.copied.insert(name.to_owned(), folder.clone());
        tracing::info!(repository = %self.url(), model = %shown(name), files = folder.files.len(), bytes, "fetched the model's files");
        Ok(())
    }

    /// Removes the copy of a folder gone from the store.
    async fn remove(&self, state: &mut State, name: &str) {
        let copied = state.copied.remove(name);
        let (dir, owned) = (self.dir.clone(), name.to_owned());
        let _ = blocking(move || {
            if let Some(folder) = copied {
                if owned.is_empty() {
                    for path in folder.files.keys() {
                        let _ = std::fs::remove_file(dir.join(path));
                    }
                } else {
                    let _ = std::fs::remove_dir_all(dir.join(&owned));
                }
            }
            let listed = format!("{}.json", listed_name(&owned));
            let _ = std::fs::remove_file(dir.join(".listings").join(listed));
            Ok(())
        })
        .await;
        tracing::info!(repository = %self.url(), model = %shown(name), "the model's files are gone from the store; its copy removed");
    }
}

/// Runs file-system work (making folders, renames, removing a copy of
/// gigabytes) on tokio's blocking threads: the runtime polling the store
/// also runs the models' schedulers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the copy's file work failed: {e}"))?
}

/// Puts a whole copy in place: a model folder by one rename (the old
/// copy moved aside first), root files one rename each.
fn put_in_place(dir: &Path, name: &str, folder: &Folder, incoming: &Path) -> Result<(), String> {
    let io =
        |what: &Path, e: std::io::Error| format!("cannot put {} in place: {e}", what.display());
    for (path, object) in &folder.files {
        let len = std::fs::metadata(incoming.join(path)).map(|m| m.len());
        if len.as_ref().ok() != Some(&object.size) {
            return Err(format!("'{}' was not copied whole", object.key));
        }
    }
    if name.is_empty() {
        for path in folder.files.keys() {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            std::fs::rename(incoming.join(path), &target).map_err(|e| io(&target, e))?;
        }
        return Ok(());
    }
    let target = dir.join(name);
    let aside = incoming.with_extension("old");
    if target.exists() {
        std::fs::rename(&target, &aside).map_err(|e| io(&target, e))?;
    }
    std::fs::rename(incoming, &target).map_err(|e| io(&target, e))?;
    let _ = std::fs::remove_dir_all(&aside);
    Ok(())
}

/// A folder's name in `.listings/`.
fn listed_name(name: &str) -> &str {
    if name.is_empty() {
        "_root"
    } else {
        name
    }
}

/// A folder's name in messages: the root's files are "(root)".
fn shown(name: &str) -> String {
    if name.is_empty() {
        "(root files)".to_owned()
    } else {
        name.to_owned()
    }
}
