"""The docs stay true to the tree: every file or folder
`docs/ARCHITECTURE.md` and the pages of `docs/architecture/` name (in
backticks, with a `/` in it) exists.

A name is read as the docs write them: from the repository's root
(`crates/wirespeed-server/src/lib.rs`), as a crate's short name and a
path in its `src/` (`engine/served.rs` is
`crates/wirespeed-engine/src/served.rs`), or as the end of a path
(`protocols/v2/convert.rs`). Placeholders (`models/<name>/`), globs and a
model folder's own files (`1/model.py`) are examples, not paths."""

import os
import re

from conftest import ROOT

# What a path the docs name may end with.
PATH = re.compile(r"\.(rs|py|md|toml|sh|proto|ya?ml|json|lua|pbtxt|txt)$|/$")


def tree():
    """Every file and folder of the repository, relative to its root, folders
    ending in `/`; build output, virtual environments and hidden folders
    left out."""
    found = set()
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "target"]
        relative = os.path.relpath(folder, ROOT)
        prefix = "" if relative == "." else relative + "/"
        found.update(prefix + d + "/" for d in subfolders)
        found.update(prefix + f for f in files)
    return found


def named_paths(text):
    for name in re.findall(r"`([^`\s]+)`", text):
        if "/" not in name or "://" in name or name.startswith(("/", "-", "{", "http")):
            continue
        if any(c in name for c in "<*") or name[0].isdigit() or not PATH.search(name):
            continue
        yield name


def exists(name, paths):
    head, _, rest = name.partition("/")
    forms = [name, f"crates/wirespeed-{head}/src/{rest}", f"crates/wirespeed-{head}/{rest}"]
    return any(p == form or p.endswith("/" + form) for form in forms for p in paths)


def test_every_path_the_architecture_names_exists():
    pages = [ROOT / "docs" / "ARCHITECTURE.md", *sorted((ROOT / "docs" / "architecture").glob("*.md"))]
    assert len(pages) > 1, "docs/architecture/ is gone"
    paths = tree()
    found = 0
    for page in pages:
        names = list(named_paths(page.read_text()))
        found += len(names)
        missing = sorted({n for n in names if not exists(n, paths)})
        assert not missing, f"{page.relative_to(ROOT)} names paths that are not in the tree: {missing}"
    assert found > 100, "the paths are no longer found in the text"
