//! Triton's response cache: the outputs of a request a model answered,
//! kept under a hash of the request, so that the same request to the same
//! model answers again without running it.
//!
//! One cache serves every model that turns it on (`response_cache = true`,
//! Triton's `response_cache { enable: true }`), bounded in bytes
//! (`--cache-config local,size=N`, Triton's flag), the least recently used
//! entries out first (the `lru` crate keeps the order; the byte count is
//! ours). A request's key is a 128-bit hash, two independently keyed
//! SipHashes (Triton's is one 64-bit hash), of what decides its answer: the
//! model as loaded (each load has an id of its own, so a reload is never
//! answered from the model it replaced, and its entries are dropped with
//! it), the inputs' names, datatypes, shapes and bytes, the outputs asked
//! for and the parameters the model sees. Only successes are kept, and only
//! requests whose tensors are all in the request (none in shared memory),
//! to a model that answers once and keeps no state (not decoupled, not a
//! sequence), as Triton's cache does.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wirespeed_core::{ParameterValue, Parameters, RequestedOutput, Tensor, TensorData};

/// A cached answer's key: the model as loaded, and the request's hash.
type Key = (u64, u128);

/// A cached answer.
struct Entry {
    outputs: Arc<Vec<Tensor>>,
    bytes: usize,
}

/// The cache of every model that has one.
pub struct ResponseCache {
    /// At most this many bytes of outputs (and their keys) are kept.
    budget: usize,
    entries: Mutex<Entries>,
    seeds: (std::hash::RandomState, std::hash::RandomState),
}

struct Entries {
    map: lru::LruCache<Key, Entry>,
    bytes: usize,
}

/// Each model load's id: its entries' first key.
static LOADS: AtomicU64 = AtomicU64::new(1);

/// A new load's id.
pub fn load_id() -> u64 {
    LOADS.fetch_add(1, Ordering::Relaxed)
}

/// What an entry costs beyond its tensors' bytes: its key, its place in
/// the map, each tensor's name and shape.
const ENTRY_OVERHEAD: usize = 96;

impl ResponseCache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> ResponseCache {
        ResponseCache {
            budget,
            entries: Mutex::new(Entries {
                map: lru::LruCache::unbounded(),
                bytes: 0,
            }),
            seeds: (std::hash::RandomState::new(), std::hash::RandomState::new()),
        }
    }

    /// The key of a request to the model loaded as `load`.
    pub fn key(
        &self,
        load: u64,
        inputs: &[Tensor],
        outputs: &[RequestedOutput],
        parameters: &Parameters,
        input_parameters: &[(String, Parameters)],
    ) -> (u64, u128) {
        let half = |seed: &std::hash::RandomState| {
            let mut h = seed.build_hasher();
            inputs.len().hash(&mut h);
            for t in inputs {
                hash_tensor(t, &mut h);
            }
            outputs.len().hash(&mut h);
            for o in outputs {
                o.name.hash(&mut h);
                hash_parameters(&o.parameters, &mut h);
            }
            hash_parameters(parameters, &mut h);
            input_parameters.len().hash(&mut h);
            for (name, own) in input_parameters {
                name.hash(&mut h);
                hash_parameters(own, &mut h);
            }
            h.finish()
        };
        let hash = u128::from(half(&self.seeds.0)) << 64 | u128::from(half(&self.seeds.1));
        (load, hash)
    }

    /// The answer kept under `key`, now the most recently used.
    pub fn get(&self, key: &Key) -> Option<Arc<Vec<Tensor>>> {
        let mut entries = self.lock();
        entries.map.get(key).map(|e| Arc::clone(&e.outputs))
    }

    /// Keeps `outputs` under `key`, dropping the least recently used
    /// answers until they fit; an answer larger than the whole budget is
    /// not kept.
    pub fn insert(&self, key: Key, outputs: Vec<Tensor>) {
        let bytes = outputs.iter().map(tensor_bytes).sum::<usize>() + ENTRY_OVERHEAD;
        if bytes > self.budget {
            return;
        }
        let mut entries = self.lock();
        if let Some(old) = entries.map.pop(&key) {
            entries.bytes -= old.bytes;
        }
        while entries.bytes + bytes > self.budget {
            match entries.map.pop_lru() {
                Some((_, old)) => entries.bytes -= old.bytes,
                None => break,
            }
        }
        entries.bytes += bytes;
        entries.map.put(
            key,
            Entry {
                outputs: Arc::new(outputs),
                bytes,
            },
        );
    }

    /// Drops every answer of the model loaded as `load` (it was reloaded
    /// or unloaded).
    pub fn drop_load(&self, load: u64) {
        let mut entries = self.lock();
        let gone: Vec<Key> = entries
            .map
            .iter()
            .filter(|(key, _)| key.0 == load)
            .map(|(key, _)| *key)
            .collect();
        for key in gone {
            if let Some(old) = entries.map.pop(&key) {
                entries.bytes -= old.bytes;
            }
        }
    }

    /// The bytes kept now, and the entries.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.bytes, entries.map.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn hash_tensor(t: &Tensor, h: &mut impl Hasher) {
    t.name.hash(h);
    t.datatype().as_str().hash(h);
    t.shape.hash(h);
    match &t.data {
        TensorData::Bytes(items) => {
            for item in items {
                item.hash(h);
            }
        }
        data => match wirespeed_core::raw::raw_bytes(data) {
            Some(bytes) => h.write(bytes),
            None => {
                let mut raw = Vec::new();
                wirespeed_core::raw::write_raw(data, &mut raw);
                h.write(&raw);
            }
        },
    }
}

