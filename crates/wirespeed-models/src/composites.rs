//! What the three composites (`ensemble/`, `graph/`, `application/`)
//! share: polling the calls they make together ([`join_all`], and
//! [`gather_until`] for an application's latency objective), and their
//! check against the repository before it serves ([`check_composites`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// Every composite of `loaded` checked against the others
/// ([`Composite::check`](wirespeed_backend::Composite::check); `wirespeed
/// serve --check`).
pub fn check_composites(loaded: &[crate::LoadedModel]) -> Result<(), String> {
    let lookup = |model: &str, version: Option<&str>| {
        let mut versions = loaded.iter().filter(|m| m.name == model);
        let found = match version {
            Some(v) => versions.find(|m| m.model.metadata().versions.iter().any(|x| x == v)),
            None => versions.next_back(),
        };
        found
            .map(|m| Arc::clone(&m.model))
            .ok_or_else(|| format!("model '{model}' is not in the repository"))
    };
    for l in loaded {
        if let Some(composite) = &l.composite {
            composite.check(&l.name, &lookup)?;
        }
    }
    Ok(())
}

/// The models named by `called` (name and version), each once, in order.
pub(crate) fn each_once<'a>(
    called: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Vec<(String, Option<String>)> {
    let mut models: Vec<(String, Option<String>)> = Vec::new();
    for (model, version) in called {
        if !models
            .iter()
            .any(|(m, v)| m == model && v.as_deref() == version)
        {
            models.push((model.to_owned(), version.map(str::to_owned)));
        }
    }
    models
}

/// Every future of `running`, polled together; their outputs in order.
pub(crate) async fn join_all<T>(
    running: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
) -> Vec<T> {
    gather_until(running, None)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Every future of `running`, polled together until all are done or
/// `until` passes: each one's output, or `None` for one cut there.
pub(crate) async fn gather_until<T>(
    mut running: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
    until: Option<Instant>,
) -> Vec<Option<T>> {
    let mut results: Vec<Option<T>> = running.iter().map(|_| None).collect();
    let mut cut = until.map(|at| Box::pin(tokio::time::sleep_until(at.into())));
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, result) in running.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *result = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        let passed = cut
            .as_mut()
            .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
        if pending && !passed {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results
}
