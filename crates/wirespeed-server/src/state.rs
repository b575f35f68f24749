//! The composition root's second half: each layer's handle, built from
//! the config. [`State::start`] makes the CPU pool, loads the models and
//! gives them their schedulers, and hands the serving layer's handle
//! ([`Engine`]) to the protocols' ([`Front`]); nothing below this file
//! sees more than its handle.

use std::path::Path;
use std::sync::Arc;

use prometheus::process_collector::ProcessCollector;
use wirespeed_core::CpuPool;

use crate::config::{ServerConfig, StartError};
use crate::net::counts::Connections;
use crate::protocols::auth::Auth;
use crate::protocols::metrics::Scrape;
#[cfg(feature = "proxy")]
use crate::protocols::Fallback;
use crate::protocols::{Front, MessageLimits};
use wirespeed_engine::metrics::Traffic;
use wirespeed_engine::model_control::{self, ModelControl, Repository};
use wirespeed_engine::readiness::Readiness;
use wirespeed_engine::served::ServedModels;
use wirespeed_engine::traces::Traces;
#[cfg(feature = "upstream")]
use wirespeed_engine::upstream_server;
use wirespeed_engine::Engine;
use wirespeed_models::RepositoryError;
#[cfg(feature = "proxy")]
use wirespeed_proxy::{ProxyLimits, Transcoder};

/// The running server's parts.
pub(crate) struct State {
    /// The serving layer's handle.
    pub(crate) engine: Arc<Engine>,
    /// The protocols' handle.
    pub(crate) front: Arc<Front>,
    /// The listeners' connection counts, when metrics are on.
    pub(crate) connections: Option<Arc<Connections>>,
    /// Started by [`State::begin`].
    background: Background,
}

/// What runs beside the listeners once the server is bound.
#[derive(Default)]
struct Background {
    poll: Option<std::time::Duration>,
    #[cfg(feature = "proxy")]
    transcoder: Option<Arc<Transcoder>>,
    #[cfg(feature = "upstream")]
    upstream: Option<(Arc<wirespeed_upstream::Upstream>, Vec<String>)>,
}

/// The upstream of `--upstream`, before anything is served.
#[cfg(feature = "upstream")]
fn upstream(
    config: &ServerConfig,
) -> Result<Option<Arc<wirespeed_upstream::Upstream>>, StartError> {
    config
        .upstream
        .as_ref()
        .map(|u| upstream_server::upstream(&u.urls))
        .transpose()
        .map_err(StartError::Upstream)
}

/// A build without the `upstream` feature fronts nothing.
#[cfg(not(feature = "upstream"))]
fn upstream(config: &ServerConfig) -> Result<Option<std::convert::Infallible>, StartError> {
    match config.upstream {
        Some(_) => Err(StartError::Upstream(
            "this build of wirespeed has no upstream support (built without the 'upstream' feature)"
                .to_owned(),
        )),
        None => Ok(None),
    }
}

/// The transcoder of `config.transcode`, if any.
#[cfg(feature = "proxy")]
async fn transcoder(
    config: &ServerConfig,
    limits: &MessageLimits,
) -> Result<Option<Arc<Transcoder>>, StartError> {
    if config.transcode.is_empty() {
        return Ok(None);
    }
    let limits = ProxyLimits {
        body: limits.body(),
        max_depth: config.request_limits.max_depth,
    };
    let transcoder = Transcoder::load(&config.transcode, limits)
        .await
        .map_err(StartError::Transcode)?;
    Ok(Some(Arc::new(transcoder)))
}

/// The transcoder answers what no protocol's endpoint does.
#[cfg(feature = "proxy")]
impl Fallback for Transcoder {
    fn serves(&self, method: &hyper::Method, path: &str) -> bool {
        self.routes(method, path)
    }

    fn answer(
        &self,
        request: hyper::Request<wirespeed_http::RequestBody>,
    ) -> crate::protocols::Answering<'_> {
        Box::pin(async move { Some(Transcoder::answer(self, request).await) })
    }
}

