//! The models this server serves: each loaded model together with its
//! scheduler, in one map, so the two can never disagree. A model name
//! holds one or more versions (numbered version folders, `version_policy`),
//! each with its own scheduler and statistics, as Triton's; a request
//! without a version gets the highest-numbered one. Models can join,
//! be replaced and leave while serving (those an upstream lists in
//! whole-server mode; loads, reloads and unloads of the repository API and
//! polling, `repository.rs`); a request holds its model by an `Arc`, taken
//! under a read lock.

use std::collections::BTreeMap;

use std::sync::{Arc, RwLock};
use std::time::Instant;

use wirespeed_core::{CpuPool, Error, ErrorKind, Model, ModelMetadata, RequestedOutput, Tensor};
use wirespeed_models::{
    is_valid_model_name, Composite, LoadedModel, OutputLabels, Scheduling, VersionPolicy,
};

use super::metrics::Buckets;
use crate::cache::ResponseCache;
use crate::sequences::Sequences;
use crate::statistics::ModelStats;
use crate::timing::Stages;
use wirespeed_scheduler::{Answer, CallContext, QueueThread, Scheduler, Spent};

/// The model a request names, as its protocol gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The model's name.
    pub name: &'a str,
    /// The version asked for; `None` for the served one.
    pub version: Option<&'a str>,
    /// TF Serving's version label, in place of a version.
    pub label: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// The model `name`, in `version` (the served one when `None`).
    pub fn new(name: &'a str, version: Option<&'a str>) -> Target<'a> {
        Target {
            name,
            version,
            label: None,
        }
    }
}

/// How a served model answers.
pub enum Runner {
    /// A model that computes: its scheduler queues, batches and runs it.
    Scheduled(Scheduler),
    /// A model that answers through other served models (`composite.rs`):
    /// an ensemble, a graph, an application. It has no queue of its own.
    Composite(Arc<dyn Composite>),
}

/// One served model.
pub struct ServedModel {
    /// What clients see of it; for a model that computes, what its
    /// scheduler calls.
    pub model: Arc<dyn Model>,
    /// How it answers: through its scheduler, or its composite's runner.
    pub runner: Runner,
    /// Its batching, latency objective and queue policy, as configured
    /// (a composite's: an application's `[slo]`).
    pub scheduling: Scheduling,
    /// Its requests' counts and times.
    pub stats: ModelStats,
    /// The backend that loaded it, by its registry name.
    pub backend: String,
    /// Requests computed at once.
    pub max_concurrency: usize,
    /// Requests that may wait for a turn.
    pub max_queue: usize,
    /// The labels of the outputs that have them.
    labels: Vec<OutputLabels>,
    /// The versions of its folder that are served.
    pub version_policy: VersionPolicy,
    /// TF Serving's version labels: label to version.
    version_labels: BTreeMap<String, String>,
    /// Triton's `max_batch_size` (0: no batch dimension of Triton's).
    pub max_batch_size: usize,
    /// The inputs' image layouts, as Triton names them.
    pub input_formats: Vec<(String, String)>,
    /// Triton's string parameters, from its configuration.
    pub parameters: Vec<(String, String)>,
    /// The parameters every output answers with, unless the model gave
    /// it its own (MLServer's runtimes' `content_type`).
    pub output_parameters: wirespeed_core::Parameters,
    /// Whose server its clients know (MLServer's, KServe's, Triton's).
    pub dialect: wirespeed_core::Dialect,
    /// The metadata its own server answers (MLServer's, from its settings),
    /// in place of the model's.
    pub metadata_answer: Option<serde_json::Value>,
    /// A stateful model's open sequences (`sequences.rs`).
    pub sequences: Option<Arc<Sequences>>,
    /// The response cache, and this load's id in it, when the model's
    /// answers may come from it.
    pub cache: Option<(Arc<ResponseCache>, u64)>,
    /// The request headers (HTTP's, or gRPC's metadata) the model reads,
    /// each given to it as the string parameter named beside it: an
    /// application keyed by a header (`key = "header:x-user-id"`) reads
    /// its query's key there. Every protocol with headers gives them
    /// ([`Codec::header`](crate::pipeline::Codec::header)).
    pub header_parameters: Vec<(String, String)>,
}

