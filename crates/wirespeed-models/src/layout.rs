//! The folder formats a model folder may be in, each as the server of its
//! kind writes it, and the one order in which they are told apart.
//!
//! A folder is read by the first layout of [`Layout::ORDER`] whose files it
//! holds: wirespeed's own `config.toml` first (a user who writes one means
//! it), then Triton's `config.pbtxt`, then the formats that need no
//! configuration file at all, from the most specific file to the least
//! (`model.onnx`, MLServer's settings, an InferenceGraph's YAML, KServe's
//! model files), and last Triton's Python model alone, whose code
//! says its configuration. Each layout's reader turns the folder into the
//! same [`ModelConfig`] (`pbtxt.rs`, `mlserver.rs`, `graph.rs`,
//! `kserve.rs` do the reading); the repository loads that whatever the
//! format was. The tests below hold the order on each folder two layouts
//! could claim.

use std::path::{Path, PathBuf};

use crate::registry::Registry;
use wirespeed_backend::config::ModelConfig;

/// One folder format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// wirespeed's `config.toml`.
    Toml,
    /// Triton's `config.pbtxt`, completed by a Python model's
    /// `auto_complete_config`.
    Triton,
    /// An ONNX graph with no configuration: KServe's `model.onnx`, or
    /// Triton's `1/model.onnx` (completed from the graph, as Triton's ONNX
    /// Runtime backend completes it, unless auto-complete is off).
    Onnx,
    /// MLServer's `model-settings.json`.
    Mlserver,
    /// KServe's InferenceGraph, its YAML as applied to a cluster.
    InferenceGraph,
    /// KServe's runtimes: one model file they load, or a `kserve.Model` in
    /// `model.py`.
    Kserve,
    /// Triton's minimal Python model, `1/model.py` alone: its
    /// configuration is what its `auto_complete_config` says.
    TritonPython,
}

impl Layout {
    /// The layouts, in the order a folder is asked for them.
    pub(crate) const ORDER: [Layout; 7] = [
        Layout::Toml,
        Layout::Triton,
        Layout::Onnx,
        Layout::Mlserver,
        Layout::InferenceGraph,
        Layout::Kserve,
        Layout::TritonPython,
    ];

    /// The layout of `folder`: the first of [`Layout::ORDER`] whose files
    /// it holds.
    pub(crate) fn of(folder: &Path, registry: &Registry) -> Option<Layout> {
        Layout::ORDER
            .into_iter()
            .find(|layout| layout.holds(folder, registry))
    }

    /// Whether `folder` holds this layout's files.
    fn holds(self, folder: &Path, registry: &Registry) -> bool {
        match self {
            Layout::Toml => folder.join("config.toml").is_file(),
            Layout::Triton => folder.join("config.pbtxt").is_file(),
            Layout::Onnx => {
                folder.join("model.onnx").is_file()
                    || registry.auto_complete()
                        && wirespeed_backend::versions::version_folders(folder)
                            .iter()
                            .any(|(_, v)| v.join("model.onnx").is_file())
            }
            Layout::Mlserver => crate::mlserver::is_model(folder),
            Layout::InferenceGraph => crate::graph::is_graph(folder),
            Layout::Kserve => crate::kserve::is_model(folder),
            Layout::TritonPython => registry.auto_complete() && python_code(folder, "").is_some(),
        }
    }

    /// The file a mistake in this layout's configuration is shown with.
    pub(crate) fn file(self, folder: &Path) -> PathBuf {
        match self {
            Layout::Toml => folder.join("config.toml"),
            Layout::Triton => folder.join("config.pbtxt"),
            Layout::Mlserver => folder.join(crate::mlserver::MODEL_SETTINGS),
            _ => folder.to_owned(),
        }
    }