impl State {
    /// The CPU pool, the models loaded and scheduled, and every handle.
    pub(crate) async fn start(config: &ServerConfig) -> Result<State, StartError> {
        let traces = config
            .traces
            .as_ref()
            .map(Traces::start)
            .transpose()
            .map_err(StartError::Traces)?;
        let pool = CpuPool::new(config.compute_threads).map_err(|error| StartError::Threads {
            threads: config.compute_threads,
            error,
        })?;
        let upstream = upstream(config)?;
        let limits = MessageLimits {
            max_body_bytes: config.limits.max_body_bytes,
            max_grpc_message_bytes: config.limits.max_grpc_message_bytes,
            max_header_bytes: config.limits.max_header_bytes,
            body_timeout: config.limits.body_timeout,
            request_timeout: config.limits.request_timeout,
        };
        #[cfg(feature = "proxy")]
        let transcoder = transcoder(config, &limits).await?;
        #[cfg(feature = "proxy")]
        let transcoding = transcoder.is_some();
        #[cfg(not(feature = "proxy"))]
        let transcoding = false;
        // In front of an upstream, or transcoding to one, local models
        // are optional.
        let local = (upstream.is_none() && !transcoding)
            || config.repositories.iter().any(|dir| has_model_folders(dir));
        let (loaded, failed) = if local {
            load_at_start(config, &pool)?
        } else {
            (Vec::new(), Vec::new())
        };
        let traffic = config
            .metrics
            .as_ref()
            .map(|_| Arc::new(Traffic::default()));
        let buckets = config
            .metrics
            .as_ref()
            .and_then(|m| m.buckets.clone())
            .map(Arc::new);
        let names: Vec<String> = loaded.iter().map(|m| m.name.clone()).collect();
        let models = Arc::new(
            ServedModels::start(
                loaded,
                &pool,
                buckets,
                config
                    .response_cache_bytes
                    .map(|bytes| Arc::new(wirespeed_engine::cache::ResponseCache::new(bytes))),
            )
            .map_err(|error| StartError::Threads { threads: 1, error })?,
        );
        // Every ensemble's steps fit the models served.
        wirespeed_engine::composite::check_all(&models).map_err(|message| {
            StartError::Repository(RepositoryError {
                path: config.repositories.first().cloned().unwrap_or_default(),
                message,
            })
        })?;
        let readiness = Arc::new(Readiness::default());
        let repository = Arc::new(
            Repository::new(
                Arc::clone(&models),
                Arc::clone(&readiness),
                &config.repositories,
                config.backends.clone(),
                pool.clone(),
                config.model_control.clone(),
            )
            .with_mirrors(config.remotes.mirrors.clone()),
        );
        repository.loaded_at_start(&names);
        repository.failed_at_start(&failed);
        repository.failed_at_start(&config.remotes.failed);
        let engine = Arc::new(Engine::new(
            models,
            readiness,
            pool.clone(),
            wirespeed_json::DecodeOptions {
                limits: config.request_limits.clone(),
                strict: config.strict_json,
                pool: Some(pool),
                bytes_length_dimension: false,
            },
            config.limits.request_timeout,
            traces,
            traffic,
        ));
        // Models that call models (BLS) reach the server through their
        // registry, which holds the caller weakly.
        engine.calls.set_repository(&repository);
        let calls: Arc<dyn wirespeed_models::ModelCaller> = engine.calls.clone();
        config
            .backends
            .set_caller(Arc::downgrade(&calls), tokio::runtime::Handle::current());
        let connections = config
            .metrics
            .as_ref()
            .map(|_| Arc::new(Connections::default()));
        let front = Arc::new(Front {
            engine: Arc::clone(&engine),
            limits,
            auth: Auth::new(config.auth_token.clone()),
            repository,
            scrape: connections.as_ref().map(|connections| Scrape {
                connections: Arc::clone(connections),
                process: ProcessCollector::for_self(),
            }),
            tf_tensor_content: config.tf_tensor_content,
            clipper_queries: std::sync::atomic::AtomicU64::new(0),
            #[cfg(feature = "proxy")]
            fallback: transcoder.clone().map(|t| -> Arc<dyn Fallback> { t }),
            #[cfg(not(feature = "proxy"))]
            fallback: None,
            header_forward: config.header_forward.clone(),
            server_name: config.server_name.clone(),
            server_metadata: crate::protocols::v2::metadata::server_body(&config.server_name),
        });
        let poll = match config.model_control {
            ModelControl::Poll(period) => Some(period),
            _ => None,
        };
        Ok(State {
            engine,
            front,
            connections,
            background: Background {
                poll,
                #[cfg(feature = "proxy")]
                transcoder,
                #[cfg(feature = "upstream")]
                upstream: upstream.zip(config.upstream.as_ref().map(|u| u.models.clone())),
            },
        })
    }

    /// Starts what runs beside the listeners: polling the repository,
    /// asking the transcoded upstreams' reflection again, listing the
    /// upstream's models. Each ends with the server.
    pub(crate) fn begin(&mut self) -> Result<(), StartError> {
        let background = std::mem::take(&mut self.background);
        if let Some(period) = background.poll {
            let repository = Arc::downgrade(&self.front.repository);
            tokio::spawn(model_control::poll(repository, period));
        }
        #[cfg(feature = "proxy")]
        if let Some(transcoder) = &background.transcoder {
            tokio::spawn(wirespeed_proxy::reflect_again(Arc::downgrade(transcoder)));
        }
        #[cfg(feature = "upstream")]
        if let Some((upstream, names)) = background.upstream {
            let engine = &self.engine;
            upstream_server::start(&engine.models, &engine.readiness, upstream, &names)
                .map_err(StartError::Upstream)?;
        }
        Ok(())
    }
}

