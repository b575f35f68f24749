"""The serving core against the built binary and real clients: a caller
that gives up keeps its model's slot until the compute really ends, and
however many large requests arrive at once, the process never starts a
thread beyond its async workers and its one CPU pool."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from conftest import MODELS, ROOT, RunningServer, proc_status
from test_binary_http import write_repo


def threads_of(pid):
    return proc_status(pid, "Threads")


@pytest.fixture(scope="module")
def slow_one(tmp_path_factory):
    """One slow identity model that computes one request at a time and
    queues none, with the debug log that says when a slot is freed."""
    root = tmp_path_factory.mktemp("slow_one")
    write_repo(root, "slow", [("x", "FP32", "[-1]")])
    config = root / "slow" / "config.toml"
    config.write_text("max_concurrency = 1\nmax_queue = 0\ndelay_ms = 2000\n" + config.read_text())
    running = RunningServer(root, ["--log-level", "debug"])
    yield running
    running.stop()


BODY = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]})


# The slow model awaits (as a model behind another server does): when its
# caller goes, what it awaits is cancelled and its slot comes back at once.
# (A model computing on the CPU pool keeps its slot until it ends: the Rust
# tests in crates/wirespeed-server/tests/it/scheduling.rs show both.)


def test_a_grpc_deadline_cancels_an_awaiting_model_and_frees_its_slot(slow_one):
    x = grpcclient.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.ones(2, dtype=np.float32))
    cancelled = sum("call is cancelled" in line for line in slow_one.log)
    with grpcclient.InferenceServerClient(url=slow_one.grpc_address) as client:
        with pytest.raises(Exception) as gave_up:
            client.infer("slow", [x], client_timeout=0.2)
        assert "DEADLINE_EXCEEDED" in str(gave_up.value.status())
        slow_one.wait_for_log("call is cancelled", count=cancelled + 1)
        assert client.infer("slow", [x]).as_numpy("x_out").tolist() == [1.0, 1.0]


def test_a_rest_client_that_gives_up_cancels_an_awaiting_model_and_frees_its_slot(slow_one):
    url = f"http://{slow_one.address}/v2/models/slow/infer"
    cancelled = sum("call is cancelled" in line for line in slow_one.log)
    with pytest.raises(requests.Timeout):
        requests.post(url, data=BODY, timeout=0.2)
    slow_one.wait_for_log("call is cancelled", count=cancelled + 1)
    ok = requests.post(url, data=BODY, timeout=30)
    assert ok.status_code == 200 and ok.json()["outputs"][0]["data"] == [1.0, 2.0]


def test_many_large_requests_start_no_thread(tmp_path):
    """Large tree batches (split over the pool) and large JSON decodes (on
    the pool, with its threads helping), twenty at once: the thread count
    read from /proc never rises above what the idle server has."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "titanic").symlink_to(MODELS / "titanic")
    (repo / "echo").symlink_to(ROOT / "benchmarks" / "models" / "echo")
    server = RunningServer(repo, ["--compute-threads", "2"])
    try:
        idle = threads_of(server.process.pid)
        rng = np.random.default_rng(7)
        rows = rng.random((8192, 12)).round(4).tolist()
        batch = json.dumps({"inputs": [{"name": "features", "shape": [8192, 12], "datatype": "FP32", "data": rows}],
                            "outputs": [{"name": "probability"}]})
        values = rng.random((1, 200_000)).tolist()
        big = json.dumps({"inputs": [{"name": "x", "shape": [1, 200_000], "datatype": "FP32", "data": values},
                                     {"name": "y", "shape": [1], "datatype": "FP32", "data": [1]}],
                          "outputs": [{"name": "y_out"}]})
        statuses = []
        done = threading.Event()

        def client(path, body):
            with requests.Session() as session:
                for _ in range(3):
                    statuses.append(session.post(f"http://{server.address}{path}", data=body, timeout=120).status_code)

        clients = [threading.Thread(target=client, args=("/v2/models/titanic/infer", batch)) for _ in range(10)]
        clients += [threading.Thread(target=client, args=("/v2/models/echo/infer", big)) for _ in range(10)]
        most = idle

        def sample():
            nonlocal most
            while not done.is_set():
                most = max(most, threads_of(server.process.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        done.set()
        sampler.join()
        assert statuses == [200] * 60
        assert most == idle, f"{idle} threads idle, {most} under load"
        # Idle: the main thread, one async worker per core, the two pool
        # threads, and the one thread that keeps every model's queue.
        assert idle <= 1 + (os.cpu_count() or 1) + 2 + 1, idle
    finally:
        server.stop()