    /// Reads model `name`'s configuration from `folder`, as this layout
    /// writes it.
    pub(crate) fn read(
        self,
        name: &str,
        folder: &Path,
        registry: &Registry,
    ) -> Result<ModelConfig, String> {
        match self {
            Layout::Toml => ModelConfig::load(&folder.join("config.toml")),
            Layout::Triton => {
                let path = folder.join("config.pbtxt");
                let text =
                    std::fs::read_to_string(&path).map_err(|e| format!("cannot read it: {e}"))?;
                let mut parsed = crate::pbtxt::parse(&text)?;
                // Triton names a configuration without a name after its
                // folder (`initialize` reads it in `args["model_config"]`).
                if parsed.name.is_empty() {
                    parsed.name = name.to_owned();
                }
                let named = if parsed.backend.is_empty() {
                    &parsed.platform
                } else {
                    &parsed.backend
                };
                let table = match python_code(folder, &parsed.default_model_filename) {
                    Some(code) if named == "python" && registry.auto_complete() => complete_python(
                        name,
                        &wirespeed_proto::model_config::to_json(&parsed),
                        &code,
                    ),
                    _ => crate::pbtxt::model_config_table(parsed),
                }?;
                ModelConfig::from_toml_table(table)
            }
            Layout::Onnx => {
                let mut config = ModelConfig::parse("backend = \"onnx\"")?;
                // Triton's rules for Triton's layout; KServe's (a bare
                // `model.onnx`) batches as the graph allows.
                config.auto_completed = !folder.join("model.onnx").is_file();
                Ok(config)
            }
            Layout::Mlserver => crate::mlserver::model_config(name, folder),
            Layout::InferenceGraph => ModelConfig::parse("backend = \"graph\""),
            Layout::Kserve => crate::kserve::model_config(folder),
            Layout::TritonPython => {
                let code = python_code(folder, "").unwrap_or_default();
                let base = serde_json::json!({"name": name, "backend": "python"}).to_string();
                complete_python(name, &base, &code).and_then(ModelConfig::from_toml_table)
            }
        }
    }
}

/// The Python code of a Triton model folder: `file` (its
/// `default_model_filename`, `model.py` when empty) in the highest-numbered
/// version folder, or in the folder itself.
pub(crate) fn python_code(folder: &Path, file: &str) -> Option<PathBuf> {
    let file = if file.is_empty() { "model.py" } else { file };
    let mut places: Vec<PathBuf> = wirespeed_backend::versions::version_folders(folder)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    places.reverse();
    places.push(folder.to_owned());
    places
        .into_iter()
        .map(|p| p.join(file))
        .find(|p| p.is_file())
}

