//! A Python model's workers as one pool: the queue every keeper takes
//! from, each instance's own queue (a sequence's requests), the instances'
//! states, and their number, which a model update changes in place, as
//! Triton changes an instance group's count: the instances added start
//! (and `initialize`) beside the others, which keep serving; those removed
//! answer what they hold, `finalize` and end. A request of a sequence stays
//! with the instance that took its first request while that instance lives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_channel::{Receiver, Sender};
use wirespeed_core::Error;

use super::keeper::{Inbox, Job, Keeper, Shared, Started, State};
use super::process::{Launch, StartError};

/// A model's workers: the queue to them, and their states.
pub(crate) struct Workers {
    jobs: Sender<Job>,
    /// The queue every keeper takes from, for the keepers added later.
    queue: Receiver<Job>,
    /// Each live instance's own queue, by instance number; dropping one
    /// ends its keeper once it has answered what it holds.
    pinned: Mutex<Vec<(usize, Sender<Job>)>>,
    /// The instance each running sequence's first request went to.
    sequences: Mutex<HashMap<u64, usize>>,
    /// The next instance number: numbers are not reused.
    next_instance: AtomicUsize,
    shared: Arc<Shared>,
    /// Whether a model whose code raises while loading fails the load.
    load_fails: bool,
    /// The model answers with streams, as its workers said when they
    /// loaded it.
    decoupled: bool,
    /// The metadata the model's own server answers, as the first worker
    /// said when it loaded it (an MLServer runtime's).
    metadata: Option<String>,
    /// A batch's rows at most, when the keepers gather batches.
    batch_rows: Option<usize>,
}

