"""The per-response cost of a decoupled stream: one request answered with
10,000 small responses (one INT64 each), read to its end through gRPC
`ModelStreamInfer` (tritonclient.grpc's stream) and through
`generate_stream` (server-sent events, read in large chunks), against the
same stream from MLServer 1.7 (`predict_stream`, its `infer_stream`
server-sent events), the one peer here with a streaming Python API.

For each run it records the wall time of the stream at the client and the
CPU time each process spent on it (from /proc: the server's own, and
wirespeed's Python worker's apart, since MLServer runs its model in its
own process). Rounds are interleaved; the medians per response are
printed side by side.

Usage (from the repository root, after `cargo build --release -p
wirespeed`; the MLServer venv of `tests`' fixtures, `.venv-mlserver`):
    .venv/bin/python benchmarks/scripts/stream.py [--responses 10000] [--rounds 5]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient

from harness import ROOT, cpu_seconds, free_port, tree


CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            for i in range(count):
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("VALUE", np.array([i], np.int64))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

MLSERVER_MODEL = '''
import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceResponse


class Counter(MLModel):
    async def load(self):
        return True

    async def predict_stream(self, payloads):
        request = await payloads.__anext__()
        count = int(NumpyCodec.decode_input(request.inputs[0]).reshape(-1)[0])
        for i in range(count):
            yield InferenceResponse(
                model_name=self.name,
                outputs=[NumpyCodec.encode_output("VALUE", np.array([i], np.int64))],
            )
'''


def wait_ready(url, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{url}: the server exited")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    sys.exit(f"{url}: not ready")


def grpc_stream(address, count):
    done = []
    import threading

    finished = threading.Event()

    def callback(result, error):
        if error:
            done.append(error)
            finished.set()
            return
        done.append(1)
        if len(done) == count:
            finished.set()

    client = grpcclient.InferenceServerClient(url=address)
    client.start_stream(callback=callback)
    inputs = [grpcclient.InferInput("COUNT", [1], "INT64")]
    inputs[0].set_data_from_numpy(np.array([count], np.int64))
    started = time.perf_counter()
    client.async_stream_infer("counter", inputs)
    finished.wait(300)
    took = time.perf_counter() - started
    client.stop_stream()
    client.close()
    assert len(done) == count and all(d == 1 for d in done), done[-1]
    return took


def sse_stream(url, body, count):
    started = time.perf_counter()
    events = 0
    tail = b""
    with requests.post(url, json=body, stream=True, timeout=300) as answer:
        answer.raise_for_status()
        for chunk in answer.iter_content(chunk_size=1 << 16):
            data = tail + chunk
            events += data.count(b"data: ")
            tail = data[-5:]
            events -= tail.count(b"data: ")
    took = time.perf_counter() - started
    assert events == count, (events, count)
    return took


def measure(run, pids):
    before = [cpu_seconds(p) for p in pids]
    took = run()
    after = [cpu_seconds(p) for p in pids]
    return took, [a - b for a, b in zip(after, before)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--responses", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wirespeed", default=os.environ.get("WIRESPEED", str(ROOT / "target/release/wirespeed")))
    parser.add_argument("--mlserver", default=str(ROOT / ".venv-mlserver/bin/mlserver"))
    args = parser.parse_args()
    n = args.responses
    work = Path(tempfile.mkdtemp())
    (work / "ws" / "counter" / "1").mkdir(parents=True)
    (work / "ws" / "counter" / "config.pbtxt").write_text(CONFIG)
    (work / "ws" / "counter" / "1" / "model.py").write_text(MODEL)
    http, grpc = free_port(), free_port()
    env = dict(os.environ, WIRESPEED_PYTHON=os.environ.get("WIRESPEED_PYTHON", str(ROOT / ".venv/bin/python")))
    log = open(work / "ws.log", "w+")
    ws = subprocess.Popen([args.wirespeed, "serve", "--models", work / "ws", "--http", f"127.0.0.1:{http}",
                           "--grpc", f"127.0.0.1:{grpc}", "--metrics", "off"], stderr=log, env=env)
    processes = [ws]
    wait_ready(f"http://127.0.0.1:{http}/v2/models/counter/ready", ws)
    worker = int(re.search(r"python worker ready .*pid=(\d+)", (work / "ws.log").read_text()).group(1))

    mls = None
    if Path(args.mlserver).exists():
        folder = work / "mls" / "counter"
        folder.mkdir(parents=True)
        (folder / "models.py").write_text(MLSERVER_MODEL)
        (folder / "model-settings.json").write_text(json.dumps({"name": "counter", "implementation": "models.Counter"}))
        mls_http = free_port()
        (work / "mls" / "settings.json").write_text(json.dumps({
            "http_port": mls_http, "grpc_port": free_port(), "metrics_port": free_port(),
            "parallel_workers": 0, "metrics_endpoint": None}))
        mls = subprocess.Popen([args.mlserver, "start", str(work / "mls")], cwd=folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(mls)
        wait_ready(f"http://127.0.0.1:{mls_http}/v2/models/counter/ready", mls)
    try:
        results = {"grpc": [], "sse": [], "mlserver": []}
        v2 = {"inputs": [{"name": "COUNT", "datatype": "INT64", "shape": [1], "data": [n]}]}
        for _ in range(args.rounds):
            took, (server, python) = measure(lambda: grpc_stream(f"127.0.0.1:{grpc}", n), [ws.pid, worker])
            results["grpc"].append((took, server, python))
            took, (server, python) = measure(
                lambda: sse_stream(f"http://127.0.0.1:{http}/v2/models/counter/generate_stream", {"COUNT": n}, n),
                [ws.pid, worker])
            results["sse"].append((took, server, python))
            if mls:
                pids = tree(mls.pid)
                took, cpus = measure(
                    lambda: sse_stream(f"http://127.0.0.1:{mls_http}/v2/models/counter/infer_stream", v2, n), pids)
                results["mlserver"].append((took, sum(cpus), 0.0))
        us = lambda seconds: seconds / n * 1e6  # noqa: E731
        print(f"{n} responses per stream, {args.rounds} rounds, medians per response (us)")
        print(f"{'':34} {'wall':>8} {'server CPU':>11} {'model CPU':>10}")
        rows = [("wirespeed gRPC ModelStreamInfer", "grpc"), ("wirespeed generate_stream (SSE)", "sse"),
                ("MLServer 1.7 infer_stream (SSE)", "mlserver")]
        for label, key in rows:
            if not results[key]:
                continue
            wall, server, python = (statistics.median(r[i] for r in results[key]) for i in range(3))
            model = f"{us(python):10.1f}" if key != "mlserver" else f"{'(in it)':>10}"
            print(f"{label:34} {us(wall):8.1f} {us(server):11.2f} {model}")
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            p.wait(timeout=20)


if __name__ == "__main__":
    main()