impl Drop for ServedModel {
    /// A model reloaded or unloaded takes its cached answers with it.
    fn drop(&mut self) {
        if let Some((cache, load)) = &self.cache {
            cache.drop_load(*load);
        }
    }
}

impl ServedModel {
    /// The model's metadata: its name, platform and tensors.
    pub fn metadata(&self) -> &ModelMetadata {
        self.model.metadata()
    }

    /// The class labels of `output`, if its config names a labels file.
    pub fn labels(&self, output: &str) -> Option<&OutputLabels> {
        self.labels.iter().find(|l| l.output == output)
    }

    /// Whether the tensor `name` is shown to clients: not a stateful
    /// model's control or state, which the server gives and takes.
    pub fn shows(&self, name: &str) -> bool {
        self.sequences.as_ref().is_none_or(|s| !s.hides(name))
    }

    /// Its scheduler, when it is a model that computes.
    pub fn scheduler(&self) -> Option<&Scheduler> {
        match &self.runner {
            Runner::Scheduled(scheduler) => Some(scheduler),
            Runner::Composite(_) => None,
        }
    }

    /// How it answers through others, when it is a composite.
    pub fn composite(&self) -> Option<&Arc<dyn Composite>> {
        match &self.runner {
            Runner::Composite(composite) => Some(composite),
            Runner::Scheduled(_) => None,
        }
    }

    /// Its composite, when it is one of kind `T` (an
    /// [`Ensemble`](wirespeed_models::Ensemble), an
    /// [`InferenceGraph`](wirespeed_models::InferenceGraph), an
    /// [`Application`](wirespeed_models::Application)): for the pages that
    /// show one kind's own state.
    pub fn composite_as<T: 'static>(&self) -> Option<&T> {
        self.composite()?.as_any().downcast_ref()
    }

    /// Answers a model that computes: from the response cache when it
    /// has one and holds the answer (Triton's cache: the same request to
    /// the same model answers again from it), else through its scheduler,
    /// whose queue and compute times go to `stages`. Every caller asks
    /// this way: a client's request, a composite's step or candidate, a
    /// model's call to another.
    pub async fn answer(
        &self,
        inputs: Vec<Tensor>,
        outputs: &[RequestedOutput],
        call: CallContext,
        stages: &mut Stages,
    ) -> Result<Answer, Error> {
        let lookup = self.cache.as_ref().map(|(cache, load)| {
            let looking = Instant::now();
            let key = cache.key(
                *load,
                &inputs,
                outputs,
                &call.parameters,
                &call.input_parameters,
            );
            let kept = cache.get(&key);
            (cache, key, kept, looking.elapsed())
        });
        if let Some((_, _, Some(kept), looked)) = &lookup {
            self.stats.cache_hit(*looked);
            // Not an inference of the model's (Triton does not count it).
            stages.inferences = 0;
            return Ok(Answer {
                outputs: kept.as_ref().clone(),
                default: false,
            });
        }
        let Some(scheduler) = self.scheduler() else {
            return Err(Error::internal(format!(
                "model '{}' answers through the models it calls, not a scheduler",
                self.metadata().name
            )));
        };
        let mut spent = Spent::default();
        // Boxed: its 1.4 KiB would otherwise be inline in every future
        // that awaits this one, up to the protocol's handler, and copied
        // at each level as each is made (7% of a small request's time
        // was such copies). Boxed in a statement of its own: a temporary
        // lives to its statement's end, and one awaited in the statement
        // that made it keeps its room in this future all the same.
        let running = Box::pin(scheduler.run(inputs, outputs, call, &mut spent));
        let answer = running.await;
        stages.scheduled(spent);
        let answer = answer?;
        if let Some((cache, key, _, looked)) = lookup {
            let inserting = Instant::now();
            if !answer.default {
                cache.insert(key, answer.outputs.clone());
            }
            self.stats.cache_miss(looked + inserting.elapsed());
        }
        Ok(answer)
    }

    /// The version a request answered by this model reports.
    pub fn version(&self) -> &str {
        &self.metadata().versions[0]
    }
}