impl Workers {
    /// Starts `instances` keepers and waits until each worker has loaded
    /// the model or failed to. A worker that cannot be started at all (no
    /// such interpreter) is an error; one whose model raised while loading
    /// leaves the model not ready, the traceback in the log.
    /// With `load_fails`, a model whose code raises while loading fails
    /// the load (Triton's `initialize`); without, it stays not ready.
    pub(crate) fn start(
        launch: Launch,
        instances: usize,
        load_fails: bool,
    ) -> Result<Workers, String> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        let shared = Arc::new(Shared {
            model: launch.model.clone(),
            ready: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            instances: AtomicUsize::new(instances),
            states: Mutex::new(vec![State::Starting; instances]),
            changed: Condvar::new(),
        });
        let batch_rows = launch.batch.as_ref().map(|w| w.max_rows);
        let mut workers = Workers {
            jobs,
            queue,
            pinned: Mutex::new(Vec::new()),
            sequences: Mutex::new(HashMap::new()),
            next_instance: AtomicUsize::new(0),
            shared,
            load_fails,
            decoupled: false,
            metadata: None,
            batch_rows,
        };
        for started in workers.add(Arc::new(launch), instances)? {
            workers.decoupled |= started.decoupled;
            workers.metadata = workers.metadata.take().or(started.metadata);
        }
        Ok(workers)
    }

    /// Starts `count` more keepers with `launch`, and waits until each
    /// worker has loaded the model or failed to; what each said.
    fn add(&self, launch: Arc<Launch>, count: usize) -> Result<Vec<Started>, String> {
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        for _ in 0..count {
            let instance = self.next_instance.fetch_add(1, Ordering::AcqRel);
            let (own_tx, own) = crossbeam_channel::unbounded::<Job>();
            let keeper = Keeper {
                launch: launch.clone(),
                shared: self.shared.clone(),
                queue: Inbox {
                    own,
                    shared: self.queue.clone(),
                },
                instance,
            };
            let first = first_tx.clone();
            std::thread::Builder::new()
                .name(format!("python-{}-{instance}", launch.model))
                .spawn(move || keeper.run(first))
                .map_err(|e| format!("cannot start a keeper thread: {e}"))?;
            self.pinned_queues().push((instance, own_tx));
        }
        drop(first_tx);
        // Each keeper reports its first start; a spawn failure is the
        // config's fault (no such Python) and fails the load, and so does
        // the model's own code raising, when asked. Dropping the workers
        // stops their keepers.
        let mut started = Vec::with_capacity(count);
        for _ in 0..count {
            match first_rx.recv() {
                Ok(Err(StartError::Spawn(message))) => return Err(message),
                Ok(Err(StartError::Load(traceback))) if self.load_fails => {
                    return Err(format!("its initialize raised:\n{}", traceback.trim_end()))
                }
                Ok(Ok(one)) => started.push(one),
                Ok(_) => {}
                Err(_) => return Err("a keeper thread ended while starting".into()),
            }
        }
        Ok(started)
    }

    fn pinned_queues(&self) -> std::sync::MutexGuard<'_, Vec<(usize, Sender<Job>)>> {
        self.pinned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the number of instances to `instances`, as a model update
    /// that changes only the instance group's count does in Triton: new
    /// ones start with `launch` (their `initialize` sees the new
    /// configuration) and are waited for; the last ones added are removed
    /// (each answers what it holds, then finalizes).
    pub(crate) fn resize(&self, launch: Launch, instances: usize) -> Result<(), String> {
        let live = self.instances();
        if instances > live {
            self.add(Arc::new(launch), instances - live)?;
        } else if instances < live {
            let removed: Vec<(usize, Sender<Job>)> = {
                let mut pinned = self.pinned_queues();
                let at = pinned.len().saturating_sub(live - instances);
                pinned.split_off(at)
            };
            let gone: Vec<usize> = removed.iter().map(|(n, _)| *n).collect();
            self.sequences
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, instance| !gone.contains(instance));
            tracing::info!(
                model = %self.shared.model,
                removed = ?gone,
                "removing instances: each finalizes once it has answered its requests"
            );
            // Dropped: each keeper ends after its own queue's requests.
            drop(removed);
        }
        self.shared.instances.store(instances, Ordering::Release);
        Ok(())
    }

    pub(crate) fn instances(&self) -> usize {
        self.pinned_queues().len()
    }

    /// A batch's rows at most, when the keepers gather the requests of a
    /// batch for one call of the model (Triton's dynamic batcher).
    pub(crate) fn batch_rows(&self) -> Option<usize> {
        self.batch_rows
    }

    pub(crate) fn decoupled(&self) -> bool {
        self.decoupled
    }

    /// The metadata the model's own server answers (an MLServer
    /// runtime's), as JSON.
    pub(crate) fn metadata(&self) -> Option<&str> {
        self.metadata.as_deref()
    }

    /// Ready while one worker is.
    pub(crate) fn ready(&self) -> Result<(), String> {
        if self.shared.ready.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let states = self.shared.states.lock().unwrap_or_else(|e| e.into_inner());
        let model = &self.shared.model;
        for state in states.iter() {
            if let State::Failed(reason) = state {
                return Err(format!(
                    "model '{model}' failed to load in its Python worker: {reason} \
                     (the server log has the traceback)"
                ));
            }
        }
        for state in states.iter() {
            if let State::Restarting(reason) = state {
                return Err(format!(
                    "model '{model}' is restarting its Python worker: {reason}"
                ));
            }
        }
        Err(format!("model '{model}' is loading in its Python worker"))
    }

    /// Queues a request for the first free worker, or, `pinned` to a key
    /// (a sequence's correlation id), for the worker that took the key's
    /// first request (`ends`: the sequence's last, which lets the key go).
    pub(crate) fn submit(&self, job: Job, pinned: Option<u64>, ends: bool) -> Result<(), Error> {
        let gone = || Error::internal("the Python model's keepers are gone");
        let Some(key) = pinned else {
            return self.jobs.send(job).map_err(|_| gone());
        };
        let queue = {
            let pinned = self.pinned_queues();
            if pinned.is_empty() {
                return Err(gone());
            }
            let mut sequences = self.sequences.lock().unwrap_or_else(|e| e.into_inner());
            let instance = *sequences
                .entry(key)
                .or_insert_with(|| pinned[(key % pinned.len() as u64) as usize].0);
            if ends {
                sequences.remove(&key);
            }
            pinned
                .iter()
                .find(|(n, _)| *n == instance)
                .map(|(_, queue)| queue.clone())
                .ok_or_else(gone)?
        };
        queue.send(job).map_err(|_| gone())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}
