//! An ensemble's steps, as Triton's `ensemble_scheduling` lists them: the
//! models it calls and how tensors flow between them.

/// One step: a model called with some of the ensemble's tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The model called.
    pub model: String,
    /// Its version; `None` for the one served by default (Triton's `-1`).
    pub version: Option<String>,
    /// The step model's input, and the ensemble tensor that feeds it.
    pub inputs: Vec<(String, String)>,
    /// The step model's output, and the ensemble tensor it becomes.
    pub outputs: Vec<(String, String)>,
}