/// The served versions of one model, in version order (by number when
/// they are numbers): never empty.
type Versions = Vec<Arc<ServedModel>>;

/// Sorts versions by number, then by text.
fn in_version_order(versions: &mut Versions) {
    versions.sort_by(|a, b| {
        let key = |m: &ServedModel| (m.version().parse::<u64>().ok(), m.version().to_owned());
        key(a).cmp(&key(b))
    });
}

/// The versions a model's metadata lists: the one asked for, or every
/// served one when none is (Triton's `versions`).
pub fn versions_named(models: &ServedModels, name: &str, version: Option<&str>) -> Vec<String> {
    match version {
        Some(v) => vec![v.to_owned()],
        None => models
            .versions(name)
            .iter()
            .map(|m| m.version().to_owned())
            // A model without versions (MLServer's unversioned) lists none.
            .filter(|v| !v.is_empty())
            .collect(),
    }
}

/// The version `asked` names among numbered versions, as Triton reads
/// a version: an integer (`01` is version 1), above 0, or Triton's error.
/// Versions that are not numbers (MLServer's `v0.1.0`) match only as
/// written.
fn numbered<'a>(
    versions: &'a [Arc<ServedModel>],
    asked: &str,
) -> Result<Option<&'a Arc<ServedModel>>, Error> {
    if !versions.iter().all(|m| m.version().parse::<i64>().is_ok()) {
        return Ok(None);
    }
    let Ok(number) = asked.parse::<i64>() else {
        return Err(Error::invalid_input(format!(
            "failed to get model version from specified version string '{asked}' (details: \
             stol), version should be an integral value > 0"
        )));
    };
    if number <= 0 {
        return Err(Error::invalid_input(format!(
            "invalid model version specified '{asked}' , version should be an integral value > 0"
        )));
    }
    Ok(versions
        .iter()
        .find(|m| m.version().parse::<i64>() == Ok(number)))
}

/// Every served model, by name.
pub struct ServedModels {
    models: RwLock<BTreeMap<String, Versions>>,
    pool: CpuPool,
    /// Where every model's queue is kept.
    queues: QueueThread,
    /// The latency histograms' bounds, when metrics are on.
    buckets: Option<Arc<Buckets>>,
    /// The response cache, when the server has one (`--cache-config`).
    cache: Option<Arc<ResponseCache>>,
}

impl ServedModels {
    /// Gives each loaded model its scheduler: `max_concurrency` defaults to
    /// what the model asks for, else the CPU pool's threads; `max_queue`
    /// to 64 batches per unit of concurrency (a batch is one request when
    /// the model does not batch).
    pub fn start(
        loaded: Vec<LoadedModel>,
        pool: &CpuPool,
        buckets: Option<Arc<Buckets>>,
        cache: Option<Arc<ResponseCache>>,
    ) -> std::io::Result<ServedModels> {
        let models = ServedModels {
            models: RwLock::new(BTreeMap::new()),
            pool: pool.clone(),
            queues: QueueThread::start()?,
            buckets,
            cache,
        };
        // Most models have one version: each list is made for one (a
        // `Vec`'s first push would make room for four loaded models, 2 KiB
        // a name).
        let mut by_name: BTreeMap<String, Vec<LoadedModel>> = BTreeMap::new();
        for loaded in loaded {
            by_name
                .entry(loaded.name.clone())
                .or_insert_with(|| Vec::with_capacity(1))
                .push(loaded);
        }
        for (name, versions) in by_name {
            models.replace(&name, versions);
        }
        Ok(models)
    }

