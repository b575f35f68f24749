//! KServe's model folders, read as its ServingRuntimes read `/mnt/models`:
//! a folder with one model file (and no `config.toml`) is served as
//! KServe's runtime for that file serves it, so that
//! `wirespeed serve --models /mnt/models --model-name iris` answers as
//! `python -m sklearnserver --model_dir /mnt/models --model_name iris`.
//!
//! | file | KServe's runtime | served by |
//! |---|---|---|
//! | `*.joblib`, `*.pkl`, `*.pickle` | sklearnserver | the `sklearn` backend: `output-0` is `predict` (`predict_proba` when the environment's `PREDICT_PROBA` is `true`, as sklearnserver reads it) |
//! | `*.bst` (XGBoost's binary), `*.json`, `*.ubj` | xgbserver | the `xgboost` tree backend: `output-0` is the booster's prediction, FP32 |
//! | `*.bst` (LightGBM's text) | lgbserver | the `lightgbm` tree backend: `output-0` is the booster's prediction, FP64 |
//! | `model.py` defining a `kserve.Model` | a custom predictor | the `python` backend with KServe's API |
//!
//! As KServe's runtimes, a request's one input is the model's whatever its
//! name ([`Binding::FirstInput`](wirespeed_core::Binding)), and a
//! one-column answer is `[n]`. More than one model file is an error, as it
//! is in KServe's runtimes; other files beside the model (a request's
//! example, `iris-input.json`, a `.json` that is not a booster) are left
//! alone, as KServe's runtimes leave them.

use std::path::{Path, PathBuf};

use wirespeed_backend::config::ModelConfig;

/// The file extensions KServe's runtimes load, by runtime.
const SKLEARN: &[&str] = &["joblib", "pkl", "pickle"];
const XGBOOST: &[&str] = &["bst", "json", "ubj"];

/// What a KServe folder holds.
enum Format {
    Sklearn(PathBuf),
    Xgboost(PathBuf),
    Lightgbm(PathBuf),
    Custom(PathBuf),
}

/// Whether `folder` is laid out as KServe's runtimes take it: a model file
/// they load, or a `model.py` that defines a `kserve.Model`.
pub(crate) fn is_model(folder: &Path) -> bool {
    !model_files(folder).is_empty() || custom_predictor(folder).is_some()
}

/// The files of `folder` a KServe runtime would load.
fn model_files(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let extension = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            p.is_file()
                && (SKLEARN.contains(&extension)
                    || (XGBOOST.contains(&extension) && is_booster(p, extension)))
        })
        .collect();
    files.sort();
    files
}

/// Whether a file of XGBoost's extensions holds a booster: any `.bst`
/// (XGBoost's binary or LightGBM's text), a `.json` or `.ubj` that names
/// its `learner` near its start, as XGBoost writes them. A request's
/// example beside the model (`iris-input.json`, as KServe's samples keep
/// one) is not a model.
fn is_booster(path: &Path, extension: &str) -> bool {
    use std::io::Read;
    if extension == "bst" {
        return true;
    }
    let mut head = Vec::with_capacity(4096);
    let read = std::fs::File::open(path).and_then(|f| f.take(4096).read_to_end(&mut head));
    read.is_ok() && head.windows(7).any(|w| w == b"learner")
}

/// `model.py`, when it defines a subclass of `kserve.Model`.
fn custom_predictor(folder: &Path) -> Option<PathBuf> {
    let path = folder.join("model.py");
    let code = std::fs::read_to_string(&path).ok()?;
    let kserve = code.contains("import kserve") || code.contains("from kserve");
    (kserve && !code.contains("class TritonPythonModel")).then_some(path)
}

