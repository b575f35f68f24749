#!/usr/bin/env python3
"""ONNX models in-process: wirespeed's `onnx` backend (tract, with tree
ensembles on wirespeed-trees), through
`crates/wirespeed-models/examples/onnx_infer.rs`, against
onnxruntime's InferenceSession with one intra-op thread and with its
default threads, on the same files and rows, in one run. The models are
the three of tests/test_onnx.py (an MLP, a small CNN, a transformer
block) and the tabular ones of tests/test_onnx_ml.py (a random forest of
100 trees, XGBoost with 100 trees, LightGBM, gradient boosting, a
StandardScaler + LogisticRegression pipeline), at batch 1 and 64. Five
rounds alternate the engines; each figure is the median over the rounds of
the median per call, every output asked for; each engine's answer is
checked against onnxruntime's.

    cargo build --release -p wirespeed-models --example onnx_infer --features onnxruntime
    .venv/bin/python benchmarks/scripts/onnx_inprocess.py

(without `--features onnxruntime`, the engine's column is empty).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import test_onnx  # noqa: E402  (the models the tests build)
import test_onnx_ml  # noqa: E402

EXAMPLE = ROOT / "target" / "release" / "examples" / "onnx_infer"
LIBRARY = str(next((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so*")))


ROUNDS = 5


def calls_for(rows):
    return 1000 if rows == 1 else 200


def ort_median(session, feed, calls):
    session.run(None, feed)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def models():
    """name -> (ONNX model, input name, one row's shape)."""
    chosen = {name: (make(), input_name, shape) for name, (make, input_name, shape, _) in test_onnx.MODELS.items()}
    for name in ["forest", "xgboost", "lightgbm", "boosting", "pipeline"]:
        model = test_onnx_ml.CONVERTED[name]
        chosen[name] = (model, model.graph.input[0].name, (test_onnx_ml.FEATURES,))
    return chosen


def example(folder, tmp, x, threads, want):
    """The example's median seconds a call on `folder` (NaN when it was
    built without the onnxruntime feature and the folder asks for it),
    its answer checked against `want`."""
    out = subprocess.run([str(EXAMPLE), str(folder), str(tmp / "in.bin"), ",".join(map(str, x.shape)),
                          str(calls_for(len(x))), str(tmp / "out.bin"), str(threads)],
                         capture_output=True, text=True, env={**os.environ, "ORT_DYLIB_PATH": LIBRARY})
    if out.returncode != 0 and "built without it" in out.stderr:
        return float("nan")
    out.check_returncode()
    got = np.frombuffer((tmp / "out.bin").read_bytes(), dtype=np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return float(out.stdout.strip())


def first_float(outputs):
    return next(o for o in outputs if o.dtype == np.float32)


def main():
    if not EXAMPLE.exists():
        sys.exit(f"build it first: cargo build --release -p wirespeed-models --example onnx_infer ({EXAMPLE})")
    rng = np.random.default_rng(1)
    rows_out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, (model, input_name, shape) in models().items():
            folder = tmp / name
            folder.mkdir()
            onnx.save(model, folder / "model.onnx")
            (folder / "config.toml").write_text('backend = "onnx"\n')
            # The same file on wirespeed's onnxruntime engine (one session).
            on_ort = tmp / f"{name}_ort"
            on_ort.mkdir()
            onnx.save(model, on_ort / "model.onnx")
            (on_ort / "config.toml").write_text('backend = "onnx"\nengine = "onnxruntime"\ninstances = 1\n')
            one = onnxruntime.SessionOptions()
            one.intra_op_num_threads = 1
            sessions = {
                "ort 1 thread": onnxruntime.InferenceSession(str(folder / "model.onnx"), one,
                                                             providers=["CPUExecutionProvider"]),
                "ort default": onnxruntime.InferenceSession(str(folder / "model.onnx"),
                                                            providers=["CPUExecutionProvider"]),
            }
            for rows in (1, 64):
                x = rng.standard_normal((rows, *shape)).astype(np.float32)
                feed = {input_name: x}
                want = first_float(sessions["ort 1 thread"].run(None, feed))
                (tmp / "in.bin").write_bytes(x.tobytes())
                # Rounds that alternate the engines, so that a noisy
                # moment of the machine falls on all of them; the median
                # of each engine's round medians.
                times = {label: [] for label in ["ws1", "ws2", "engine", "ort1", "ortd"]}
                for _ in range(ROUNDS):
                    for label, where, threads in [("ws1", folder, 1), ("ws2", folder, 2), ("engine", on_ort, 1)]:
                        times[label].append(example(where, tmp, x, threads, want))
                    times["ort1"].append(ort_median(sessions["ort 1 thread"], feed, calls_for(rows)))
                    times["ortd"].append(ort_median(sessions["ort default"], feed, calls_for(rows)))
                m = {label: float(np.median(t)) for label, t in times.items()}
                rows_out.append((name, rows, m["ws1"], m["ws2"], m["engine"], m["ort1"], m["ortd"]))

    print(f"{'model':<9} {'batch':>5} {'ws 1 thread':>12} {'ws 2 threads':>13} {'ws onnxruntime':>15} "
          f"{'ORT 1 thread':>13} {'ORT default':>12} {'ORT-1 / ws-1':>13} {'ORT-default / ws-2':>19}")
    for name, rows, ws1, ws2, engine, ort1, ortd in rows_out:
        print(f"{name:<9} {rows:>5} {ws1 * 1e6:>10.1f}µs {ws2 * 1e6:>11.1f}µs {engine * 1e6:>13.1f}µs "
              f"{ort1 * 1e6:>11.1f}µs {ortd * 1e6:>10.1f}µs {ort1 / ws1:>12.2f}x {ortd / ws2:>18.2f}x")
    print("(ratios above 1: wirespeed is faster; the tree models run on wirespeed-trees and split a batch over "
          "the pool's threads, the rest run on tract; ws onnxruntime: the same file on wirespeed's onnxruntime "
          "engine, from Rust; ORT: onnxruntime's InferenceSession from Python, its default threads 2 here)")


if __name__ == "__main__":
    main()