    /// Serves `loaded` from now on, unless a model of that name is served
    /// already; says whether it was added.
    #[cfg(feature = "upstream")]
    pub fn add(&self, loaded: LoadedModel) -> bool {
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        if models.contains_key(&loaded.name) {
            return false;
        }
        let name = loaded.name.clone();
        models.insert(name, vec![self.serve(loaded, None)]);
        true
    }

    /// Serves the versions `loaded` of model `name` from now on, in place
    /// of those served, which are returned. The swap is one map insertion
    /// under the write lock: a request holds the model it found by an
    /// `Arc`, so requests in flight (queued ones too) finish on the old
    /// model and scheduler, and later ones find the new one.
    pub fn replace(&self, name: &str, loaded: Vec<LoadedModel>) -> Option<Versions> {
        if loaded.is_empty() {
            return self.remove(name);
        }
        // A stateful model loaded again with the same sequence batching
        // keeps its open sequences (Triton's update in place keeps them):
        // each version takes over its predecessor's.
        let before = self.versions(name);
        let mut versions: Versions = loaded
            .into_iter()
            .map(|l| {
                let open = before
                    .iter()
                    .find(|old| {
                        old.version()
                            == l.model
                                .metadata()
                                .versions
                                .first()
                                .map_or("", String::as_str)
                    })
                    .and_then(|old| old.sequences.clone())
                    .filter(|open| {
                        l.serving.sequencing.as_ref() == Some(open.sequencing())
                            && open.batches() == (l.max_batch_size > 0)
                    });
                self.serve(l, open)
            })
            .collect();
        in_version_order(&mut versions);
        // Collected in place, the list would keep the room of the loaded
        // models it was made from, which are larger.
        versions.shrink_to_fit();
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.insert(name.to_owned(), versions)
    }

    /// Stops serving model `name`, returning its versions; requests in
    /// flight finish.
    pub fn remove(&self, name: &str) -> Option<Versions> {
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.remove(name)
    }

    /// `loaded` with its scheduler and counters, and `open`, the
    /// sequences of the model it replaces, when it takes them over.
    fn serve(&self, loaded: LoadedModel, open: Option<Arc<Sequences>>) -> Arc<ServedModel> {
        let pool = &self.pool;
        let serving = loaded.serving;
        let concurrency = serving
            .max_concurrency
            .or(loaded.model.default_concurrency())
            .unwrap_or(pool.threads())
            .max(1);
        // A batch takes up to max_batch_size requests at a time.
        let per_turn = serving
            .scheduling
            .batching
            .as_ref()
            .map_or(1, |b| b.max_batch_size);
        let queue = serving
            .max_queue
            .unwrap_or(64usize.saturating_mul(concurrency).saturating_mul(per_turn));
        let scheduling = serving.scheduling.clone();
        let header_parameters = loaded
            .composite
            .as_ref()
            .map(|c| c.header_parameters())
            .unwrap_or_default();
        let runner = match loaded.composite {
            Some(composite) => Runner::Composite(composite),
            None => Runner::Scheduled(Scheduler::start(
                Arc::clone(&loaded.model),
                concurrency,
                queue,
                serving.scheduling,
                pool.clone(),
                &self.queues,
            )),
        };
        let sequences = match open {
            Some(open) => Some(open),
            None => serving.sequencing.map(|sequencing| {
                Sequences::new(&loaded.name, sequencing, loaded.max_batch_size > 0)
            }),
        };
        // Triton's limits: a model that streams or keeps state answers
        // each request anew.
        let cache = match (&self.cache, serving.response_cache) {
            (_, false) => None,
            (None, true) => {
                tracing::warn!(
                    model = %loaded.name,
                    "response_cache is on, and the server has no cache: give --cache-config \
                     local,size=BYTES"
                );
                None
            }
            (Some(_), true) if loaded.model.decoupled() || sequences.is_some() => {
                tracing::warn!(
                    model = %loaded.name,
                    "response_cache is on, and the model streams or keeps state: its answers \
                     are not cached"
                );
                None
            }
            (Some(cache), true) => Some((Arc::clone(cache), crate::cache::load_id())),
        };
        Arc::new(ServedModel {
            cache,
            sequences,
            model: loaded.model,
            runner,
            scheduling,
            stats: ModelStats::new(self.buckets.as_ref()),
            backend: loaded.backend,
            max_concurrency: concurrency,
            max_queue: queue,
            labels: loaded.labels,
            version_policy: loaded.version_policy,
            version_labels: loaded.version_labels,
            max_batch_size: loaded.max_batch_size,
            input_formats: loaded.input_formats,
            parameters: loaded.parameters,
            output_parameters: loaded.output_parameters,
            dialect: loaded.dialect,
            metadata_answer: loaded.metadata_answer,
            header_parameters,
        })
    }

