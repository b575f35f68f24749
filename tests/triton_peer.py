"""The real Triton, for differential tests: Triton 2.51, the `tritonserver`
that the `nvidia-pytriton` wheel carries (the Python backend and ensembles,
on the CPU), installed by scripts/test into .venv-triton.

`TritonServer(repo)` starts it on loopback ports of its own, on the same
model folder a `RunningServer` (conftest.py) serves, so a test sends the
same request to both through the same client and compares the answers.
"""

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, RunningServer, free_port, http_ok, stop_process, wait_until

VENV = ROOT / ".venv-triton"


def triton_home() -> Path:
    """The wheel's `tritonserver` folder, made ready to run Python models:
    Triton looks for the Python backend's stub beside the backend, and the
    wheel keeps one stub per Python version elsewhere (pytriton copies it
    at start; so does this)."""
    found = sorted(VENV.glob("lib/python3*/site-packages/pytriton/tritonserver"))
    if not found:
        pytest.fail(f"{VENV} has no nvidia-pytriton: scripts/test installs it (pip install nvidia-pytriton==0.7.0)")
    home = found[0]
    python = home.parent.parent.parent.name.removeprefix("python")
    stub = home / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        stub.write_bytes((home / "python_backend_stubs" / python / "triton_python_backend_stub").read_bytes())
        stub.chmod(0o755)
    return home


class TritonServer:
    """`tritonserver` on `repo`, its log in `log` (a file), with `args`
    (Triton's own flags) besides; waited for until its `until` health
    endpoint answers (`ready`, or `live` where a model may fail)."""

    def __init__(self, repo: Path, log: Path, args=(), until="ready", env=None):
        home = triton_home()
        self.http_port, self.grpc_port = free_port(), free_port()
        env = {
            **(os.environ if env is None else env),
            # The wheel's own libraries; the venv's Python first on PATH,
            # where the Python backend's stub finds numpy.
            "LD_LIBRARY_PATH": str(home.parent.parent / "nvidia_pytriton.libs"),
            "PATH": f"{VENV / 'bin'}:{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1",
        }
        self.log = log
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                [str(home / "bin" / "tritonserver"), f"--model-repository={repo}",
                 f"--backend-directory={home / 'backends'}", "--http-address=127.0.0.1",
                 "--grpc-address=127.0.0.1", f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
                 "--allow-metrics=false", "--log-verbose=0", *args],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        try:
            def ready():
                if self.process.poll() is not None:
                    raise AssertionError("Triton exited")
                return http_ok(f"http://{self.address}/v2/health/{until}")

            wait_until(f"Triton {until}", ready, timeout=120)
        except AssertionError:
            self.stop()
            raise AssertionError("Triton did not start:\n" + log.read_text()[-4000:])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        stop_process(self.process, grace=30)


@contextlib.contextmanager
def side_by_side(repo: Path, log: Path, triton_args=(), wirespeed_args=()):
    """Triton and wirespeed both serving `repo`, by name, each with its own
    flags besides; Triton is not left running when wirespeed does not
    start."""
    triton = TritonServer(repo, log, args=triton_args)
    try:
        wirespeed = RunningServer(repo, extra_args=wirespeed_args)
    except BaseException:
        triton.stop()
        raise
    try:
        yield {"triton": triton, "wirespeed": wirespeed}
    finally:
        wirespeed.stop()
        triton.stop()
