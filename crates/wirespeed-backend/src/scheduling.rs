//! How the server schedules a model, from three tables of its
//! `config.toml`, the same for every backend (see `docs/batching.md`):
//!
//! ```toml
//! [batching]                      # Triton's dynamic batcher, or Clipper's adaptive one
//! max_batch_size = 32             # rows (dimension 0) per call to the model
//! preferred_batch_sizes = [8, 16] # sizes sent at once when the queue holds them
//! max_queue_delay_us = 500        # how long a request waits for a fuller batch
//! mode = "dynamic"                # or "adaptive": AIMD on the size against slo_ms
//!
//! [slo]                           # a latency objective with a default answer
//! latency_ms = 20
//! default_output = { probability = [0.5] }  # one row's values per output
//!
//! [queue]                         # Triton's queue policy and priorities
//! priority_levels = 2
//! default_priority_level = 2
//! timeout_action = "reject"       # or "delay"
//! default_timeout_us = 100000
//! max_queue_size = 0              # per level; 0: only max_queue bounds it
//! ```
//!
//! Everything that can be checked against the model is checked at load, so
//! a mistake stops the server with a message naming the key, not a request.
//! The resolved policy's types are the scheduler's
//! (`wirespeed_scheduler::Scheduling`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use wirespeed_core::{DataType, ModelMetadata, TensorData, TensorSpec};
pub use wirespeed_scheduler::{
    Adaptive, Batching, DefaultOutput, LevelPolicy, QueuePolicy, Scheduling, Slo, TimeoutAction,
};

use crate::config::ModelConfig;

/// `[batching]`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchingKeys {
    max_batch_size: usize,
    #[serde(default)]
    preferred_batch_sizes: Vec<usize>,
    #[serde(default)]
    max_queue_delay_us: u64,
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    slo_ms: Option<f64>,
    #[serde(default)]
    additive_step: Option<usize>,
    #[serde(default)]
    backoff: Option<f64>,
}

impl BatchingKeys {
    /// `max_batch_size`, as written.
    pub fn max_batch_size(&self) -> usize {
        self.max_batch_size
    }

    /// Triton's dynamic batcher's window, for a model that gathers its
    /// batches itself: rows at most, the preferred sizes, the longest
    /// wait. None in adaptive mode.
    pub fn dynamic_window(&self) -> Option<(usize, Vec<usize>, Duration)> {
        (self.mode == Mode::Dynamic).then(|| {
            (
                self.max_batch_size,
                self.preferred_batch_sizes.clone(),
                Duration::from_micros(self.max_queue_delay_us),
            )
        })
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Dynamic,
    Adaptive,
}

/// `[slo]`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloKeys {
    latency_ms: f64,
    default_output: toml::Table,
}

/// `[queue]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueKeys {
    #[serde(default)]
    max_queue_size: Option<usize>,
    #[serde(default)]
    timeout_action: Option<TimeoutAction>,
    #[serde(default)]
    default_timeout_us: Option<u64>,
    #[serde(default)]
    allow_timeout_override: Option<bool>,
    #[serde(default)]
    priority_levels: u64,
    #[serde(default)]
    default_priority_level: Option<u64>,
    /// `[queue.priority.N]`: the policy of level N, where it differs.
    #[serde(default)]
    priority: BTreeMap<String, PolicyKeys>,
}

/// `[queue.priority.N]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyKeys {
    #[serde(default)]
    max_queue_size: Option<usize>,
    #[serde(default)]
    timeout_action: Option<TimeoutAction>,
    #[serde(default)]
    default_timeout_us: Option<u64>,
    #[serde(default)]
    allow_timeout_override: Option<bool>,
}