/// What the start loaded, and the models that failed to load (by name,
/// with why) when the start goes on without them.
type AtStart = (Vec<wirespeed_models::LoadedModel>, Vec<(String, String)>);

/// The models to serve from the start: every one in the repository, or in
/// explicit model control those named (`*` for all, and possibly none);
/// and, with `exit_on_error` off (Triton's `--exit-on-error=false`), those
/// that failed to load, by name with why, which the server starts without.
fn load_at_start(config: &ServerConfig, pool: &CpuPool) -> Result<AtStart, StartError> {
    let dirs = &config.repositories;
    let folders = wirespeed_models::model_folders_in(dirs)?;
    let startup = match &config.model_control {
        ModelControl::Explicit { startup } => startup.clone(),
        _ => vec!["*".to_owned()],
    };
    if folders.is_empty() && startup.iter().any(|n| n == "*") {
        // The repository's own words for it.
        return Ok((
            wirespeed_models::load_repository(dirs, &config.backends, pool)?,
            Vec::new(),
        ));
    }
    let all = startup.iter().any(|n| n == "*");
    for name in startup.iter().filter(|n| *n != "*") {
        if !folders.iter().any(|(folder, _)| folder == name) {
            return Err(StartError::Repository(RepositoryError {
                path: dirs.first().cloned().unwrap_or_default().join(name),
                message: format!("--load-model names '{name}', which has no folder here"),
            }));
        }
    }
    // By name: a repository of 10,000 models looked each up in a list.
    let by_name: std::collections::HashMap<&str, &Path> = folders
        .iter()
        .map(|(name, folder)| (name.as_str(), folder.as_path()))
        .collect();
    let mut loaded = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut wanted: Vec<&String> = folders
        .iter()
        .map(|(name, _)| name)
        .filter(|name| all || startup.contains(name))
        .collect();
    // As Triton: an ensemble named loads its steps' models with it (and an
    // ensemble among them, its own), each once.
    while !wanted.is_empty() {
        let mut steps = Vec::new();
        let results = load_together(&wanted, |name| {
            let folder = by_name.get(name)?;
            Some(wirespeed_models::load_model(
                name,
                folder,
                &config.backends,
                pool,
                None,
            ))
        });
        for (name, result) in wanted.into_iter().zip(results) {
            let Some(result) = result else {
                continue;
            };
            let versions = match result {
                Ok(versions) => versions,
                Err(error) if !config.exit_on_error => {
                    tracing::error!(model = %name, %error, "the model did not load; serving the others (--exit-on-error=false)");
                    failed.push((name.clone(), error.to_string()));
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            for v in &versions {
                steps.extend(v.callees().into_iter().map(|(model, _)| model));
            }
            loaded.extend(versions);
        }
        wanted = folders
            .iter()
            .map(|(name, _)| name)
            .filter(|name| {
                steps.contains(name)
                    && !loaded.iter().any(|l| &l.name == *name)
                    && !failed.iter().any(|(f, _)| f == *name)
            })
            .collect();
    }
    Ok((loaded, failed))
}

/// How many models load at once at start: Triton's
/// `--model-load-thread-count` default, at most one per core.
const LOAD_THREADS: usize = 4;

/// `load(name)` for every name, on up to [`LOAD_THREADS`] threads (this
/// one among them), the results in the names' order. A repository of
/// 10,000 tree models spent its start parsing their JSON on one thread.
/// Each thread enters the caller's tokio runtime, as a backend's load may
/// start tasks on it.
fn load_together<T: Send>(
    names: &[&String],
    load: impl Fn(&str) -> Option<T> + Sync,
) -> Vec<Option<T>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<T>>> = names.iter().map(|_| Mutex::new(None)).collect();
    let runtime = tokio::runtime::Handle::try_current().ok();
    let work = || {
        let _entered = runtime.as_ref().map(|r| r.enter());
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(name) = names.get(i) else {
                break;
            };
            let result = load(name);
            if let Ok(mut slot) = slots[i].lock() {
                *slot = result;
            }
        }
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(LOAD_THREADS)
        .min(names.len());
    std::thread::scope(|scope| {
        for _ in 1..threads {
            // A thread that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new()
                .name("wirespeed-load".into())
                .spawn_scoped(scope, work);
        }
        work();
    });
    slots
        .into_iter()
        .map(|slot| slot.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// Whether `dir` holds a folder that could be a model's.
fn has_model_folders(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
    })
}
