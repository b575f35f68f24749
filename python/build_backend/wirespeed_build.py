"""wirespeed's build backend: maturin's, with the server binary staged first.

The wheel installs the `wirespeed` server into the environment's `bin/`
(maturin's wheel data, `wheel-data/scripts/`), as ruff and uv ship theirs.
maturin builds the Python extension; it cannot build a second Cargo binary
into a pyo3 wheel, so this backend builds the server with cargo from the
repository's workspace before maturin runs, and every PEP 517 hook but
`build_wheel` and `build_editable` is maturin's own (those reading
pyproject.toml see the wheel data's folder made first: maturin refuses a
`data` folder that is not there, and a fresh clone has none). `pip install ./python`
from a clone thus gives the extension and the server in one step.

- `WIRESPEED_SERVER_BINARY=/path/to/wirespeed` ships that binary instead
  of building one (`scripts/build-wheel` builds it itself).
- `WIRESPEED_SERVER_PROFILE` picks cargo's profile (`release` unless set;
  `dev` for the debug build the tests use).
- From an sdist, which holds the extension's crates but not the server's,
  the wheel holds the Python package alone, and says so on stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import maturin
from maturin import (  # noqa: F401  (PEP 517 hooks, re-exported)
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

# pyproject.toml's directory, where maturin is run.
PROJECT = Path(__file__).resolve().parent.parent
# pyproject.toml's `data`: its scripts/ go to the environment's bin/.
DATA = PROJECT / "wheel-data"


def _workspace() -> Path | None:
    """The Cargo workspace holding the server's crate, when this is a
    checkout of the repository rather than an sdist."""
    root = PROJECT.parent
    checkout = (root / "python" / "pyproject.toml").resolve() == PROJECT / "pyproject.toml"
    if checkout and (root / "crates" / "wirespeed" / "Cargo.toml").is_file():
        return root
    return None


def _server_binary() -> Path | None:
    given = os.environ.get("WIRESPEED_SERVER_BINARY")
    if given:
        return Path(given)
    root = _workspace()
    if root is None:
        return None
    profile = os.environ.get("WIRESPEED_SERVER_PROFILE", "release")
    cargo = os.environ.get("CARGO", "cargo")
    command = [cargo, "build", "-p", "wirespeed", "--locked", "--profile", profile, "--features", "onnxruntime"]
    print(f"wirespeed: building the server: {' '.join(command)}", file=sys.stderr, flush=True)
    env = dict(os.environ)
    # A wheel's server links without packed relocations, which would need
    # glibc 2.36 (crates/wirespeed/build.rs).
    env.setdefault("WIRESPEED_RELR", "0")
    # The build's output goes to stderr: a PEP 517 hook's stdout is the
    # frontend's.
    subprocess.run(command, cwd=root, env=env, check=True, stdout=sys.stderr)
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    if not target.is_absolute():
        target = root / target
    return target / ("debug" if profile == "dev" else profile) / "wirespeed"


def _stage() -> None:
    """Puts the server binary where maturin's wheel data takes it, or
    leaves the wheel data empty."""
    scripts = DATA / "scripts"
    shutil.rmtree(scripts, ignore_errors=True)
    DATA.mkdir(exist_ok=True)
    binary = _server_binary()
    if binary is None:
        print(
            "wirespeed: this source has no server crate (an sdist): the wheel holds the Python "
            "package only; the server comes with the published wheel or "
            "`cargo install --path crates/wirespeed` from the repository",
            file=sys.stderr,
            flush=True,
        )
        return
    if not binary.is_file():
        raise FileNotFoundError(f"wirespeed: no server binary at {binary}")
    scripts.mkdir()
    shutil.copy2(binary, scripts / "wirespeed")


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    DATA.mkdir(exist_ok=True)
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    DATA.mkdir(exist_ok=True)
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_sdist(sdist_directory, config_settings=None):
    # The sdist carries sources, not a binary staged by an earlier build.
    shutil.rmtree(DATA / "scripts", ignore_errors=True)
    DATA.mkdir(exist_ok=True)
    return maturin.build_sdist(sdist_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _stage()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _stage()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
