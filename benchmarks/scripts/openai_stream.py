#!/usr/bin/env python3
"""OpenAI chat streaming: the server's own time per token event.

A decoupled Python model (Triton's Python backend, vLLM's shape:
`text_input` in, `text_output` streamed) answers each chat request with
PIECES pieces of 4 characters, as fast as its worker sends them. The
client reads the server-sent events with `requests`. The server's time
per event is the CPU time of the wirespeed process (all its threads:
receiving each piece from the worker, making the chunk, writing it) over
the events it wrote, from /proc; the worker's own time is its process's,
not counted. Rounds of STREAMS streams; medians.

Usage (from the repository root, after `cargo build --release -p wirespeed`):
  benchmarks/scripts/openai_stream.py [ROUNDS]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import cpu_seconds, free_port, wait_ready

import requests

ROOT = Path(__file__).resolve().parents[2]
W = Path(os.environ.get("W", ROOT / "target" / "release" / "wirespeed"))
PYTHON = os.environ.get("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
PIECES = 2000
STREAMS = 20

CONFIG = """
name: "llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

MODEL = f'''
import numpy as np
import triton_python_backend_utils as pb_utils

PIECE = np.array([b"tok "], dtype=np.object_)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for _ in range({PIECES}):
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", PIECE)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


def stream_once(url):
    body = {"model": "llm", "stream": True, "messages": [{"role": "user", "content": "count"}]}
    events = 0
    started = time.perf_counter()
    first = None
    with requests.post(url, json=body, stream=True, timeout=60) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                events += 1
                if first is None:
                    first = time.perf_counter() - started
    return events, time.perf_counter() - started, first


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = Path(tempfile.mkdtemp(prefix="openai-stream-"))
    model = work / "models" / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    (model / "1" / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    port = free_port()
    server = subprocess.Popen([str(W), "serve", "--models", str(work / "models"), "--http", f"127.0.0.1:{port}",
                               "--grpc", "off", "--log-level", "warn"], env=dict(os.environ, WIRESPEED_PYTHON=PYTHON))
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/models/llm/ready")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        stream_once(url)
        per_event, rates, firsts = [], [], []
        for r in range(rounds):
            before = cpu_seconds(server.pid)
            events = 0
            for _ in range(STREAMS):
                n, seconds, first = stream_once(url)
                events += n
                rates.append(n / seconds)
                firsts.append(first)
            spent = cpu_seconds(server.pid) - before
            per_event.append(spent / events * 1e6)
            print(f"round {r + 1}: {events} events, server CPU {spent * 1e3:.0f} ms, "
                  f"{spent / events * 1e6:.2f} µs an event", flush=True)
        print()
        print(f"server CPU time per token event, p50 of rounds: {statistics.median(per_event):.2f} µs")
        print(f"events a second through the stream, p50: {statistics.median(rates):,.0f}")
        print(f"first event after the request, p50: {statistics.median(firsts) * 1e3:.2f} ms")
    finally:
        server.terminate()
        server.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
