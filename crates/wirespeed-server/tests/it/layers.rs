//! The server's layers stay layers: each folder of `src/` names only what
//! its layer may see, so the shape `docs/ARCHITECTURE.md` draws does not
//! drift back into a circle of imports.
//!
//! - `net/` (transport) sees nothing of the crate but itself;
//! - `protocols/` sees itself, the engine (`wirespeed-engine`, a crate of
//!   its own, so it cannot see the server back), and the connection counts
//!   of `net/` (which a metrics scrape reports);
//! - only the composition root (`lib.rs`, `config.rs`, `state.rs`,
//!   `listeners.rs`) and the transcoding proxy it wires in see everything;
//! - below the engine, each backend crate sees the seam
//!   (`wirespeed-backend`), never the repository that registers it.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The `crate::...` paths a file names outside its comments, each as its
/// first two segments (`crate::serve::pipeline` -> `serve::pipeline`),
/// with the line they are on.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let two: Vec<&str> = path.split("::").take(2).collect();
            paths.push((n + 1, two.join("::")));
        }
    }
    paths
}

/// The files of `layer` that name something `allowed` does not admit.
fn trespasses(layer: &str, allowed: impl Fn(&str) -> bool) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&src.join(layer)) {
        let text = std::fs::read_to_string(&file).unwrap();
        if text.contains("super::super::") {
            found.push(format!(
                "{}: super::super:: climbs out of its folder",
                file.display()
            ));
        }
        for (line, path) in crate_paths(&text) {
            if !allowed(&path) {
                found.push(format!("{}:{line}: crate::{path}", file.display()));
            }
        }
    }
    found
}

#[test]
fn net_sees_only_itself() {
    let found = trespasses("net", |path| path.starts_with("net::"));
    assert!(
        found.is_empty(),
        "net/ names other layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn protocols_see_themselves_and_the_connection_counts() {
    let found = trespasses("protocols", |path| {
        path.starts_with("protocols::") || path == "net::counts"
    });
    assert!(
        found.is_empty(),
        "protocols/ names layers above them:\n{}",
        found.join("\n")
    );
}

/// The crates `crate_name`'s manifest depends on (normal dependencies).
fn dependencies(crate_name: &str) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_name)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    text.lines()
        .skip_while(|line| *line != "[dependencies]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A backend plugs into the seam (`wirespeed-backend`) and knows neither
/// the repository that registers it nor the engine or server that run it;
/// the seam knows no backend.
#[test]
fn backends_see_the_seam_not_the_repository() {
    for backend in [
        "wirespeed-trees",
        "wirespeed-onnx",
        "wirespeed-python-backend",
        "wirespeed-text",
        "wirespeed-upstream",
    ] {
        let dependencies = dependencies(backend);
        for forbidden in ["wirespeed-models", "wirespeed-engine", "wirespeed-server"] {
            assert!(
                !dependencies.iter().any(|d| d == forbidden),
                "{backend} depends on {forbidden}: {dependencies:?}"
            );
        }
        if backend != "wirespeed-upstream" {
            assert!(
                dependencies.iter().any(|d| d == "wirespeed-backend"),
                "{backend} does not plug into wirespeed-backend: {dependencies:?}"
            );
        }
    }
    let seam = dependencies("wirespeed-backend");
    assert_eq!(
        seam.iter()
            .filter(|d| d.starts_with("wirespeed-"))
            .collect::<Vec<_>>(),
        ["wirespeed-core", "wirespeed-scheduler"],
        "the seam depends on {seam:?}"
    );
}

/// The engine knows no protocol and no socket: its manifest names no
/// transport crate and no front end.
#[test]
fn the_engine_depends_on_no_transport_or_front_end() {
    let dependencies = dependencies("wirespeed-engine");
    assert!(
        dependencies.iter().any(|d| d == "wirespeed-models"),
        "{dependencies:?}"
    );
    for forbidden in [
        "hyper",
        "hyper-util",
        "tonic",
        "wirespeed-http",
        "wirespeed-server",
        "wirespeed-proxy",
        "wirespeed-transcode",
    ] {
        assert!(
            !dependencies.iter().any(|d| d == forbidden),
            "the engine depends on {forbidden}"
        );
    }
}

#[test]
fn the_check_finds_a_trespass() {
    let text = "use crate::state::AppState; // crate::fine in a comment\nlet x = mycrate::no;";
    assert_eq!(crate_paths(text), [(1, "state::AppState".to_owned())]);
}

#[test]
fn an_openai_request_is_looked_up_and_parsed_once() {
    // The engine looks the model up (`Engine::infer`) and `request.rs`
    // parses the body's bytes; no other file of the OpenAI front end does
    // either. (A model's answer, text, may be read where it is used: a
    // completion's `tool_calls`.)
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocols/openai");
    let mut found = Vec::new();
    for file in sources(&dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let code: String = text
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let squeezed: String = code.split_whitespace().collect();
        if squeezed.contains("models.get(") {
            found.push(format!("{name}: looks a model up"));
        }
        if code.contains("::from_slice") && name != "request.rs" {
            found.push(format!("{name}: parses the body"));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The engine's modules (`pipeline`, `served`, the folder `composite`...)
/// and the modules each names (`crate::x`, or `super::x` from a file at
/// the top), the crate root left out: it declares them all.
fn engine_modules() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wirespeed-engine/src");
    let mut graph = std::collections::BTreeMap::new();
    for file in sources(&src) {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if relative == "lib.rs" {
            continue;
        }
        let module = relative
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        let top = !relative.contains('/');
        let text = std::fs::read_to_string(&file).unwrap();
        let names: &mut std::collections::BTreeSet<String> =
            graph.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for prefix in ["crate::", "super::"] {
                if prefix == "super::" && !top {
                    continue;
                }
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != module {
                        names.insert(name);
                    }
                }
            }
        }
    }
    graph
}

/// A circle of imports in `graph`, if it has one.
fn circle(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn visit(
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut found = path[start..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if !done.insert(at.to_owned()) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_engines_modules_import_no_circle() {
    let graph = engine_modules();
    assert!(graph["pipeline"].contains("served"), "{graph:?}");
    assert_eq!(circle(&graph), None, "{graph:#?}");
    // The check finds one.
    let mut looped = graph.clone();
    looped.get_mut("served").unwrap().insert("pipeline".into());
    assert!(circle(&looped).is_some());
}

/// The engine runs every composite through `Composite::run` and never
/// names a kind of one: no ensemble, graph or application type appears
/// in its code (comments aside), so a new kind is a backend, not an arm.
#[test]
fn the_engine_names_no_kind_of_composite() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wirespeed-engine/src");
    let kinds = [
        "Ensemble",
        "InferenceGraph",
        "Application",
        "Selector",
        "Graph",
        concat!("Composite", "Kind"),
    ];
    let named = |code: &str| -> Vec<&str> {
        kinds
            .iter()
            .copied()
            .filter(|kind| {
                code.match_indices(kind).any(|(i, _)| {
                    let before = code[..i].chars().next_back();
                    let after = code[i + kind.len()..].chars().next();
                    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !word(before) && !word(after)
                })
            })
            .collect()
    };
    let mut found = Vec::new();
    for file in sources(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for kind in named(code) {
                found.push(format!("{}: {kind}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    // The check finds one.
    assert_eq!(
        named("served.composite_as::<wirespeed_models::Ensemble>()"),
        ["Ensemble"]
    );
}
