#!/usr/bin/env python3
"""Batch throughput of the tree runtime against xgboost and lightgbm, in one
run, on the same 1000-tree depth-8 models and the same 100,000 rows (10 %
NaN): xgboost's `inplace_predict` with nthread=1 (and 2), lightgbm's
`predict` with num_threads=1 (and 2), and wirespeed's `predict_parallel`
(`crates/wirespeed-trees/examples/batch.rs`) with 1 and 2 threads. Medians
of 5 passes; each answer is checked against the package's.

    cargo build --release -p wirespeed-trees --example batch
    .venv/bin/python benchmarks/scripts/trees_batch.py

Also reports each loaded model's memory (the process's RSS growth on load)
against its file size.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightgbm as lgb
import numpy as np
import xgboost as xgb

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "target" / "release" / "examples" / "batch"
FEATURES, ROWS, TREES, REPEATS = 20, 100_000, 1000, 5


def median_time(fn):
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2], out


def wirespeed(model, rows_file, threads, tmp):
    out = tmp / "pred.f32"
    result = subprocess.run([str(EXAMPLE), str(model), str(rows_file), str(FEATURES), str(threads), str(REPEATS),
                             str(out)], capture_output=True, text=True, check=True)
    return float(result.stdout), np.fromfile(out, dtype=np.float32)


def peak_rss_growth_kib(model):
    """RSS of a process that loads `model` and predicts one row, less one that only starts."""
    probe = tmp_dir / "one.f32"
    np.zeros(FEATURES, dtype=np.float32).tofile(probe)
    out = subprocess.run(["/usr/bin/time", "-f", "%M", str(EXAMPLE), str(model), str(probe), str(FEATURES), "1", "1",
                          str(tmp_dir / "o.f32")], capture_output=True, text=True)
    return int(out.stderr.strip().splitlines()[-1])


def main():
    if not EXAMPLE.exists():
        sys.exit(f"{EXAMPLE} is missing: cargo build --release -p wirespeed-trees --example batch")
    rng = np.random.default_rng(0)
    train = rng.normal(size=(20_000, FEATURES)).astype(np.float32)
    train[rng.random(train.shape) < 0.1] = np.nan
    y = (np.nan_to_num(train[:, 0]) + np.nan_to_num(train[:, 1]) * np.nan_to_num(train[:, 2])
         + rng.normal(scale=0.5, size=len(train)) > 0).astype(np.float32)
    rows = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.1] = np.nan
    rows_file = tmp_dir / "rows.f32"
    rows.tofile(rows_file)

    print(f"training {TREES}-tree depth-8 models on 20,000 rows x {FEATURES} features ...", file=sys.stderr)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 8, "eta": 0.05, "nthread": 2,
                         "tree_method": "hist", "max_bin": 64}, xgb.DMatrix(train, label=y), TREES)
    xgb_path = tmp_dir / "xgb.json"
    booster.save_model(str(xgb_path))
    lgbm = lgb.train({"objective": "binary", "max_depth": 8, "num_leaves": 255, "learning_rate": 0.05,
                      "num_threads": 2, "verbose": -1, "min_data_in_leaf": 5}, lgb.Dataset(train, label=y), TREES)
    lgb_path = tmp_dir / "lgb.txt"
    lgbm.save_model(str(lgb_path))

    table = []
    for threads in (1, 2):
        booster.set_param({"nthread": threads})
        t_xgb, want_xgb = median_time(lambda: booster.inplace_predict(rows))
        t_ws, got = wirespeed(xgb_path, rows_file, threads, tmp_dir)
        np.testing.assert_allclose(got, want_xgb, rtol=1e-6, atol=0)
        table.append(("XGBoost", threads, t_xgb, t_ws))
        rows64 = rows.astype(np.float64)
        t_lgb, want_lgb = median_time(lambda: lgbm.predict(rows64, num_threads=threads))
        t_ws, got = wirespeed(lgb_path, rows_file, threads, tmp_dir)
        np.testing.assert_allclose(got, want_lgb.astype(np.float32), rtol=1e-6, atol=0)
        table.append(("LightGBM", threads, t_lgb, t_ws))

    print(f"{TREES} trees, depth 8, {ROWS:,} rows x {FEATURES} features (10 % NaN); median of {REPEATS} passes")
    print("| model | threads | package ms | wirespeed ms | wirespeed rows/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, threads, t_pkg, t_ws in table:
        print(f"| {name} | {threads} | {t_pkg * 1e3:.1f} | {t_ws * 1e3:.1f} | {ROWS / t_ws:,.0f} | {t_pkg / t_ws:.2f}x |")
    print()
    print("| model file | file size | loaded (peak RSS of a process that loads it and predicts a row) |")
    print("|---|---:|---:|")
    baseline = None
    for path in (xgb_path, lgb_path):
        rss = peak_rss_growth_kib(path)
        print(f"| {path.name} | {path.stat().st_size / 2**20:.1f} MiB | {rss / 1024:.1f} MiB |")


if __name__ == "__main__":
    tmp_dir = Path(tempfile.mkdtemp())
    main()
