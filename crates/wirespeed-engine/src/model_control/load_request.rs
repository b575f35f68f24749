//! A load request as Triton's clients send it: its parameters read into a
//! configuration to load with and model files (`file:PATH`), each path
//! kept inside the model's folder, and the private folder those files are
//! written to.

use std::path::{Path, PathBuf};

use wirespeed_core::Error;

/// The configuration a load request's parameters carry, if any: Triton's
/// `config`, a string. Each parameter comes as its key and its value when
/// that is a string.
pub fn load_request<'a>(
    parameters: impl IntoIterator<Item = (&'a str, LoadValue<'a>)>,
) -> Result<LoadRequest, Error> {
    let mut request = LoadRequest::default();
    for (key, value) in parameters {
        match (key, value) {
            ("config", LoadValue::Text(text)) => request.config = Some(text.to_owned()),
            ("config", _) => return Err(Error::invalid_input(
                "the load parameter 'config' must be a string: the model's configuration as JSON",
            )),
            (key, value) if key.starts_with("file:") => {
                let path = file_path(&key["file:".len()..])?;
                let bytes = match value {
                    LoadValue::Bytes(bytes) => bytes.to_vec(),
                    // REST's JSON carries them in base64, as tritonclient sends them.
                    LoadValue::Text(text) => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .map_err(|e| {
                                Error::invalid_input(format!(
                                    "load parameter '{key}' is not base64: {e}"
                                ))
                            })?
                    }
                    LoadValue::Other => {
                        return Err(Error::invalid_input(format!(
                            "load parameter '{key}' must be the file's bytes (base64 in JSON)"
                        )))
                    }
                };
                request.files.push((path, bytes));
            }
            (key, _) => {
                return Err(Error::invalid_input(format!(
                    "unknown load parameter '{key}'; a load takes 'config', the model's \
                     configuration as JSON, and 'file:PATH' model files"
                )))
            }
        }
    }
    if !request.files.is_empty() && request.config.is_none() {
        return Err(Error::invalid_input(
            "failed to load: a load with model files ('file:' parameters) needs 'config' too \
             ('{}' to have it completed from the files)",
        ));
    }
    Ok(request)
}

/// Writes a load's files to a new private folder (mode 0700) under the
/// system's temporary directory, and returns it.
pub(super) fn write_files(name: &str, files: &[(PathBuf, Vec<u8>)]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let folder =
        std::env::temp_dir().join(format!("wirespeed-load-{}-{n}-{name}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&folder)?;
    let written = files.iter().try_for_each(|(path, bytes)| {
        let target = folder.join(path);
        if let Some(parent) = target.parent() {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(parent)?;
        }
        std::fs::write(target, bytes)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&folder);
        return Err(e);
    }
    Ok(folder)
}

/// A `file:` parameter's path: relative, inside the model's folder, each
/// component a name a file system takes (at most 255 bytes).
fn file_path(text: &str) -> Result<PathBuf, Error> {
    // `file:/1/model.py` is in the model's folder too, as Triton joins it.
    let path = Path::new(text.trim_start_matches('/'));
    let normal = path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if path.as_os_str().is_empty() || !normal {
        return Err(Error::invalid_input(format!(
            "failed to poll from model repository: file '{text}' must be a relative path \
             inside the model's folder"
        )));
    }
    if let Some(long) = path.components().find(|c| c.as_os_str().len() > 255) {
        return Err(Error::invalid_input(format!(
            "failed to poll from model repository: file path component of {} bytes is longer \
             than 255",
            long.as_os_str().len()
        )));
    }
    Ok(path.to_owned())
}

/// A load's parameter value, as REST's JSON or gRPC gives it.
pub enum LoadValue<'a> {
    /// A string (REST's JSON string, gRPC's `string_param`).
    Text(&'a str),
    /// Bytes (REST's base64 file contents, gRPC's `bytes_param`).
    Bytes(&'a [u8]),
    /// Any other value (a number, a boolean): refused where text is meant.
    Other,
}

/// What a load request carries: a configuration to use instead of the
/// folder's, and model files (Triton's `file:` parameters), which are
/// loaded from a private folder of their own instead of the repository's.
#[derive(Debug, Default)]
pub struct LoadRequest {
    /// A model configuration (JSON) to load with, in place of the folder's.
    pub config: Option<String>,
    /// Model files by their path in the model's folder, and their contents.
    pub files: Vec<(PathBuf, Vec<u8>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_file_lies_in_the_models_folder() {
        // Triton's clients write `file:1/model.py`, and `file:/1/model.py`.
        assert_eq!(file_path("1/model.py").unwrap(), Path::new("1/model.py"));
        assert_eq!(file_path("/1/model.py").unwrap(), Path::new("1/model.py"));
        for outside in ["", "/", "../model.py", "1/../../model.py", "./1/model.py"] {
            assert!(file_path(outside).is_err(), "{outside}");
        }
    }
}
