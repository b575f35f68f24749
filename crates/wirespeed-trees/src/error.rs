//! Why a model could not be loaded.

/// A model file that cannot be served, with a message that says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read model file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not a model of the format it claims.
    #[error("not a valid XGBoost JSON model: {0}")]
    Format(String),
    /// The file is not a valid LightGBM text model.
    #[error("not a valid LightGBM model: {0}")]
    LightGbm(String),
    /// An ONNX tree-ensemble node whose attributes do not make trees.
    #[error("not a valid ONNX tree ensemble: {0}")]
    Onnx(String),
    /// The model uses a feature this runtime refuses rather than mispredict.
    #[error("unsupported model: {0}")]
    Unsupported(String),
}

impl LoadError {
    pub(crate) fn format(message: impl Into<String>) -> LoadError {
        LoadError::Format(message.into())
    }

    pub(crate) fn onnx(message: impl Into<String>) -> LoadError {
        LoadError::Onnx(message.into())
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> LoadError {
        LoadError::Unsupported(message.into())
    }
}