    /// The response cache, when the server has one.
    pub fn cache(&self) -> Option<&Arc<ResponseCache>> {
        self.cache.as_ref()
    }

    /// Every served model version, in name and version order, as they
    /// are now.
    pub fn all(&self) -> Vec<(String, Arc<ServedModel>)> {
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models
            .iter()
            .flat_map(|(name, versions)| versions.iter().map(|m| (name.clone(), Arc::clone(m))))
            .collect()
    }

    /// The names of the served models, in order.
    pub fn names(&self) -> Vec<String> {
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models.keys().cloned().collect()
    }

    /// Every served version of model `name`, in version order (empty when
    /// it is not served).
    pub fn versions(&self, name: &str) -> Vec<Arc<ServedModel>> {
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models.get(name).cloned().unwrap_or_default()
    }

    /// The model `name` in `version` (any served version when `None`), or a
    /// not-found error that says which part did not match.
    pub fn get(&self, name: &str, version: Option<&str>) -> Result<Arc<ServedModel>, Error> {
        // Names come from URLs and messages; this is a map, so nothing can
        // reach a file, but a name that could never be a model folder's is
        // refused as such rather than looked up.
        if !is_valid_model_name(name) {
            let shown: String = name.chars().take(64).collect();
            return Err(Error::malformed(format!(
                "'{}' cannot be a model name: names use only letters, digits, '_', '-' and '.', and are not '.' or '..'",
                shown.escape_debug()
            )));
        }
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        let versions = models.get(name).ok_or_else(|| {
            // Triton's words, which its clients look for.
            Error::new(
                ErrorKind::ModelNotFound,
                format!("Request for unknown model: '{name}' is not found"),
            )
        })?;
        let found = match version {
            // The latest: versions are never empty.
            None => versions.last(),
            Some(v) => match versions.iter().find(|m| m.version() == v) {
                Some(found) => Some(found),
                None => numbered(versions, v)?,
            },
        };
        found.cloned().ok_or_else(|| {
            // Triton's words again.
            Error::new(
                ErrorKind::VersionNotFound,
                format!(
                    "Request for unknown model: '{name}' version {} is not found",
                    version.unwrap_or_default()
                ),
            )
        })
    }

    /// The model a request names: by version, by TF Serving's version
    /// label (its `[version_labels]`), or the latest.
    pub fn target(&self, target: &Target<'_>) -> Result<Arc<ServedModel>, Error> {
        let Some(label) = target.label else {
            return self.get(target.name, target.version);
        };
        let latest = self.get(target.name, None)?;
        let version = latest.version_labels.get(label).ok_or_else(|| {
            let known: Vec<&str> = latest.version_labels.keys().map(String::as_str).collect();
            let has = if known.is_empty() {
                "none are configured ([version_labels] in its config.toml)".to_owned()
            } else {
                format!("it has {}", known.join(", "))
            };
            Error::new(
                ErrorKind::VersionNotFound,
                format!(
                    "model '{}' has no version labelled '{label}'; {has}",
                    target.name
                ),
            )
        })?;
        self.get(target.name, Some(version))
    }
}