fn hash_parameters(parameters: &Parameters, h: &mut impl Hasher) {
    parameters.len().hash(h);
    for (key, value) in parameters {
        key.hash(h);
        match value {
            ParameterValue::Bool(b) => (0u8, *b).hash(h),
            ParameterValue::Int(i) => (1u8, *i).hash(h),
            ParameterValue::Float(f) => (2u8, f.to_bits()).hash(h),
            ParameterValue::String(s) => (3u8, s).hash(h),
        }
    }
}

/// A tensor's size in the cache: its data, name and shape.
fn tensor_bytes(t: &Tensor) -> usize {
    let data = match &t.data {
        TensorData::Bytes(items) => items.iter().map(|i| i.len() + 24).sum(),
        data => wirespeed_core::raw::raw_len(data),
    };
    data + t.name.len() + t.shape.len() * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[f32]) -> Tensor {
        Tensor {
            name: "x".into(),
            shape: vec![1, values.len()],
            data: TensorData::Fp32(values.to_vec()),
            parameters: Vec::new(),
        }
    }

    #[test]
    fn a_hit_is_what_was_kept_and_a_different_request_misses() {
        let cache = ResponseCache::new(1 << 20);
        let key = cache.key(7, &[row(&[1.0, 2.0])], &[], &Vec::new(), &[]);
        assert!(cache.get(&key).is_none());
        cache.insert(key, vec![row(&[3.0])]);
        assert_eq!(*cache.get(&key).unwrap(), vec![row(&[3.0])]);
        // Another value, another model load, another output or parameter.
        let other = [
            cache.key(7, &[row(&[1.0, 2.5])], &[], &Vec::new(), &[]),
            cache.key(8, &[row(&[1.0, 2.0])], &[], &Vec::new(), &[]),
            cache.key(
                7,
                &[row(&[1.0, 2.0])],
                &[RequestedOutput {
                    name: "y".into(),
                    parameters: Vec::new(),
                }],
                &Vec::new(),
                &[],
            ),
            cache.key(
                7,
                &[row(&[1.0, 2.0])],
                &[],
                &vec![("threshold".into(), ParameterValue::Float(0.5))],
                &[],
            ),
        ];
        for key in other {
            assert!(cache.get(&key).is_none());
        }
    }

    #[test]
    fn a_million_distinct_requests_stay_within_the_budget() {
        let budget = 64 * 1024;
        let cache = ResponseCache::new(budget);
        for i in 0..1_000_000u32 {
            let key = cache.key(1, &[row(&[i as f32])], &[], &Vec::new(), &[]);
            cache.insert(key, vec![row(&[i as f32; 8])]);
            if i % 4096 == 0 {
                assert!(cache.usage().0 <= budget);
            }
        }
        let (bytes, entries) = cache.usage();
        assert!(
            bytes <= budget && entries > 100,
            "{bytes} bytes, {entries} entries"
        );
        // The most recent is kept, the first long gone.
        let last = cache.key(1, &[row(&[999_999.0])], &[], &Vec::new(), &[]);
        assert!(cache.get(&last).is_some());
        let first = cache.key(1, &[row(&[0.0])], &[], &Vec::new(), &[]);
        assert!(cache.get(&first).is_none());
    }

    #[test]
    fn a_reloaded_models_answers_are_dropped() {
        let cache = ResponseCache::new(1 << 20);
        let old = cache.key(3, &[row(&[1.0])], &[], &Vec::new(), &[]);
        let kept = cache.key(4, &[row(&[1.0])], &[], &Vec::new(), &[]);
        cache.insert(old, vec![row(&[1.0])]);
        cache.insert(kept, vec![row(&[2.0])]);
        cache.drop_load(3);
        assert!(cache.get(&old).is_none());
        assert!(cache.get(&kept).is_some());
        assert_eq!(cache.usage().1, 1);
    }

    #[test]
    fn an_answer_larger_than_the_budget_is_not_kept() {
        let cache = ResponseCache::new(200);
        let key = cache.key(1, &[row(&[1.0])], &[], &Vec::new(), &[]);
        cache.insert(key, vec![row(&[0.0; 100])]);
        assert!(cache.get(&key).is_none());
        assert_eq!(cache.usage(), (0, 0));
    }
}