fn format(folder: &Path) -> Result<Format, String> {
    if let Some(code) = custom_predictor(folder) {
        return Ok(Format::Custom(code));
    }
    let files = model_files(folder);
    let [file] = files.as_slice() else {
        return Err(format!(
            "holds {} model files ({}); KServe's runtimes load one",
            files.len(),
            files
                .iter()
                .filter_map(|f| f.file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let extension = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    if SKLEARN.contains(&extension) {
        return Ok(Format::Sklearn(file.clone()));
    }
    let head = std::fs::read(file)
        .map(|b| b.into_iter().take(64).collect::<Vec<u8>>())
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if extension == "bst" && head.starts_with(b"tree") {
        return Ok(Format::Lightgbm(file.clone()));
    }
    Ok(Format::Xgboost(file.clone()))
}

/// The configuration of the KServe model in `folder`.
pub(crate) fn model_config(folder: &Path) -> Result<ModelConfig, String> {
    let mut table = toml::Table::new();
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let format = format(folder)?;
    let lightgbm = matches!(format, Format::Lightgbm(_));
    // KServe's answers: no version (null), null for empty parameters, an
    // id made when the request has none, and its metadata (no tensors
    // unless the model says; a custom predictor's, from its worker).
    table.insert("dialect".into(), "kserve".into());
    table.insert("version".into(), "".into());
    table.insert(
        "metadata_answer".into(),
        r#"{"name":"","versions":null,"platform":"","inputs":[],"outputs":[]}"#.into(),
    );
    match format {
        Format::Sklearn(file) => {
            table.insert("backend".into(), "sklearn".into());
            table.insert("model_file".into(), file_name(&file).into());
            table.insert("convention".into(), "kserve".into());
            // sklearnserver reads PREDICT_PROBA from its environment.
            let proba =
                std::env::var("PREDICT_PROBA").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            table.insert("predict_proba".into(), proba.into());
            let mut batching = toml::Table::new();
            batching.insert("max_batch_size".into(), 32.into());
            table.insert("batching".into(), batching.into());
        }
        Format::Xgboost(file) | Format::Lightgbm(file) => {
            let ensemble =
                wirespeed_trees::load(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let width = ensemble.prediction_width() as i64;
            let shape: Vec<i64> = if width == 1 {
                vec![-1]
            } else {
                vec![-1, width]
            };
            let mut input = toml::Table::new();
            input.insert("name".into(), "input-0".into());
            input.insert("datatype".into(), "FP32".into());
            input.insert(
                "shape".into(),
                toml::Value::Array(vec![(-1).into(), (ensemble.num_features() as i64).into()]),
            );
            let mut output = toml::Table::new();
            output.insert("name".into(), "output-0".into());
            // xgboost's Booster predicts FP32; LightGBM's, FP64.
            output.insert(
                "datatype".into(),
                if lightgbm { "FP64" } else { "FP32" }.into(),
            );
            output.insert(
                "shape".into(),
                toml::Value::Array(shape.into_iter().map(Into::into).collect()),
            );
            output.insert("kind".into(), "prediction".into());
            table.insert(
                "backend".into(),
                if lightgbm { "lightgbm" } else { "xgboost" }.into(),
            );
            table.insert("model_file".into(), file_name(&file).into());
            table.insert("binding".into(), "first_input".into());
            table.insert("inputs".into(), vec![toml::Value::Table(input)].into());
            table.insert("outputs".into(), vec![toml::Value::Table(output)].into());
        }
        Format::Custom(code) => {
            table.insert("backend".into(), "python".into());
            table.insert("api".into(), "kserve".into());
            table.insert("model_file".into(), file_name(&code).into());
        }
    }
    ModelConfig::from_toml_table(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_model_file_is_a_model_and_two_are_refused() {
        let dir = crate::testdir::Dir::new();
        assert!(!is_model(dir.path()));
        std::fs::write(dir.path().join("model.joblib"), b"x").unwrap();
        assert!(is_model(dir.path()));
        let config = model_config(dir.path()).unwrap();
        assert_eq!(config.backend, "sklearn");
        std::fs::write(dir.path().join("model.pkl"), b"x").unwrap();
        let e = model_config(dir.path()).unwrap_err();
        assert!(e.contains("model.joblib, model.pkl"), "{e}");
    }

    #[test]
    fn a_requests_example_beside_the_model_is_not_a_model() {
        let dir = crate::testdir::Dir::new();
        std::fs::write(dir.path().join("model.joblib"), b"x").unwrap();
        std::fs::write(
            dir.path().join("iris-input.json"),
            br#"{"instances": [[6.8, 2.8, 4.8, 1.4]]}"#,
        )
        .unwrap();
        assert_eq!(model_config(dir.path()).unwrap().backend, "sklearn");
        // A booster saved as JSON is one, and two models are still two.
        std::fs::write(
            dir.path().join("model.json"),
            br#"{"learner":{"attributes":{}},"version":[2,1,0]}"#,
        )
        .unwrap();
        let e = model_config(dir.path()).unwrap_err();
        assert!(e.contains("model.joblib, model.json"), "{e}");
    }

    #[test]
    fn a_kserve_model_class_is_a_custom_predictor() {
        let dir = crate::testdir::Dir::new();
        std::fs::write(
            dir.path().join("model.py"),
            "import kserve\nclass M(kserve.Model):\n    pass\n",
        )
        .unwrap();
        let config = model_config(dir.path()).unwrap();
        assert_eq!(config.backend, "python");
        assert_eq!(config.backend_keys["api"].as_str(), Some("kserve"));
    }
}
