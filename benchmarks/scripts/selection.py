#!/usr/bin/env python3
"""The model selection layer and graphs: what choosing and combining
models adds to a request, in one server, rounds interleaved.

Three copies of the bundled titanic XGBoost model (`t1`, `t2`, `t3`) and,
over them: `pick3`, an Exp3 application (one model a query); `blend3`, an
Exp4 application (all three, outputs averaged); `chain1`, a KServe
InferenceGraph of one Sequence step (`t1`). Each is asked the same V2 row
as `t1` itself: the difference is the layer's cost. p50 from
`wrk -t1 -c1` (5 s), throughput from `wrk -t1 -c16` (10 s).

Usage (from the repository root, after `cargo build --release -p wirespeed`):
  benchmarks/scripts/selection.py [ROUNDS]
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

TENSORS = """
[[inputs]]
name = "features"
datatype = "FP32"
shape = [-1, 12]
[[outputs]]
name = "probability"
datatype = "FP32"
shape = [-1]
"""

GRAPH = """apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: chain1
spec:
  nodes:
    root:
      routerType: Sequence
      steps:
        - serviceName: t1
"""






def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = Path(tempfile.mkdtemp(prefix="selection-"))
    repo = work / "models"
    for name in ("t1", "t2", "t3"):
        shutil.copytree(ROOT / "models" / "titanic", repo / name)
    for name, policy in (("pick3", "exp3"), ("blend3", "exp4")):
        (repo / name).mkdir()
        (repo / name / "config.toml").write_text(
            f'backend = "application"\npolicy = "{policy}"\ncandidates = ["t1", "t2", "t3"]\n{TENSORS}')
    (repo / "chain1").mkdir()
    (repo / "chain1" / "chain1.yaml").write_text(GRAPH)
    body = work / "row.json"
    body.write_text(json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32",
                                            "data": [1, 0, 1, 0.2875, 0.33, 0, 0.32, 0, 1, 0, 0, 0]}]}))
    port = free_port()
    server = subprocess.Popen([str(W), "serve", "--models", str(repo), "--http", f"127.0.0.1:{port}", "--grpc", "off",
                               "--log-level", "warn"])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/v2/health/ready")
        results = {}
        names = ["t1", "pick3", "blend3", "chain1"]
        for r in range(rounds):
            for name in names:
                path = f"/v2/models/{name}/infer"
                _, p50 = wrk(url, path, body, 1, 5)
                rps, _ = wrk(url, path, body, 16, 10)
                results.setdefault(name, []).append((p50, rps))
                print(f"round {r + 1} {name}: p50 {p50:.3f} ms, {rps:,.0f} req/s", flush=True)
        print()
        base_p50 = statistics.median(p for p, _ in results["t1"])
        base_rps = statistics.median(r for _, r in results["t1"])
        print("| asked | p50 | added p50 | req/s at 16 connections | of t1's |")
        print("|---|---|---|---|---|")
        for name in names:
            p50 = statistics.median(p for p, _ in results[name])
            rps = statistics.median(r for _, r in results[name])
            print(f"| {name} | {p50 * 1000:.0f} µs | {(p50 - base_p50) * 1000:+.0f} µs | {rps:,.0f} | "
                  f"{rps / base_rps:.2f}x |")
    finally:
        server.terminate()
        server.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
