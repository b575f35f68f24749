"""Shared fixtures: the built `wirespeed` binary and servers started from it.

Every server binds 127.0.0.1:0 and the fixture reads the real port from the
"listening on" log line, so tests never race for a fixed port.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "titanic"
MODELS = ROOT / "models"
MLSERVER = ROOT / ".venv-mlserver" / "bin" / "mlserver"
SAFETY = 60  # seconds: only against a server that never gets there

# Every server the tests start serves its metrics listener on a free port
# (the default, 127.0.0.1:8002, is one port for all of them).
os.environ.setdefault("WIRESPEED_METRICS", "127.0.0.1:0")


# The free disk beside the clone and under the temporary folder, at the
# start and at its least after any test (a CI machine's disk is shared:
# when a run fails for room, its summary says so).
FREE_DISK = {}
DISKS = (("clone", ROOT), ("temporary folder", Path(tempfile.gettempdir())))


def _free_disk(where):
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def pytest_runtest_logreport(report):
    if report.when != "teardown":
        return
    for name, where in DISKS:
        free = _free_disk(where)
        if free is None:
            continue
        start, least, after = FREE_DISK.get(name, (free, free, report.nodeid))
        FREE_DISK[name] = (start, min(least, free), report.nodeid if free < least else after)


def pytest_sessionstart(session):
    for name, where in DISKS:
        free = _free_disk(where)
        if free is not None:
            FREE_DISK[name] = (free, free, "the start")


def pytest_terminal_summary(terminalreporter):
    for name, (start, least, after) in FREE_DISK.items():
        terminalreporter.write_line(
            f"free disk ({name}): {start / 2**30:.1f} GiB at the start, "
            f"{least / 2**30:.1f} GiB at the least (after {after})")


def wirespeed_binary() -> Path:
    path = Path(os.environ.get("WIRESPEED_BIN", ROOT / "target" / "debug" / "wirespeed"))
    if not path.is_file():
        pytest.fail(f"{path} does not exist: build it with `cargo build -p wirespeed` or set WIRESPEED_BIN")
    return path


def proc_status(pid, key):
    """A number from /proc/PID/status: `VmRSS` (KiB), `Threads`, ..."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def identity_config(keys="", tables=""):
    """The `config.toml` of an identity model, one computed at a time, with
    FP32 `x` of shape [-1, 4] echoed as `y`: `keys` go before the tensors
    (`delay_ms = 10`), `tables` after them (`[batching]`...)."""
    return f"""backend = "identity"
max_concurrency = 1
{keys}
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1, 4]

[[outputs]]
name = "y"
datatype = "FP32"
shape = [-1, 4]
{tables}
"""


def stop_process(process, grace):
    """Ends `process`: asked to (SIGTERM), then killed past `grace` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_wirespeed(*args, timeout=60, env=None):
    return subprocess.run([str(wirespeed_binary()), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def steady_load(server, report, seconds, rate=200, model=None):
    """`wirespeed bench` at `rate` requests/s (open loop, 8 connections)
    for one window of `seconds` against `server`, in the background; its
    summary from `load_summary`."""
    return subprocess.Popen([str(wirespeed_binary()), "bench", f"http://{server.address}",
                             *(["--model", model] if model else []), "--rate", str(rate), "-c", "8",
                             "--warmup", "0", "--window", str(seconds), "--min-windows", "1",
                             "--max-windows", "1", "--json", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def load_summary(load, report):
    """The summary of a `steady_load` once it ends."""
    _, stderr = load.communicate(timeout=120)
    assert load.returncode == 0, stderr
    return json.loads(report.read_text())["measurements"][0]["summary"]


class RunningServer:
    """A `wirespeed serve` process and the log lines it has written."""

    def __init__(self, models: Path, extra_args=(), http="127.0.0.1:0", grpc="127.0.0.1:0", env=None):
        self.log = []
        self.process = subprocess.Popen(
            [str(wirespeed_binary()), "serve", "--models", str(models), "--http", http, "--grpc", grpc, *extra_args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        found = threading.Event()
        self.port = None
        self.grpc_port = None
        self.metrics_port = None

        self.logged = threading.Condition()

        def drain():
            for line in self.process.stderr:
                with self.logged:
                    self.log.append(line)
                    self.logged.notify_all()
                match = re.search(r"listening on metrics https?://127\.0\.0\.1:(\d+)", line)
                if match:
                    self.metrics_port = int(match.group(1))
                match = re.search(r"listening on grpcs?://127\.0\.0\.1:(\d+)", line)
                if match:
                    self.grpc_port = int(match.group(1))
                match = re.search(r"listening on https?://127\.0\.0\.1:(\d+)", line)
                if match:
                    self.port = int(match.group(1))
                if (self.port or http == "off") and (self.grpc_port or grpc == "off"):
                    found.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 30
        while not found.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("wirespeed serve did not start:\n" + "".join(self.log))

    def wait_for_log(self, text, count=1, timeout=30):
        """Waits until `count` log lines contain `text`; the timeout is only
        a safety net against a server that never writes it."""
        deadline = time.monotonic() + timeout
        with self.logged:
            while sum(text in line for line in self.log) < count:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise AssertionError(f"no {count} log lines with {text!r}:\n" + "".join(self.log[-40:]))
                self.logged.wait(left)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        stop_process(self.process, grace=15)


@pytest.fixture(scope="session")
def demo_server():
    """`wirespeed serve` on the bundled model repository."""
    server = RunningServer(MODELS)
    yield server
    server.stop()
    assert server.process.returncode == 0, "".join(server.log)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, done, timeout=SAFETY):
    """Polls `done` until it holds: the event is a readiness flip or a file
    line, which no signal announces; the timeout is a safety net only."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited for {what}")
        time.sleep(0.02)


