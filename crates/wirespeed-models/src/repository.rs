//! The model repository: one folder per model, each with a `config.toml`
//! naming the backend that loads it. The server loads them all at
//! start-up, or some, and loads and unloads them while serving (Triton's
//! repository extension, `--model-control-mode`).

use std::path::{Path, PathBuf};

use wirespeed_core::CpuPool;

use crate::layout::Layout;
use crate::loaded::{load_version, LoadedModel};
use crate::registry::Registry;
use wirespeed_backend::config::ModelConfig;
use wirespeed_backend::versions::{select_versions, version_folders, VersionPolicy};

/// Why the repository could not be loaded; names the folder at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct RepositoryError {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

/// Loads every model under `dirs` (one repository, or several as Triton
/// takes them) with the backends of `registry`, in name order (and each
/// model's versions in version order). Fails on the first model that
/// cannot be loaded: a server that starts must serve everything it was
/// given.
pub fn load_repository(
    dirs: &[PathBuf],
    registry: &Registry,
    pool: &CpuPool,
) -> Result<Vec<LoadedModel>, RepositoryError> {
    let folders = model_folders_in(dirs)?;
    if folders.is_empty() {
        return Err(RepositoryError {
            path: dirs.first().cloned().unwrap_or_default(),
            message: "contains no models; each model is a folder with a config.toml".into(),
        });
    }
    let mut loaded = Vec::new();
    for (name, folder) in &folders {
        loaded.extend(load_model(name, folder, registry, pool, None)?);
    }
    Ok(loaded)
}

/// The model folders under `dir`, by name, in name order: every folder
/// that is not hidden. A folder whose name could not be a model's is an
/// error naming it.
pub fn model_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>, RepositoryError> {
    // MLServer's settings may put the models in a folder of their own.
    let root = crate::mlserver::repository_root(dir);
    let dir = root.as_path();
    let entries = std::fs::read_dir(dir).map_err(|e| RepositoryError {
        path: dir.to_owned(),
        message: format!(
            "cannot read the model repository ({e}); pass --models DIR to choose another"
        ),
    })?;
    // `mlserver start DIR` in a model's own folder: DIR is the model.
    if crate::mlserver::is_model(dir) && !dir.join("config.toml").is_file() {
        let mut folders = crate::mlserver::models_under(dir);
        check_names(&folders)?;
        folders.truncate(1);
        return Ok(folders);
    }
    let mut folders: Vec<(String, PathBuf)> = Vec::new();
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        if !path.is_dir()
            || path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let own = ["config.toml", "config.pbtxt"]
            .iter()
            .any(|f| path.join(f).is_file());
        if !own && crate::mlserver::is_model(&path) {
            folders.push((crate::mlserver::model_name(&path), path));
            continue;
        }
        // MLServer finds its models' settings at any depth: a folder that
        // is not a model's may hold some.
        let nested = if own || !version_folders(&path).is_empty() {
            Vec::new()
        } else {
            crate::mlserver::models_under(&path)
        };
        if nested.is_empty() {
            folders.push((name, path));
        } else {
            folders.extend(nested);
        }
    }
    folders.sort();
    let folders = crate::mlserver::versions_together(folders)?;
    check_names(&folders)?;
    Ok(folders)
}

/// The model folders of several repositories (Triton's
/// `--model-repository` given more than once), by name, in name order. A
/// name found in two of them is an error naming both folders: Triton
/// serves neither.
pub fn model_folders_in(dirs: &[PathBuf]) -> Result<Vec<(String, PathBuf)>, RepositoryError> {
    if let [dir] = dirs {
        return model_folders(dir);
    }
    let mut folders = Vec::new();
    for dir in dirs {
        folders.extend(model_folders(dir)?);
    }
    folders.sort();
    check_names(&folders)?;
    Ok(folders)
}

