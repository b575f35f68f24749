//! The two kinds of backend: one that loads a model that computes, and one
//! that reads a composite (a model that answers through other served
//! models).

use std::sync::Arc;

use wirespeed_core::Model;

use crate::{Composite, ModelSource};

/// A kind of model: reads a model folder and its config, and loads the
/// model.
pub trait Backend: Send + Sync {
    /// The name `config.toml` gives it: `backend = "<name>"`.
    fn name(&self) -> &'static str;

    /// Loads the model `source` describes. The error is shown with the
    /// model's folder, so it need not name it.
    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String>;

    /// Whether its models may declare optional inputs (Triton's
    /// `optional: true`) that a request may leave out: the model then
    /// gets the request without them. Refused at load unless it says so.
    fn takes_optional_inputs(&self) -> bool {
        false
    }

    /// Whether a stateful model's sequence flags (`sequence_start`,
    /// `sequence_end`, `sequence_id`) reach it as request parameters too,
    /// as Triton's Python backend gives them to `execute`.
    fn sequence_flags_as_parameters(&self) -> bool {
        false
    }
}

/// A kind of model that computes nothing itself: its folder names other
/// served models, and the server answers through them.
pub trait CompositeBackend: Send + Sync {
    /// The name `config.toml` gives it: `backend = "<name>"`.
    fn name(&self) -> &'static str;

    /// Reads the composite `source` describes. The models it calls are
    /// checked against the served ones by the server, not here.
    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Composite>, String>;
}