def running_requests(server, model):
    """The requests of `model` holding a compute slot on wirespeed
    `server` (for a Python model, also those its worker's keeper holds),
    read from its metrics."""
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("wirespeed_inference_running_requests{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def http_ok(url):
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


# The peers, started once per test run: KServe and MLServer serving an
# XGBoost model (and KServe its echo models, tests/upstream/kserve_models.py).


@pytest.fixture(scope="session")
def xgb_model(tmp_path_factory):
    """An XGBoost classifier over 10 features, and rows to ask it about."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2000, 10)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int)
    import xgboost

    model = xgboost.XGBClassifier(n_estimators=20, max_depth=4, n_jobs=1)
    model.fit(x, y)
    path = tmp_path_factory.mktemp("xgb") / "model.json"
    model.save_model(path)
    return path, model, x[:64]


@pytest.fixture(scope="session")
def kserve(xgb_model, tmp_path_factory):
    """KServe's ModelServer with tests/upstream/kserve_models.py."""
    http, grpc = free_port(), free_port()
    cancels = tmp_path_factory.mktemp("kserve") / "cancelled.log"
    cancels.write_text("")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "upstream" / "kserve_models.py"), str(xgb_model[0]), str(cancels),
         "--http_port", str(http), "--grpc_port", str(grpc)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_until("KServe ready", lambda: process.poll() is None and http_ok(f"http://127.0.0.1:{http}/v2/health/ready"))
    yield {"http": http, "grpc": grpc, "cancels": cancels}
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture(scope="session")
def mlserver(xgb_model, tmp_path_factory):
    """MLServer serving the XGBoost model with mlserver-xgboost."""
    if not MLSERVER.exists():
        pytest.fail(f"{MLSERVER} is missing: scripts/test installs MLServer into .venv-mlserver")
    repo = tmp_path_factory.mktemp("mlserver")
    http, grpc, metrics = free_port(), free_port(), free_port()
    (repo / "settings.json").write_text(
        f'{{"host": "127.0.0.1", "http_port": {http}, "grpc_port": {grpc}, "metrics_port": {metrics},'
        f' "parallel_workers": 0, "debug": false}}'
    )
    (repo / "xgb").mkdir()
    (repo / "xgb" / "model.json").write_bytes(Path(xgb_model[0]).read_bytes())
    (repo / "xgb" / "model-settings.json").write_text(
        '{"name": "xgb", "implementation": "mlserver_xgboost.XGBoostModel", "parameters": {"uri": "./model.json"}}'
    )
    process = subprocess.Popen(
        [str(MLSERVER), "start", str(repo)], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_until(
        "MLServer ready",
        lambda: process.poll() is None and http_ok(f"http://127.0.0.1:{http}/v2/models/xgb/ready"),
    )
    yield {"http": http, "grpc": grpc, "repo": repo}
    process.terminate()
    process.wait(timeout=15)
