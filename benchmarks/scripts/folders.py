#!/usr/bin/env python3
"""MLServer's and KServe's folders, served by their own servers and by
wirespeed, side by side in one run.

One MLServer repository (a scikit-learn pipeline with mlserver_sklearn, an
XGBoost classifier with mlserver_xgboost, a custom MLModel runtime) served
by `mlserver start` and by `wirespeed serve --models` on the same folder;
one KServe folder (the same pipeline as /mnt/models/model.joblib) served by
KServe's ModelServer running what sklearnserver runs (its package is not
on PyPI: joblib.load and predict through kserve's get_predict_input and
get_predict_response, as sklearnserver/model.py does) and by
`wirespeed serve --model-name`. Every server runs its models' Python in
one worker process (MLServer's default parallel_workers, 1; KServe's one
process; wirespeed's one worker per model, from settings.json).

For each model, interleaved over ROUNDS rounds: one-row p50 (wrk -t1 -c1,
5 s) and throughput (wrk -t1 -c32, 10 s). Prints a table of medians and
the ratios.

Usage (from the repository root, after `cargo build --release -p wirespeed`
and scripts/test's venvs):
  benchmarks/scripts/folders.py [ROUNDS] [--workers N] [--only TEXT]
--workers N sets settings.json's parallel_workers (both servers' Python
worker processes for the MLServer folder; 1, MLServer's default, unless
given); --only measures the cases whose label has TEXT.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness import free_port, wrk

ROOT = Path(__file__).resolve().parents[2]
MLS = ROOT / ".venv-mlserver" / "bin"
KS = ROOT / ".venv" / "bin" / "python"
W = Path(os.environ.get("W", ROOT / "target" / "release" / "wirespeed"))

TRAIN = r'''
import json, os, sys
import numpy as np, joblib
from sklearn.datasets import load_iris
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression
import xgboost as xgb
root = sys.argv[1]
x, y = load_iris(return_X_y=True)
pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
for d in ("mls/pipeline", "mls/xgb", "mls/custom", "kserve"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
joblib.dump(pipe, os.path.join(root, "mls/pipeline/model.joblib"))
joblib.dump(pipe, os.path.join(root, "kserve/model.joblib"))
rng = np.random.default_rng(1)
X = rng.normal(size=(2000, 10)).astype(np.float32)
Y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
xgb.XGBClassifier(n_estimators=100, max_depth=6, n_jobs=1).fit(X, Y).save_model(os.path.join(root, "mls/xgb/model.json"))
'''

CUSTOM = '''
import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Scorer(MLModel):
    async def load(self) -> bool:
        self.weights = np.linspace(-1, 1, 10)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = self.decode(payload.inputs[0], default_codec=NumpyCodec)
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output("score", x @ self.weights)])
'''

# What KServe's sklearnserver runs (sklearnserver/model.py), in a
# ModelServer of kserve's SDK.
SKLEARNSERVER = '''
import sys, joblib
from kserve import Model, ModelServer, model_server
from kserve.utils.utils import get_predict_input, get_predict_response
import argparse


class SKLearnModel(Model):
    def __init__(self, name, path):
        super().__init__(name)
        self._model = joblib.load(path)
        self.ready = True

    def predict(self, payload, headers=None):
        instances = get_predict_input(payload)
        return get_predict_response(payload, self._model.predict(instances), self.name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    parser.add_argument("--model_dir")
    args, _ = parser.parse_known_args()
    ModelServer().start([SKLearnModel(args.model_name, args.model_dir + "/model.joblib")])
'''




def ready(url, process, seconds=120):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if process.poll() is not None:
            sys.exit(f"exited before ready: {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    sys.exit(f"not ready: {url}")




def main():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    rounds = args.rounds
    work = Path(tempfile.mkdtemp(prefix="folders-"))
    subprocess.run([str(MLS / "python"), "-c", TRAIN, str(work)], check=True)
    (work / "mls/custom/models.py").write_text(CUSTOM)
    settings = {
        "pipeline": {"name": "pipeline", "implementation": "mlserver_sklearn.SKLearnModel"},
        "xgb": {"name": "xgb", "implementation": "mlserver_xgboost.XGBoostModel"},
        "custom": {"name": "custom", "implementation": "models.Scorer"},
    }
    for name, s in settings.items():
        (work / "mls" / name / "model-settings.json").write_text(json.dumps(s))
    (work / "sklearnserver.py").write_text(SKLEARNSERVER)
    ports = {k: free_port() for k in ("mls", "mls_grpc", "mls_metrics", "ws", "ks", "ks_grpc", "wsk")}
    (work / "mls" / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": ports["mls"], "grpc_port": ports["mls_grpc"],
        "metrics_port": ports["mls_metrics"], "debug": False, "parallel_workers": args.workers}))
    env = dict(os.environ, OMP_NUM_THREADS="1", WIRESPEED_METRICS="127.0.0.1:0")
    log = open(work / "servers.log", "w")
    processes = []
    try:
        mls = subprocess.Popen([str(MLS / "mlserver"), "start", str(work / "mls")], cwd=work / "mls",
                               env=env, stdout=log, stderr=log)
        ws = subprocess.Popen([str(W), "serve", "--models", str(work / "mls"), "--http", f"127.0.0.1:{ports['ws']}",
                               "--grpc", "off"], env=dict(env, WIRESPEED_PYTHON=str(MLS / "python")),
                              stdout=log, stderr=log)
        ks = subprocess.Popen([str(KS), str(work / "sklearnserver.py"), "--model_name", "iris", "--model_dir",
                               str(work / "kserve"), "--http_port", str(ports["ks"]), "--grpc_port",
                               str(ports["ks_grpc"])], env=env, stdout=log, stderr=log)
        wsk = subprocess.Popen([str(W), "serve", "--models", str(work / "kserve"), "--model-name", "iris",
                                "--http", f"127.0.0.1:{ports['wsk']}", "--grpc", "off"],
                               env=dict(env, WIRESPEED_PYTHON=str(KS)), stdout=log, stderr=log)
        processes = [mls, ws, ks, wsk]
        for name in settings:
            ready(f"http://127.0.0.1:{ports['mls']}/v2/models/{name}/ready", mls)
            ready(f"http://127.0.0.1:{ports['ws']}/v2/models/{name}/ready", ws)
        ready(f"http://127.0.0.1:{ports['ks']}/v2/models/iris/ready", ks)
        ready(f"http://127.0.0.1:{ports['wsk']}/v2/models/iris/ready", wsk)

        def body(name, inputs):
            path = work / f"{name}.json"
            path.write_text(json.dumps(inputs))
            return path

        iris_row = [[5.1, 3.5, 1.4, 0.2]]
        ten = [[0.1 * i for i in range(10)]]
        cases = [
            ("scikit-learn pipeline", "mlserver", "/v2/models/pipeline/infer",
             body("pipeline", {"inputs": [{"name": "predict", "shape": [1, 4], "datatype": "FP32", "data": iris_row}]})),
            ("XGBoost, 100 trees", "mlserver", "/v2/models/xgb/infer",
             body("xgb", {"inputs": [{"name": "predict", "shape": [1, 10], "datatype": "FP32", "data": ten}]})),
            ("custom runtime", "mlserver", "/v2/models/custom/infer",
             body("custom", {"inputs": [{"name": "x", "shape": [1, 10], "datatype": "FP64", "data": ten}]})),
            ("scikit-learn pipeline, KServe v1", "kserve", "/v1/models/iris:predict",
             body("v1", {"instances": iris_row})),
            ("scikit-learn pipeline, KServe v2", "kserve", "/v2/models/iris/infer",
             body("v2", {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": iris_row}]})),
        ]
        cases = [c for c in cases if args.only in c[0]]
        targets = {"mlserver": [("theirs", ports["mls"]), ("wirespeed", ports["ws"])],
                   "kserve": [("theirs", ports["ks"]), ("wirespeed", ports["wsk"])]}
        results = {}
        for r in range(rounds):
            for label, peer, path, request in cases:
                for who, port in targets[peer]:
                    url = f"http://127.0.0.1:{port}"
                    _, p50 = wrk(url, path, request, 1, 5)
                    rps, _ = wrk(url, path, request, 32, 10)
                    results.setdefault((label, who), []).append((p50, rps))
                    print(f"round {r + 1} {label} {who}: p50 {p50:.3f} ms, {rps:.0f} req/s", flush=True)
        print()
        print("| model | peer | peer p50 | wirespeed p50 | p50 ratio | peer req/s | wirespeed req/s | throughput ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for label, peer, _, _ in cases:
            theirs = results[(label, "theirs")]
            ours = results[(label, "wirespeed")]
            tp50 = statistics.median(p for p, _ in theirs)
            op50 = statistics.median(p for p, _ in ours)
            trps = statistics.median(r for _, r in theirs)
            orps = statistics.median(r for _, r in ours)
            name = "MLServer 1.7.1" if peer == "mlserver" else "KServe 0.21 (sklearnserver's code)"
            print(f"| {label} | {name} | {tp50:.2f} ms | {op50:.3f} ms | {op50 / tp50:.3f}x | {trps:,.0f} | "
                  f"{orps:,.0f} | {orps / trps:.1f}x |")
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
