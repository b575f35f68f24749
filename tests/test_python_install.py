"""`pip install ./python` from a clone, and from the sdist, as a user runs
them: no script of ours first. pip calls the package's build backend
(python/build_backend/wirespeed_build.py, maturin's with the server built
and staged): from the checkout the wheel holds the extension and the
`wirespeed` server for the environment's bin/; from the sdist, which has
no server crate, the extension alone. Debug builds, to keep CI's time:
the checkout's reuses target/, the sdist's builds its crates afresh."""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

VENV_BIN = Path(sys.executable).parent


def pip_env(**extra):
    env = dict(os.environ)
    # pip's build runs maturin from the environment it builds in.
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MATURIN_PEP517_ARGS"] = "--profile dev"
    env.update(extra)
    return env


def pip_wheel(source, out, env):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        capture_output=True, text=True, env=env, timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (wheel,) = out.glob("wirespeed-*.whl")
    return wheel


def test_pip_builds_the_package_and_the_server_from_a_clean_checkout(tmp_path):
    # As a fresh clone has it: no staged wheel data.
    shutil.rmtree(ROOT / "python" / "wheel-data", ignore_errors=True)
    wheel = pip_wheel(ROOT / "python", tmp_path / "out", pip_env(WIRESPEED_SERVER_PROFILE="dev"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert any(n.startswith("wirespeed/_wirespeed") for n in names), names
        (script,) = [n for n in names if n.endswith(".data/scripts/wirespeed")]
        server = tmp_path / "wirespeed"
        server.write_bytes(z.read(script))
    server.chmod(0o755)
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("wirespeed "), version


def test_the_sdist_builds_and_its_wheel_holds_the_package(tmp_path):
    sdist_dir = tmp_path / "sdist"
    built = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, 'build_backend'); import wirespeed_build as b; "
         f"print(b.build_sdist({str(sdist_dir)!r}))"],
        cwd=ROOT / "python", capture_output=True, text=True, env=pip_env(), timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (sdist,) = sdist_dir.glob("wirespeed-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        assert not any("/scripts/wirespeed" in n for n in names), "a staged binary went into the sdist"
        archive.extractall(tmp_path / "src")
    (source,) = (tmp_path / "src").iterdir()
    wheel = pip_wheel(source, tmp_path / "out", pip_env(CARGO_TARGET_DIR=str(tmp_path / "target")))
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        assert not any(n.endswith("/scripts/wirespeed") for n in z.namelist())
        z.extractall(unpacked)
    # The built extension works: a V2 body decoded into numpy.
    check = subprocess.run(
        [sys.executable, "-c",
         "import wirespeed, sys; r = wirespeed.decode_request("
         "b'{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1.5,2]}]}'); "
         "assert wirespeed.__file__.startswith(sys.argv[1]), wirespeed.__file__; "
         "print(r.inputs['x'].tolist())", str(unpacked)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(unpacked)}, timeout=60,
    )
    assert check.returncode == 0 and check.stdout.strip() == "[1.5, 2.0]", check.stdout + check.stderr
