//! Whole-server mode: `--upstream URL` serves every model another server
//! lists, beside the local ones, each as an upstream model
//! (`wirespeed_models::UpstreamModel`) sharing one pool of connections.
//!
//! The list is Triton's `RepositoryIndex` (or MLServer's, which has the same
//! shape), or the names given with `--upstream-models` for servers that list
//! nothing (KServe's model server). Asking never holds up the start: until
//! the upstream first answers, the server is not ready; after that it asks
//! again every 10 s and serves the models that have appeared. A name a local
//! model already has stays the local model's.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use wirespeed_models::{is_valid_model_name, LoadedModel, UpstreamModel};
use wirespeed_upstream::{Address, Upstream, UpstreamOptions, V2Client};

use super::readiness::Readiness;
use super::served::ServedModels;

/// How often a listing upstream is asked again.
const RELIST: Duration = Duration::from_secs(10);

/// The upstream at `urls` (its replicas'), before anything is served.
pub fn upstream(urls: &[String]) -> Result<Arc<Upstream>, String> {
    let addresses = urls
        .iter()
        .map(|u| u.parse::<Address>())
        .collect::<Result<Vec<_>, _>>()?;
    Upstream::new(addresses, UpstreamOptions::default())
}

/// Starts serving the upstream's models: the named ones at once, or those
/// its index lists as soon as it answers.
pub fn start(
    models: &Arc<ServedModels>,
    readiness: &Arc<Readiness>,
    upstream: Arc<Upstream>,
    names: &[String],
) -> Result<(), String> {
    if names.is_empty() {
        readiness.wait_for_listing();
        tokio::spawn(list(
            Arc::downgrade(models),
            Arc::clone(readiness),
            upstream,
        ));
        return Ok(());
    }
    for name in names {
        if !is_valid_model_name(name) {
            return Err(format!("'{name}' in --upstream-models is not a model name"));
        }
        serve(models, name, &upstream);
    }
    Ok(())
}

/// Serves the upstream's model `name`, unless a model of that name is
/// served already.
fn serve(models: &ServedModels, name: &str, upstream: &Arc<Upstream>) {
    let model = match UpstreamModel::front(name, Arc::clone(upstream)) {
        Ok(model) => model,
        Err(e) => {
            tracing::error!(model = name, error = %e, "cannot serve the upstream's model");
            return;
        }
    };
    let added = models.add(LoadedModel {
        name: name.to_owned(),
        model,
        composite: None,
        serving: Default::default(),
        backend: "upstream".to_owned(),
        labels: Vec::new(),
        version_policy: Default::default(),
        version_labels: Default::default(),
        max_batch_size: 0,
        input_formats: Vec::new(),
        parameters: Vec::new(),
        output_parameters: Vec::new(),
        dialect: wirespeed_core::Dialect::Triton,
        metadata_answer: None,
    });
    if added {
        tracing::info!(model = name, upstream = %upstream.describe(), "serving the upstream's model");
    }
}

/// Asks the upstream for its models until it answers (with growing waits),
/// then every [`RELIST`], serving the new ones. Ends with the server.
async fn list(models: Weak<ServedModels>, readiness: Arc<Readiness>, upstream: Arc<Upstream>) {
    let client = V2Client::new(Arc::clone(&upstream));
    let mut wait = Duration::from_millis(100);
    let mut warned = false;
    let mut skipped: Vec<String> = Vec::new();
    loop {
        let answer = client
            .repository_index(Some(Instant::now() + Duration::from_secs(10)))
            .await;
        let Some(models) = models.upgrade() else {
            return;
        };
        match answer {
            Ok(Some(names)) => {
                for name in names {
                    if !is_valid_model_name(&name) {
                        if !skipped.contains(&name) {
                            tracing::warn!(model = %name.escape_debug(), "the upstream lists a name that cannot be a model's; not served");
                            skipped.push(name);
                        }
                        continue;
                    }
                    serve(&models, &name, &upstream);
                }
                if !readiness.listed() {
                    tracing::info!(upstream = %upstream.describe(), "the upstream's models are listed");
                }
                wait = RELIST;
            }
            Ok(None) => {
                if !warned {
                    tracing::error!(
                        upstream = %upstream.describe(),
                        "the upstream has no RepositoryIndex to list its models; name them with --upstream-models"
                    );
                    warned = true;
                }
                wait = RELIST;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %e, "cannot list the upstream's models yet; retrying with backoff");
                    warned = true;
                }
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
        drop(models);
        tokio::time::sleep(wait).await;
    }
}
