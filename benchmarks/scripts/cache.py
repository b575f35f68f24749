#!/usr/bin/env python3
"""The response cache: a hit against the same request computed, for a tree
model (the bundled titanic XGBoost model) and a Python model (a numpy
scorer in a worker), in one server, rounds interleaved.

Each model is served twice from the same files, once with
`response_cache = true`; wrk sends one request over and over, so every
request to a cached model after the first is a hit. p50 from
`wrk -t1 -c1` (5 s), throughput from `wrk -t1 -c16` (10 s).

Usage (from the repository root, after `cargo build --release -p wirespeed`):
  benchmarks/scripts/cache.py [ROUNDS]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import free_port, wrk, wait_ready

ROOT = Path(__file__).resolve().parents[2]
W = Path(os.environ.get("W", ROOT / "target" / "release" / "wirespeed"))
PYTHON = os.environ.get("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

SCORER = """
import numpy as np


class Model:
    def load(self, config):
        self.weights = np.linspace(-1, 1, 12, dtype=np.float32)

    def predict(self, inputs, parameters):
        return {"score": inputs["features"] @ self.weights}
"""

SCORER_CONFIG = """backend = "python"
[[inputs]]
name = "features"
datatype = "FP32"
shape = [-1, 12]
[[outputs]]
name = "score"
datatype = "FP32"
shape = [-1]
"""






def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = Path(tempfile.mkdtemp(prefix="cache-"))
    repo = work / "models"
    for name, cached in (("tree", False), ("tree_cached", True)):
        shutil.copytree(ROOT / "models" / "titanic", repo / name)
        if cached:
            config = repo / name / "config.toml"
            config.write_text("response_cache = true\n" + config.read_text())
    for name, cached in (("python", False), ("python_cached", True)):
        (repo / name).mkdir(parents=True)
        (repo / name / "model.py").write_text(SCORER)
        (repo / name / "config.toml").write_text(
            ("response_cache = true\n" if cached else "") + SCORER_CONFIG)
    body = work / "row.json"
    body.write_text(json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32",
                                            "data": [1, 0, 1, 0.2875, 0.33, 0, 0.32, 0, 1, 0, 0, 0]}]}))
    port = free_port()
    server = subprocess.Popen([str(W), "serve", "--models", str(repo), "--http", f"127.0.0.1:{port}", "--grpc", "off",
                               "--cache-config", "local,size=1048576", "--log-level", "warn"],
                              env=dict(os.environ, WIRESPEED_PYTHON=PYTHON, WIRESPEED_METRICS="127.0.0.1:0"))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/v2/models/python_cached/ready")
        results = {}
        names = ["tree", "tree_cached", "python", "python_cached"]
        for r in range(rounds):
            for name in names:
                path = f"/v2/models/{name}/infer"
                _, p50 = wrk(url, path, body, 1, 5)
                rps, _ = wrk(url, path, body, 16, 10)
                results.setdefault(name, []).append((p50, rps))
                print(f"round {r + 1} {name}: p50 {p50:.3f} ms, {rps:,.0f} req/s", flush=True)
        print()
        print("| model | computed p50 | cache hit p50 | computed req/s | cache hit req/s |")
        print("|---|---|---|---|---|")
        for model in ("tree", "python"):
            computed, hit = results[model], results[f"{model}_cached"]
            print(f"| {model} | {statistics.median(p for p, _ in computed):.3f} ms | "
                  f"{statistics.median(p for p, _ in hit):.3f} ms | "
                  f"{statistics.median(r for _, r in computed):,.0f} | {statistics.median(r for _, r in hit):,.0f} |")
    finally:
        server.terminate()
        server.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
