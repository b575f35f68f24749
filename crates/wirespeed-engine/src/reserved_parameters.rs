//! Request parameters Triton reserves. `priority` and `timeout` are read
//! here for the model's scheduler, as Triton defines them: `priority`
//! picks a level of the model's `[queue]` (1 the highest; 0, or a number
//! past the levels, the model's default), and `timeout` (microseconds; 0
//! for none) bounds the wait in its queue, where the model's queue policy
//! lets it. `sequence_*` name a stateful model's sequence
//! (`sequences.rs` reads them). `triton_enable_empty_final_response`, which
//! perf_analyzer sends, is honoured: on a stream each answer says it is
//! the request's last (`grpc/infer.rs`); elsewhere there is nothing to
//! say.

use std::time::Duration;

use wirespeed_core::{Error, ParameterValue, Parameters};

/// What a request asks of its model's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queueing {
    /// The `priority` parameter; 0 when absent.
    pub priority: u64,
    /// The `timeout` parameter, if given and not 0.
    pub timeout: Option<Duration>,
}

/// Reads `priority` and `timeout`, and refuses the request if it sets a
/// reserved parameter wirespeed does not implement.
pub fn read(parameters: &Parameters) -> Result<Queueing, Error> {
    let mut queueing = Queueing::default();
    for (key, value) in parameters {
        match (key.as_str(), value) {
            ("priority", ParameterValue::Int(n)) if *n >= 0 => queueing.priority = *n as u64,
            ("timeout", ParameterValue::Int(n)) if *n >= 0 => {
                queueing.timeout = (*n > 0).then(|| Duration::from_micros(*n as u64));
            }
            ("priority", _) => {
                return Err(Error::invalid_input(format!(
                    "parameter 'priority' must be a non-negative integer (1 is the highest level, 0 the model's default), not {value:?}"
                )))
            }
            ("timeout", _) => {
                return Err(Error::invalid_input(format!(
                    "parameter 'timeout' must be a non-negative integer of microseconds (0 for none), not {value:?}"
                )))
            }
            _ => {}
        }
    }
    Ok(queueing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, ParameterValue)]) -> Parameters {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn priority_and_timeout_are_read() {
        let q = read(&params(&[
            ("priority", ParameterValue::Int(2)),
            ("timeout", ParameterValue::Int(1500)),
        ]))
        .unwrap();
        assert_eq!(q.priority, 2);
        assert_eq!(q.timeout, Some(Duration::from_micros(1500)));
        assert_eq!(
            read(&params(&[("timeout", ParameterValue::Int(0))]))
                .unwrap()
                .timeout,
            None
        );
        let e = read(&params(&[("priority", ParameterValue::Int(-1))])).unwrap_err();
        assert!(e.message().contains("'priority'"), "{e}");
        let e = read(&params(&[("timeout", ParameterValue::String("1s".into()))])).unwrap_err();
        assert!(e.message().contains("microseconds"), "{e}");
    }
}