/// Every name a model's, and no two models of one name.
fn check_names(folders: &[(String, PathBuf)]) -> Result<(), RepositoryError> {
    let mut seen: std::collections::HashMap<&str, &PathBuf> =
        std::collections::HashMap::with_capacity(folders.len());
    for (name, folder) in folders {
        if let Some(other) = seen.insert(name, folder) {
            return Err(RepositoryError {
                path: folder.clone(),
                message: format!(
                    "model '{name}' is also {}; each model needs a name of its own",
                    other.display()
                ),
            });
        }
    }
    if let Some((_, folder)) = folders.iter().find(|(name, _)| !is_valid_model_name(name)) {
        return Err(RepositoryError {
            path: folder.clone(),
            message: "model names may use only letters, digits, '_', '-' and '.'".into(),
        });
    }
    Ok(())
}

/// Whether `folder` is laid out as one model's: a `config.toml`, Triton's
/// `config.pbtxt`, an ONNX graph, MLServer's `model-settings.json`, or a
/// model file of KServe's runtimes.
pub fn is_model_folder(folder: &Path) -> bool {
    ["config.toml", "config.pbtxt", "model.onnx"]
        .iter()
        .any(|f| folder.join(f).is_file())
        || crate::mlserver::is_model(folder)
        || crate::kserve::is_model(folder)
}

