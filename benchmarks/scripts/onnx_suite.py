"""The ONNX backend test suite, whole: wirespeed (its default engine,
`auto`: tract, else ONNX Runtime) and onnxruntime side by side, under the
rules of tests/onnx_suite.py. Prints the counts, then every case where
wirespeed answers wrongly, and what it refuses that onnxruntime serves.

Usage (from the repository root, after `cargo build --release -p wirespeed`):
    .venv/bin/python benchmarks/scripts/onnx_suite.py [--engine auto|tract] [--only NAME_SUBSTRING]
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import onnx_suite  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wirespeed", default=os.environ.get("WIRESPEED", str(ROOT / "target/release/wirespeed")))
    parser.add_argument("--engine", default="auto", choices=["auto", "tract"])
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    cases = [c for c in onnx_suite.node_cases() + onnx_suite.shipped_cases() if args.only in c.name]
    print(f"{len(cases)} cases whose tensors V2 carries")
    ort = onnx_suite.run_onnxruntime(cases)
    root = Path(tempfile.mkdtemp())
    onnx_suite.write_repository(cases, root)
    if args.engine == "tract":
        for case in cases:
            (root / case.name / "config.toml").write_text('backend = "onnx"\nengine = "tract"\n')
    log = open(root / "server.log", "w")
    server = subprocess.Popen(
        [args.wirespeed, "serve", "--models", str(root), "--model-control-mode", "explicit",
         "--http", "127.0.0.1:9770", "--grpc", "off", "--metrics", "off"],
        stderr=log, env=onnx_suite.environment())
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get("http://127.0.0.1:9770/v2/health/live", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the server did not start")
            time.sleep(0.1)
        started = time.monotonic()
        ws = onnx_suite.run_wirespeed(cases, "127.0.0.1:9770")
        took = time.monotonic() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"{'':12} {'correct':>8} {'refused':>8} {'error':>8} {'wrong':>8}")
    for label, tally in [("wirespeed", ws), ("onnxruntime", ort)]:
        print(f"{label:12} " + " ".join(f"{tally.count(o):8d}" for o in ("correct", "refused", "error", "wrong")))
    print(f"(wirespeed's run took {took:.0f} s)")
    print(f"ratio of onnxruntime's correct: {ws.count('correct') / max(1, ort.count('correct')):.3f}")
    wrong = [n for n, (o, _) in ws.outcomes.items() if o == "wrong"]
    print(f"\nwrong ({len(wrong)}): " + " ".join(wrong))
    missing = [(n, d) for n, (o, d) in ws.outcomes.items() if o != "correct" and ort.outcomes[n][0] == "correct"]
    print(f"\nnot served, and onnxruntime serves ({len(missing)}):")
    reasons = collections.Counter()
    for name, detail in missing:
        short = re.sub(r"\s+", " ", detail)[:160]
        reasons[re.sub(r"test_\w+", "", short)[:90]] += 1
        print(f"  {name}: {short}")
    print("\nby reason:")
    for reason, n in reasons.most_common(30):
        print(f"  {n:4d}  {reason}")


if __name__ == "__main__":
    main()
