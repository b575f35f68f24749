//! Request parameters Triton reserves for features wirespeed does not have
//! yet (sequence batching, priorities, per-request timeouts): a request
//! that sets one to anything but its default is refused, naming it, rather
//! than answered as if it had not been sent. `priority` and `timeout`
//! belong to the batching scheduler. `triton_enable_empty_final_response`,
//! which perf_analyzer sends, is honoured: on a stream each answer says it
//! is the request's last (`grpc/infer.rs`); elsewhere there is nothing to
//! say.

use wirespeed_core::{Error, ParameterValue, Parameters};

/// Refuses the request if it sets a reserved parameter wirespeed does not
/// implement.
pub(crate) fn refuse(parameters: &Parameters) -> Result<(), Error> {
    for (key, value) in parameters {
        let default = match (key.as_str(), value) {
            ("sequence_id", ParameterValue::Int(0)) => true,
            ("sequence_id", ParameterValue::String(s)) => s.is_empty(),
            ("sequence_start" | "sequence_end", ParameterValue::Bool(false)) => true,
            ("priority" | "timeout", ParameterValue::Int(0)) => true,
            ("sequence_id" | "sequence_start" | "sequence_end" | "priority" | "timeout", _) => {
                false
            }
            _ => continue,
        };
        if !default {
            let what = match key.as_str() {
                "sequence_id" | "sequence_start" | "sequence_end" => {
                    "sequence batching (stateful models)"
                }
                "priority" => "request priorities",
                _ => "per-request queue timeouts",
            };
            return Err(Error::invalid_input(format!(
                "parameter '{key}' ({value:?}) asks for {what}, which this server does not \
                 support; leave it out or at its default"
            )));
        }
    }
    Ok(())
}