/// Loads the model `name` in `folder`, from its `config.toml`, or from
/// `config`, a configuration given instead of it (Triton's load with a
/// config override), as JSON with `config.toml`'s keys: one model in the
/// flat layout, or each version its `version_policy` serves from numbered
/// version folders (`versions.rs`), in version order. All load, or none.
pub fn load_model(
    name: &str,
    folder: &Path,
    registry: &Registry,
    pool: &CpuPool,
    config: Option<&str>,
) -> Result<Vec<LoadedModel>, RepositoryError> {
    let error = |path: &Path, message: String| RepositoryError {
        path: path.to_owned(),
        message,
    };
    let config_path = folder.join("config.toml");
    // MLServer's versions of one model, each a folder of its own with its
    // settings (`mlserver.rs`): each version loaded from its own.
    if config.is_none() {
        let versions = crate::mlserver::version_folders(folder, name);
        if !versions.is_empty() {
            return versions
                .iter()
                .map(|(version, files)| {
                    let settings = files.join(crate::mlserver::MODEL_SETTINGS);
                    let Some(version) = version else {
                        return Err(error(
                            &settings,
                            format!(
                                "model '{name}' has several folders, and this one's settings \
                                 give no parameters.version to tell it from the others"
                            ),
                        ));
                    };
                    if versions
                        .iter()
                        .filter(|(v, _)| v.as_ref() == Some(version))
                        .count()
                        > 1
                    {
                        return Err(error(
                            &settings,
                            format!("another folder of model '{name}' is version '{version}' too"),
                        ));
                    }
                    let config = crate::mlserver::model_config(name, files)
                        .map_err(|m| error(&settings, m))?;
                    load_version(
                        name,
                        files,
                        files,
                        &config,
                        registry,
                        pool,
                        VersionPolicy::default(),
                    )
                })
                .collect();
        }
    }
    if config.is_none() && config_path.is_file() && folder.join("config.pbtxt").is_file() {
        tracing::warn!(
            model = %name,
            "the folder has both config.toml and config.pbtxt; config.toml is read, config.pbtxt is not"
        );
    }
    let config = match config {
        Some(json) => given_config(json, folder, registry)?,
        None => match Layout::of(folder, registry) {
            Some(layout) => layout
                .read(name, folder, registry)
                .map_err(|m| error(&layout.file(folder), m))?,
            None => {
                return Err(error(
                    folder,
                    "has no config.toml; every model folder needs one (an ONNX model's \
                     folder with model.onnx or 1/model.onnx alone, a Triton model's \
                     with its config.pbtxt, an MLServer model's with its \
                     model-settings.json, and a KServe model's with one model file of its \
                     runtimes are the exceptions)"
                        .into(),
                ))
            }
        },
    };
    if config.max_concurrency == Some(0) {
        return Err(error(
            &config_path,
            "max_concurrency must be at least 1".into(),
        ));
    }
    let available = version_folders(folder);
    let policy = match &config.version_policy {
        Some(keys) => keys.policy().map_err(|m| error(&config_path, m))?,
        None => VersionPolicy::default(),
    };
    if available.is_empty() {
        if config.version_policy.is_some() {
            return Err(error(
                &config_path,
                "version_policy chooses among numbered version folders (1/, 2/, ...), and this \
                 model has none; remove it, or move the model files into a version folder"
                    .into(),
            ));
        }
        let one = load_version(name, folder, folder, &config, registry, pool, policy)?;
        return Ok(vec![one]);
    }
    if config.version_given {
        return Err(error(
            &config_path,
            format!(
                "version is set, but the numbered folders ({}) give the versions; remove it",
                available
                    .iter()
                    .map(|(n, _)| format!("{n}/"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let chosen = select_versions(&policy, &available).map_err(|m| error(&config_path, m))?;
    chosen
        .iter()
        .map(|(number, files)| {
            let mut versioned = config.clone();
            versioned.version = number.to_string();
            versioned.version_given = true;
            load_version(
                name,
                folder,
                files,
                &versioned,
                registry,
                pool,
                policy.clone(),
            )
        })
        .collect()
}

/// The configuration given to load model in `folder` instead of its
/// files (Triton's load with a config override): Triton's `ModelConfig`
/// JSON, as its clients send it, or JSON with `config.toml`'s keys.
fn given_config(
    json: &str,
    folder: &Path,
    registry: &Registry,
) -> Result<ModelConfig, RepositoryError> {
    let given = |m: String| RepositoryError {
        path: folder.to_owned(),
        message: format!("the configuration given to load the model: {m}"),
    };
    let name = folder
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // A Python model's configuration is completed by its code's
    // `auto_complete_config`, as Triton completes one given with the load.
    if let Some(table) = completed_by_code(name, json, folder, registry) {
        let mut config = table
            .and_then(ModelConfig::from_toml_table)
            .map_err(given)?;
        config.confined = true;
        return Ok(config);
    }
    match crate::pbtxt::from_triton_json(name, json, guessed_backend(folder)) {
        Some(table) => {
            let mut config = table
                .and_then(ModelConfig::from_toml_table)
                .map_err(given)?;
            config.confined = true;
            Ok(config)
        }
        None => ModelConfig::from_json(json).map_err(given),
    }
}

/// A configuration given as Triton's JSON for a Python model (named so,
/// or one whose folder has only Python code), completed by the code's
/// `auto_complete_config` when auto-complete is on; `None` for any other.
fn completed_by_code(
    name: &str,
    json: &str,
    folder: &Path,
    registry: &Registry,
) -> Option<Result<toml::Table, String>> {
    if !registry.auto_complete() {
        return None;
    }
    let mut given: serde_json::Value = serde_json::from_str(json).ok()?;
    let object = given.as_object_mut()?;
    let named = ["backend", "platform"]
        .iter()
        .find_map(|key| object.get(*key)?.as_str().filter(|b| !b.is_empty()))
        .map(str::to_owned);
    let backend = named.as_deref().or(guessed_backend(folder))?;
    if backend != "python" {
        return None;
    }
    let file = object
        .get("default_model_filename")
        .and_then(|f| f.as_str())
        .unwrap_or_default()
        .to_owned();
    let code = crate::layout::python_code(folder, &file)?;
    object
        .entry("name")
        .or_insert_with(|| serde_json::Value::from(name));
    object.insert("backend".into(), "python".into());
    Some(crate::layout::complete_python(
        name,
        &given.to_string(),
        &code,
    ))
}

/// The Triton backend a model folder's files say, for a configuration that
/// names none: an ONNX file or a Python model, in the folder or a version
/// folder.
fn guessed_backend(folder: &Path) -> Option<&'static str> {
    let mut places = vec![folder.to_owned()];
    places.extend(
        wirespeed_backend::versions::version_folders(folder)
            .into_iter()
            .map(|(_, v)| v),
    );
    if places.iter().any(|p| p.join("model.onnx").is_file()) {
        Some("onnxruntime")
    } else if places.iter().any(|p| p.join("model.py").is_file()) {
        Some("python")
    } else {
        None
    }
}

/// Whether `name` could be a model folder's name: letters, digits, `_`,
/// `-` and `.`, and not `.` or `..`. Names from URLs and messages are held
/// to the same rule before they are looked up.
pub fn is_valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(configs: &[(&str, &str)]) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        for (name, config) in configs {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("config.toml"), config).unwrap();
        }
        dir
    }

    /// A temporary folder, removed when dropped.
    use crate::testdir as tempdir;

    const ECHO: &str = "backend = 'identity'\n[[inputs]]\nname='x'\ndatatype='FP32'\nshape=[-1]\n[[outputs]]\nname='y'\ndatatype='FP32'\nshape=[-1]\n";

    fn load(dir: &tempdir::Dir) -> Result<Vec<LoadedModel>, RepositoryError> {
        load_repository(
            &[dir.path().to_owned()],
            &Registry::builtin(),
            &CpuPool::new(1).unwrap(),
        )
    }

    #[test]
    fn models_load_in_name_order() {
        let dir = repo(&[("b", ECHO), ("a", &format!("max_queue = 3\n{ECHO}"))]);
        let models = load(&dir).unwrap();
        let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(models[0].serving.max_queue, Some(3));
        assert_eq!(models[0].model.metadata().platform, "identity");
    }

    /// Optional inputs are the backend's to allow: identity refuses one, a
    /// backend that says it takes them loads it.
    #[test]
    fn optional_inputs_are_the_backends_to_take() {
        use wirespeed_backend::{Backend, ModelSource};
        struct Lenient;
        impl Backend for Lenient {
            fn name(&self) -> &'static str {
                "lenient"
            }
            fn load(
                &self,
                source: &ModelSource<'_>,
            ) -> Result<std::sync::Arc<dyn wirespeed_core::Model>, String> {
                crate::identity::Identity.load(source)
            }
            fn takes_optional_inputs(&self) -> bool {
                true
            }
        }
        let optional = ECHO.replace("name='x'", "name='x'\noptional=true");
        let e = load(&repo(&[("a", &optional)])).unwrap_err().to_string();
        assert!(e.contains("input 'x' is optional"), "{e}");
        let mut registry = Registry::builtin();
        registry.register(Lenient);
        let dir = repo(&[("a", &optional.replace("'identity'", "'lenient'"))]);
        let models = load_repository(
            &[dir.path().to_owned()],
            &registry,
            &CpuPool::new(1).unwrap(),
        )
        .unwrap();
        assert_eq!(models[0].backend, "lenient");
    }

    #[test]
    fn labels_files_are_read_for_outputs_only() {
        let labelled = ECHO.replace("name='y'", "name='y'\nlabels='classes.txt'");
        let dir = repo(&[("a", &labelled)]);
        std::fs::write(dir.path().join("a/classes.txt"), "cat\ndog\n").unwrap();
        let models = load(&dir).unwrap();
        assert_eq!(models[0].labels[0].labels, ["cat", "dog"]);
        assert_eq!(models[0].labels[0].file, "classes.txt");
        let on_input = ECHO.replace("name='x'", "name='x'\nlabels='classes.txt'");
        let e = load(&repo(&[("a", &on_input)])).unwrap_err().to_string();
        assert!(e.contains("labels belong to outputs"), "{e}");
        let outside = ECHO.replace("name='y'", "name='y'\nlabels='../secret'");
        let e = load(&repo(&[("a", &outside)])).unwrap_err().to_string();
        assert!(e.contains("inside the model's folder"), "{e}");
        let missing = repo(&[("a", &labelled)]);
        let e = load(&missing).unwrap_err().to_string();
        assert!(e.contains("classes.txt"), "{e}");
    }

    #[test]
    fn unknown_backends_and_keys_are_named() {
        let dir = repo(&[("a", &ECHO.replace("identity", "tensorrt"))]);
        let e = load(&dir).unwrap_err().to_string();
        assert!(
            e.contains("unknown backend 'tensorrt'")
                && e.contains("identity, lightgbm, onnx, python, sklearn, upstream, xgboost"),
            "{e}"
        );

        let dir = repo(&[("a", &format!("batch = 3\n{ECHO}"))]);
        let e = load(&dir).unwrap_err().to_string();
        assert!(e.contains("batch"), "{e}");

        let dir = repo(&[("a", &format!("{ECHO}kind = 'margin'\n"))]);
        let e = load(&dir).unwrap_err().to_string();
        assert!(e.contains("unknown key 'kind' in tensor 'y'"), "{e}");

        let dir = repo(&[("a", &format!("max_concurrency = 0\n{ECHO}"))]);
        assert!(load(&dir).unwrap_err().to_string().contains("at least 1"));
    }

    #[test]
    fn a_config_given_as_json_replaces_config_toml() {
        let dir = repo(&[("a", ECHO)]);
        let json = r#"{"backend": "identity", "version": "7", "max_queue": 2,
            "inputs": [{"name": "x", "datatype": "INT64", "shape": [-1]}],
            "outputs": [{"name": "y", "datatype": "INT64", "shape": [-1]}]}"#;
        let pool = CpuPool::new(1).unwrap();
        let folder = dir.path().join("a");
        let model = load_model("a", &folder, &Registry::builtin(), &pool, Some(json))
            .unwrap()
            .remove(0);
        assert_eq!(model.model.metadata().versions, ["7"]);
        assert_eq!(model.serving.max_queue, Some(2));
        let e = load_model(
            "a",
            &folder,
            &Registry::builtin(),
            &pool,
            Some("{\"backend\": 3}"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("the configuration given to load the model"),
            "{e}"
        );
        // A config sent with a load names files inside the folder only.
        for file in ["/etc/passwd", "../b/model.json", ""] {
            let json = format!(r#"{{"backend": "xgboost", "model_file": "{file}"}}"#);
            let e = load_model("a", &folder, &Registry::builtin(), &pool, Some(&json))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("inside the model's folder") || e.contains("empty"),
                "{e}"
            );
        }
        let e = load_model("a", &folder, &Registry::builtin(), &pool, Some("[1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("JSON"), "{e}");
    }

    #[test]
    fn version_folders_are_served_by_policy() {
        let dir = repo(&[("a", ECHO)]);
        for v in ["1", "2", "10", "notes"] {
            std::fs::create_dir(dir.path().join("a").join(v)).unwrap();
        }
        let versions = |dir: &tempdir::Dir| -> Vec<String> {
            load(dir)
                .unwrap()
                .iter()
                .map(|m| m.model.metadata().versions.join(","))
                .collect()
        };
        assert_eq!(versions(&dir), ["10"]);
        let config = dir.path().join("a/config.toml");
        for (policy, want) in [
            ("{ all = true }", vec!["1", "2", "10"]),
            ("{ latest = { num_versions = 2 } }", vec!["2", "10"]),
            ("{ specific = [1] }", vec!["1"]),
        ] {
            std::fs::write(&config, format!("version_policy = {policy}\n{ECHO}")).unwrap();
            assert_eq!(versions(&dir), want, "{policy}");
            let loaded = load(&dir).unwrap();
            assert_ne!(loaded[0].version_policy, VersionPolicy::default());
        }
        std::fs::write(
            &config,
            format!("version_policy = {{ specific = [3] }}\n{ECHO}"),
        )
        .unwrap();
        let e = load(&dir).unwrap_err().to_string();
        assert!(e.contains("version 3 with no folder"), "{e}");
        std::fs::write(&config, format!("version = '4'\n{ECHO}")).unwrap();
        let e = load(&dir).unwrap_err().to_string();
        assert!(
            e.contains("version is set") && e.contains("1/, 2/, 10/"),
            "{e}"
        );
        let flat = repo(&[("b", &format!("version_policy = {{ all = true }}\n{ECHO}"))]);
        let e = load(&flat).unwrap_err().to_string();
        assert!(e.contains("has none"), "{e}");
    }

    #[test]
    fn model_names_are_folder_safe() {
        assert!(is_valid_model_name("titanic_v1.2-b"));
        for bad in ["", ".", "..", "a/b", "a b", "é"] {
            assert!(!is_valid_model_name(bad), "{bad}");
        }
    }
}