/// Resolves the config's tables against `metadata` (or, for a model whose
/// metadata comes later, the config's declared tensors).
pub fn resolve(config: &ModelConfig, metadata: &ModelMetadata) -> Result<Scheduling, String> {
    let declared = crate::TensorConfig::specs;
    let known = !metadata.outputs.is_empty();
    let (inputs, outputs) = if known {
        (metadata.inputs.clone(), metadata.outputs.clone())
    } else {
        (declared(&config.inputs)?, declared(&config.outputs)?)
    };
    let slo = config
        .slo
        .as_ref()
        .map(|keys| slo(keys, &outputs))
        .transpose()?;
    let batching = config
        .batching
        .as_ref()
        .map(|keys| batching(keys, slo.as_ref(), &inputs, &outputs))
        .transpose()?;
    let queue = queue(config.queue.as_ref().cloned().unwrap_or_default())?;
    Ok(Scheduling {
        batching,
        slo,
        queue,
    })
}

fn batching(
    keys: &BatchingKeys,
    slo: Option<&Slo>,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> Result<Batching, String> {
    let max = keys.max_batch_size;
    if max == 0 {
        return Err("[batching] max_batch_size must be at least 1".into());
    }
    let mut preferred = keys.preferred_batch_sizes.clone();
    preferred.sort_unstable();
    preferred.dedup();
    if let Some(bad) = preferred.iter().find(|&&p| p == 0 || p > max) {
        return Err(format!(
            "[batching] preferred_batch_sizes has {bad}; each must be between 1 and max_batch_size ({max})"
        ));
    }
    for spec in inputs.iter().chain(outputs) {
        if spec.shape.first() != Some(&-1) {
            return Err(format!(
                "[batching] joins requests along the first dimension, so every input and output needs -1 there; '{}' has {}",
                spec.name,
                spec.shape_display()
            ));
        }
    }
    let adaptive = match keys.mode {
        Mode::Dynamic => {
            if let Some(key) = [
                ("slo_ms", keys.slo_ms.is_some()),
                ("additive_step", keys.additive_step.is_some()),
                ("backoff", keys.backoff.is_some()),
            ]
            .iter()
            .find(|(_, set)| *set)
            {
                return Err(format!(
                    "[batching] {} is for mode = \"adaptive\"; this model's mode is \"dynamic\"",
                    key.0
                ));
            }
            None
        }
        Mode::Adaptive => {
            let objective = match (keys.slo_ms, slo) {
                (Some(ms), _) => millis("[batching] slo_ms", ms)?,
                (None, Some(slo)) => slo.latency,
                (None, None) => {
                    return Err("[batching] mode = \"adaptive\" needs an objective: slo_ms, or [slo] latency_ms".into())
                }
            };
            let step = keys.additive_step.unwrap_or(1);
            if step == 0 {
                return Err("[batching] additive_step must be at least 1".into());
            }
            let backoff = keys.backoff.unwrap_or(0.1);
            if !(backoff > 0.0 && backoff < 1.0) {
                return Err(format!(
                    "[batching] backoff is the fraction taken off after a batch over the objective: between 0 and 1, not {backoff}"
                ));
            }
            Some(Adaptive {
                objective,
                step,
                backoff,
            })
        }
    };
    Ok(Batching {
        max_batch_size: max,
        preferred_batch_sizes: preferred,
        max_queue_delay: Duration::from_micros(keys.max_queue_delay_us),
        adaptive,
    })
}

fn millis(key: &str, ms: f64) -> Result<Duration, String> {
    if ms.is_finite() && ms > 0.0 && ms < 1e9 {
        Ok(Duration::from_secs_f64(ms / 1000.0))
    } else {
        Err(format!(
            "{key} must be a positive number of milliseconds, not {ms}"
        ))
    }
}

fn slo(keys: &SloKeys, outputs: &[TensorSpec]) -> Result<Slo, String> {
    let latency = millis("[slo] latency_ms", keys.latency_ms)?;
    if outputs.is_empty() {
        return Err(
            "[slo] default_output needs the model's outputs: declare them with [[outputs]]".into(),
        );
    }
    if let Some(unknown) = keys
        .default_output
        .keys()
        .find(|k| !outputs.iter().any(|o| &o.name == *k))
    {
        let known: Vec<String> = outputs.iter().map(|o| format!("'{}'", o.name)).collect();
        return Err(format!(
            "[slo] default_output names '{unknown}', which is not an output; the model has {}",
            known.join(", ")
        ));
    }
    let defaults = outputs
        .iter()
        .map(|spec| {
            let value = keys.default_output.get(&spec.name).ok_or_else(|| {
                format!(
                    "[slo] default_output has no value for output '{}'; every output needs one",
                    spec.name
                )
            })?;
            default_output(spec, value)
        })
        .collect::<Result<_, String>>()?;
    Ok(Slo { latency, defaults })
}

/// One row of `spec` from the TOML `value` (a value or an array of them).
fn default_output(spec: &TensorSpec, value: &toml::Value) -> Result<DefaultOutput, String> {
    let name = &spec.name;
    let row_dims = spec.shape.get(1..).unwrap_or(&[]);
    if let Some(d) = row_dims.iter().find(|&&d| d < 0) {
        return Err(format!(
            "[slo] output '{name}' has shape {}: a default needs every dimension after the first fixed, not {d}",
            spec.shape_display()
        ));
    }
    let row_len: usize = row_dims.iter().map(|&d| d as usize).product();
    let values: Vec<&toml::Value> = match value {
        toml::Value::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    if values.len() != row_len {
        return Err(format!(
            "[slo] default_output '{name}' has {} values; one row of {} {} takes {row_len}",
            values.len(),
            spec.datatype,
            spec.shape_display()
        ));
    }
    let row =
        typed(spec.datatype, &values).map_err(|e| format!("[slo] default_output '{name}': {e}"))?;
    Ok(DefaultOutput {
        name: name.clone(),
        shape: spec.shape.clone(),
        row,
    })
}

/// `values` as elements of `datatype`.
fn typed(datatype: DataType, values: &[&toml::Value]) -> Result<TensorData, String> {
    fn each<T>(
        values: &[&toml::Value],
        what: &str,
        f: impl Fn(&toml::Value) -> Option<T>,
    ) -> Result<Vec<T>, String> {
        values
            .iter()
            .map(|v| f(v).ok_or_else(|| format!("{v} is not {what}")))
            .collect()
    }
    fn int<T: TryFrom<i64>>(v: &toml::Value) -> Option<T> {
        v.as_integer().and_then(|i| T::try_from(i).ok())
    }
    fn float(v: &toml::Value) -> Option<f64> {
        v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
    }
    let ints = |dt: DataType| format!("an integer that fits {dt}");
    Ok(match datatype {
        DataType::Bool => TensorData::Bool(each(values, "a bool", |v| v.as_bool())?),
        DataType::Uint8 => TensorData::Uint8(each(values, &ints(datatype), int)?),
        DataType::Uint16 => TensorData::Uint16(each(values, &ints(datatype), int)?),
        DataType::Uint32 => TensorData::Uint32(each(values, &ints(datatype), int)?),
        DataType::Uint64 => TensorData::Uint64(each(values, &ints(datatype), int)?),
        DataType::Int8 => TensorData::Int8(each(values, &ints(datatype), int)?),
        DataType::Int16 => TensorData::Int16(each(values, &ints(datatype), int)?),
        DataType::Int32 => TensorData::Int32(each(values, &ints(datatype), int)?),
        DataType::Int64 => TensorData::Int64(each(values, &ints(datatype), int)?),
        DataType::Fp16 => TensorData::Fp16(each(values, "a number", |v| {
            float(v).map(wirespeed_core::f16::from_f64)
        })?),
        DataType::Bf16 => TensorData::Bf16(each(values, "a number", |v| {
            float(v).map(wirespeed_core::bf16::from_f64)
        })?),
        DataType::Fp32 => {
            TensorData::Fp32(each(values, "a number", |v| float(v).map(|f| f as f32))?)
        }
        DataType::Fp64 => TensorData::Fp64(each(values, "a number", float)?),
        DataType::Bytes => TensorData::Bytes(each(values, "a string", |v| {
            v.as_str().map(|s| s.as_bytes().to_vec())
        })?),
    })
}

impl PolicyKeys {
    /// Sets in `policy` what these keys set.
    fn apply(&self, policy: &mut LevelPolicy) {
        if let Some(v) = self.max_queue_size {
            policy.max_queue_size = v;
        }
        if let Some(v) = self.timeout_action {
            policy.timeout_action = v;
        }
        if let Some(us) = self.default_timeout_us {
            policy.default_timeout = (us > 0).then(|| Duration::from_micros(us));
        }
        if let Some(v) = self.allow_timeout_override {
            policy.allow_timeout_override = v;
        }
    }
}

fn queue(keys: QueueKeys) -> Result<QueuePolicy, String> {
    // `[queue]`'s own policy keys (serde cannot flatten them into a table
    // that refuses unknown keys, so they are declared twice).
    let mut base = LevelPolicy::default();
    PolicyKeys {
        max_queue_size: keys.max_queue_size,
        timeout_action: keys.timeout_action,
        default_timeout_us: keys.default_timeout_us,
        allow_timeout_override: keys.allow_timeout_override,
    }
    .apply(&mut base);
    let levels = usize::try_from(keys.priority_levels)
        .ok()
        .filter(|&n| n <= 1024)
        .ok_or_else(|| {
            format!(
                "[queue] priority_levels is {}; at most 1024",
                keys.priority_levels
            )
        })?;
    if levels == 0 {
        if keys.default_priority_level.is_some() || !keys.priority.is_empty() {
            return Err(
                "[queue] default_priority_level and [queue.priority.N] need priority_levels".into(),
            );
        }
        return Ok(QueuePolicy {
            levels: vec![base],
            default_level: 0,
        });
    }
    let in_range = |n: u64| n >= 1 && n <= keys.priority_levels;
    // Unset, requests that ask for no priority come after those that do.
    let default_level = keys.default_priority_level.unwrap_or(keys.priority_levels);
    if !in_range(default_level) {
        return Err(format!(
            "[queue] default_priority_level is {default_level}; it must be between 1 and priority_levels ({levels})"
        ));
    }
    let mut policies = vec![base.clone(); levels];
    for (level, policy) in &keys.priority {
        let n: u64 = level.parse().ok().filter(|&n| in_range(n)).ok_or_else(|| {
            format!("[queue.priority.{level}] must name a level between 1 and priority_levels ({levels})")
        })?;
        policy.apply(&mut policies[n as usize - 1]);
    }
    Ok(QueuePolicy {
        levels: policies,
        default_level: default_level as usize - 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(input: Vec<i64>, output: Vec<i64>, datatype: DataType) -> ModelMetadata {
        ModelMetadata {
            name: "m".into(),
            versions: vec!["1".into()],
            platform: "test".into(),
            inputs: vec![TensorSpec {
                optional: false,
                name: "x".into(),
                datatype: DataType::Fp32,
                shape: input,
            }],
            outputs: vec![TensorSpec {
                optional: false,
                name: "y".into(),
                datatype,
                shape: output,
            }],
        }
    }

    fn resolve(toml: &str, m: &ModelMetadata) -> Result<Scheduling, String> {
        let config = ModelConfig::parse(&format!("backend = \"identity\"\n{toml}"))?;
        super::resolve(&config, m)
    }

    #[test]
    fn batching_and_slo_resolve() {
        let m = metadata(vec![-1, 4], vec![-1, 2], DataType::Fp32);
        let s = resolve(
            "[batching]\nmax_batch_size = 16\npreferred_batch_sizes = [8, 4, 8]\nmax_queue_delay_us = 250\nmode = \"adaptive\"\n\
             [slo]\nlatency_ms = 20\ndefault_output = { y = [0.5, 1] }\n",
            &m,
        )
        .unwrap();
        let b = s.batching.unwrap();
        assert_eq!(b.preferred_batch_sizes, vec![4, 8]);
        assert_eq!(b.max_queue_delay, Duration::from_micros(250));
        let a = b.adaptive.unwrap();
        assert_eq!(
            (a.objective, a.step, a.backoff),
            (Duration::from_millis(20), 1, 0.1)
        );
        let slo = s.slo.unwrap();
        let t = slo.defaults[0].tensor(3);
        assert_eq!(t.shape, vec![3, 2]);
        assert_eq!(t.data, TensorData::Fp32(vec![0.5, 1.0, 0.5, 1.0, 0.5, 1.0]));
    }

    #[test]
    fn mistakes_are_named() {
        let m = metadata(vec![-1, 4], vec![-1], DataType::Int64);
        let err = |toml: &str| resolve(toml, &m).unwrap_err();
        assert!(err("[batching]\nmax_batch_size = 0\n").contains("at least 1"));
        assert!(err("[batching]\nmax_batch_size = 4\npreferred_batch_sizes = [8]\n").contains("8"));
        assert!(err("[batching]\nmax_batch_size = 4\nmode = \"adaptive\"\n").contains("objective"));
        assert!(err("[batching]\nmax_batch_size = 4\nslo_ms = 3\n").contains("adaptive"));
        assert!(err("[batching]\nmax_batch_size = 4\nbogus = 1\n").contains("bogus"));
        let fixed = metadata(vec![2, 4], vec![-1], DataType::Int64);
        let e = resolve("[batching]\nmax_batch_size = 4\n", &fixed).unwrap_err();
        assert!(e.contains("'x'") && e.contains("[2, 4]"), "{e}");
        assert!(err("[slo]\nlatency_ms = 5\ndefault_output = {}\n").contains("output 'y'"));
        assert!(err("[slo]\nlatency_ms = 5\ndefault_output = { z = 1 }\n").contains("'z'"));
        assert!(err("[slo]\nlatency_ms = 5\ndefault_output = { y = 1.5 }\n").contains("INT64"));
        assert!(
            err("[slo]\nlatency_ms = 5\ndefault_output = { y = [1, 2] }\n").contains("2 values")
        );
        assert!(err("[slo]\nlatency_ms = -5\ndefault_output = { y = 1 }\n").contains("positive"));
        assert!(
            err("[queue]\npriority_levels = 2\ndefault_priority_level = 3\n").contains("between 1")
        );
        assert!(
            err("[queue]\npriority_levels = 2\n[queue.priority.3]\nmax_queue_size = 1\n")
                .contains("priority.3")
        );
        assert!(err("[queue]\ndefault_priority_level = 1\n").contains("priority_levels"));
        assert!(err("[queue]\ntimeout_action = \"drop\"\n").contains("drop"));
    }

    #[test]
    fn queue_levels_follow_triton() {
        let m = metadata(vec![-1, 4], vec![-1], DataType::Int64);
        let s = resolve(
            "[queue]\npriority_levels = 3\ndefault_timeout_us = 1000\n[queue.priority.1]\ntimeout_action = \"delay\"\nmax_queue_size = 7\n",
            &m,
        )
        .unwrap();
        let q = s.queue;
        assert_eq!(q.levels.len(), 3);
        assert_eq!(q.default_level, 2);
        assert_eq!((q.level(1), q.level(0), q.level(9)), (0, 2, 2));
        assert_eq!(q.levels[0].timeout_action, TimeoutAction::Delay);
        assert_eq!(q.levels[0].max_queue_size, 7);
        assert_eq!(q.levels[1].timeout_action, TimeoutAction::Reject);
        let ms = Duration::from_millis;
        // A request's timeout may only shorten the default.
        assert_eq!(q.levels[1].timeout(Some(ms(5))), Some(ms(1)));
        assert_eq!(
            q.levels[1].timeout(Some(Duration::from_micros(10))),
            Some(Duration::from_micros(10))
        );
        let none = LevelPolicy::default();
        assert_eq!(none.timeout(Some(ms(5))), Some(ms(5)));
        assert_eq!(none.timeout(None), None);
        let fixed = LevelPolicy {
            allow_timeout_override: false,
            ..none
        };
        assert_eq!(fixed.timeout(Some(ms(5))), None);
    }
}