/// A Python model's configuration (Triton's JSON, `config`) completed by
/// its code's `auto_complete_config`, as `config.toml`'s keys. Code that has
/// none is not run.
pub(crate) fn complete_python(
    name: &str,
    config: &str,
    code: &Path,
) -> Result<toml::Table, String> {
    let has_hook = std::fs::read_to_string(code)
        .map(|text| text.contains("auto_complete_config"))
        .unwrap_or(false);
    #[cfg(feature = "python")]
    let completed = if has_hook {
        tracing::info!(model = %name, code = %code.display(), "completing the configuration with auto_complete_config");
        wirespeed_python_backend::auto_complete(config, code)?
    } else {
        config.to_owned()
    };
    #[cfg(not(feature = "python"))]
    let completed = {
        let _ = (name, has_hook);
        config.to_owned()
    };
    crate::pbtxt::from_triton_json(name, &completed, Some("python")).unwrap_or_else(|| {
        Err("auto_complete_config returned something other than a model configuration".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir as tempdir;

    /// A folder holding `files` (paths inside it, with their text).
    fn folder(files: &[(&str, &str)]) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn layout_of(files: &[(&str, &str)]) -> Option<Layout> {
        let dir = folder(files);
        Layout::of(dir.path(), &Registry::new())
    }

    const GRAPH: &str = "apiVersion: serving.kserve.io/v1alpha1\nkind: InferenceGraph\n";
    const SETTINGS: &str = r#"{"name": "m", "implementation": "mlserver_sklearn.SKLearnModel"}"#;
    const TRITON_PY: &str = "backend: \"python\"\n";

    #[test]
    fn each_layout_is_told_by_its_own_files() {
        assert_eq!(layout_of(&[("config.toml", "")]), Some(Layout::Toml));
        assert_eq!(layout_of(&[("config.pbtxt", "")]), Some(Layout::Triton));
        assert_eq!(layout_of(&[("model.onnx", "")]), Some(Layout::Onnx));
        assert_eq!(layout_of(&[("1/model.onnx", "")]), Some(Layout::Onnx));
        assert_eq!(
            layout_of(&[("model-settings.json", SETTINGS)]),
            Some(Layout::Mlserver)
        );
        assert_eq!(
            layout_of(&[("graph.yaml", GRAPH)]),
            Some(Layout::InferenceGraph)
        );
        assert_eq!(layout_of(&[("model.joblib", "")]), Some(Layout::Kserve));
        assert_eq!(
            layout_of(&[("1/model.py", "class TritonPythonModel: pass\n")]),
            Some(Layout::TritonPython)
        );
        assert_eq!(layout_of(&[("README.md", "")]), None);
    }

    #[test]
    fn a_folder_two_layouts_could_claim_is_read_by_the_first_in_order() {
        // config.toml wins over everything a user could have beside it.
        for other in [
            ("config.pbtxt", TRITON_PY),
            ("model.onnx", ""),
            ("model-settings.json", SETTINGS),
            ("graph.yaml", GRAPH),
            ("model.joblib", ""),
            ("1/model.py", ""),
        ] {
            assert_eq!(
                layout_of(&[("config.toml", ""), other]),
                Some(Layout::Toml),
                "{other:?}"
            );
        }
        // Triton's config.pbtxt beside the files it configures: Triton's.
        for other in [
            ("model.onnx", ""),
            ("1/model.onnx", ""),
            ("model-settings.json", SETTINGS),
            ("graph.yaml", GRAPH),
            ("model.json", ""),
            ("1/model.py", ""),
        ] {
            assert_eq!(
                layout_of(&[("config.pbtxt", TRITON_PY), other]),
                Some(Layout::Triton),
                "{other:?}"
            );
        }
        // An ONNX file is the most specific of the files that need no
        // configuration; MLServer's settings name their own model file.
        assert_eq!(
            layout_of(&[("model.onnx", ""), ("model-settings.json", SETTINGS)]),
            Some(Layout::Onnx)
        );
        assert_eq!(
            layout_of(&[("model-settings.json", SETTINGS), ("model.joblib", "")]),
            Some(Layout::Mlserver)
        );
        assert_eq!(
            layout_of(&[("model-settings.json", SETTINGS), ("graph.yaml", GRAPH)]),
            Some(Layout::Mlserver)
        );
        // An InferenceGraph's folder with the InferenceServices' model
        // files beside it is the graph.
        assert_eq!(
            layout_of(&[("graph.yaml", GRAPH), ("model.joblib", "")]),
            Some(Layout::InferenceGraph)
        );
        // KServe's model.py beside a Triton version folder's: KServe's
        // files are read first, Triton's Python code last.
        assert_eq!(
            layout_of(&[("model.json", r#"{"learner":{}}"#), ("1/model.py", "")]),
            Some(Layout::Kserve)
        );
    }

    #[test]
    fn without_auto_complete_a_graph_or_code_in_a_version_folder_says_nothing() {
        let dir = folder(&[("1/model.onnx", ""), ("2/model.py", "")]);
        let mut registry = Registry::new();
        registry.set_auto_complete(false);
        assert_eq!(Layout::of(dir.path(), &registry), None);
        registry.set_auto_complete(true);
        assert_eq!(Layout::of(dir.path(), &registry), Some(Layout::Onnx));
    }
}
