//! Loading a Python model again with only its instance count changed, as
//! Triton's model update does: the pool of workers it was loaded with is
//! kept and resized (`workers.rs` `Workers::resize`) rather than started
//! afresh, when everything else the load depends on is the same. The pools
//! a backend loaded are remembered weakly, by model and version: a model
//! unloaded lets its pool go.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use super::process::Launch;
use super::workers::Workers;

/// The worker pools of the models a backend loaded, by model and version.
#[derive(Default)]
pub(crate) struct LivePools(Mutex<HashMap<(String, String), Live>>);

/// A model's worker pool as loaded, and what it was loaded with.
struct Live {
    workers: Weak<Workers>,
    /// Everything its load depended on but the instance count
    /// ([`signature`]).
    signature: String,
}

impl LivePools {
    /// The workers of model `name` (version `version`) loaded with
    /// `launch`: the live pool of its last load, resized to `instances`,
    /// when that load's signature is `signature`; else a pool started
    /// afresh (`load_fails` as `Workers::start` takes it).
    pub(crate) fn workers(
        &self,
        name: &str,
        version: &str,
        signature: String,
        launch: Launch,
        instances: usize,
        load_fails: bool,
    ) -> Result<Arc<Workers>, String> {
        let key = (name.to_owned(), version.to_owned());
        let reused = {
            let live = self.0.lock().unwrap_or_else(|e| e.into_inner());
            live.get(&key)
                .filter(|found| found.signature == signature)
                .and_then(|found| found.workers.upgrade())
        };
        let workers = match reused {
            Some(workers) => {
                tracing::info!(
                    model = %name,
                    version = %version,
                    from = workers.instances(),
                    to = instances,
                    "only the instance count changed: instances added or removed in place"
                );
                workers.resize(launch, instances)?;
                workers
            }
            None => Arc::new(Workers::start(launch, instances, load_fails)?),
        };
        let mut live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, l| l.workers.strong_count() > 0);
        live.insert(
            key,
            Live {
                workers: Arc::downgrade(&workers),
                signature,
            },
        );
        Ok(workers)
    }
}

/// What a model's workers depend on but the instance count: the load
/// message with the instance groups' counts and the poll taken out, the
/// interpreter and its environment, the batch window, the requests held,
/// the files of the model's folder (their paths, sizes and times), and
/// whether the configuration came with the load request (`given`). A load
/// whose signature is the one its model was loaded with changes the
/// instance count in place, as Triton's model update does; as in Triton
/// 2.51, the first load with a configuration of a model loaded from its
/// folder's starts it afresh.
pub(crate) fn signature(launch: &Launch, held: usize, folder: &Path, given: bool) -> String {
    let mut load = launch.load.clone();
    if let Some(load) = load.as_object_mut() {
        load.remove("linger_us");
        let config = load
            .get_mut("triton_args")
            .and_then(|args| args.get_mut("model_config"));
        if let Some(config) = config {
            let mut parsed: serde_json::Value = config
                .as_str()
                .and_then(|c| serde_json::from_str(c).ok())
                .unwrap_or_default();
            if let Some(groups) = parsed
                .get_mut("instance_group")
                .and_then(|g| g.as_array_mut())
            {
                for group in groups {
                    if let Some(group) = group.as_object_mut() {
                        group.remove("count");
                    }
                }
            }
            *config = parsed;
        }
    }
    let mut files = Vec::new();
    fingerprint(folder, 0, &mut files);
    format!(
        "{given}|{load}|{}|{:?}|{:?}|{:?}|{held}|{files:?}",
        launch.python,
        launch.env,
        launch.load_timeout,
        launch
            .batch
            .as_ref()
            .map(|b| (b.max_rows, &b.preferred, b.delay)),
    )
}

/// The files under `folder` (path, size, modification time), a few
/// levels deep.
fn fingerprint(
    folder: &Path,
    depth: usize,
    out: &mut Vec<(String, u64, Option<std::time::SystemTime>)>,
) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if meta.is_dir() {
            if depth < 4 && entry.file_name() != "__pycache__" {
                fingerprint(&entry.path(), depth + 1, out);
            }
        } else {
            out.push((
                entry.path().display().to_string(),
                meta.len(),
                meta.modified().ok(),
            ));
        }
    }
}
