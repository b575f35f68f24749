"""KServe's model folders (`/mnt/models` as its ServingRuntimes load them),
served by `wirespeed serve --models DIR --model-name NAME` unchanged, and
called with kserve's own SDK (InferenceRESTClient v1 and v2,
InferenceGRPCClient): the answers are those of KServe's runtimes on the
same files, computed by the frameworks themselves through kserve's own
get_predict_input and get_predict_response (kserve_folder_calls.py); a
custom `kserve.Model` answers as it does under KServe's own ModelServer.

The models are KServe's samples (docs/samples/v1beta1: sklearn's iris SVC,
xgboost's and lightgbm's iris boosters), trained here the same way by the
Python kserve runs in, which wirespeed's workers run too.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, RunningServer, free_port, http_ok, wait_until

CALLS = ROOT / "tests" / "kserve_folder_calls.py"

TRAIN = r'''
import sys, os
import joblib
import numpy as np
from sklearn import datasets, svm
import xgboost as xgb
import lightgbm as lgb

root = sys.argv[1]
iris = datasets.load_iris()
X, y = iris.data, iris.target
for name in ("sklearn", "xgboost", "lightgbm"):
    os.makedirs(os.path.join(root, name), exist_ok=True)
# docs/samples/v1beta1/sklearn: an SVC, dumped as model.joblib.
clf = svm.SVC(gamma="scale", probability=True)
clf.fit(X, y)
joblib.dump(clf, os.path.join(root, "sklearn", "model.joblib"))
# docs/samples/v1beta1/xgboost: a booster on iris, saved as model.bst.
booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "nthread": 1},
                    xgb.DMatrix(X, label=y), 20)
booster.save_model(os.path.join(root, "xgboost", "model.bst"))
# docs/samples/v1beta1/lightgbm: a booster on iris, saved as model.bst.
model = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1}, lgb.Dataset(X, label=y), 20)
model.save_model(os.path.join(root, "lightgbm", "model.bst"))
'''

# A custom predictor written as KServe's docs write one: preprocess,
# predict and postprocess on the V2 InferRequest, and its own main.
CUSTOM = '''
import argparse
from typing import Dict

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, model_server


class Scorer(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = False
        self.load()

    def load(self):
        self.weights = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
        self.ready = True

    def preprocess(self, payload: InferRequest, headers: Dict[str, str] = None) -> np.ndarray:
        return payload.inputs[0].as_numpy().astype(np.float32)

    def predict(self, rows: np.ndarray, headers: Dict[str, str] = None) -> np.ndarray:
        return rows @ self.weights

    def postprocess(self, scores: np.ndarray, headers: Dict[str, str] = None) -> InferResponse:
        out = InferOutput(name="score", shape=list(scores.shape), datatype="FP32")
        out.set_data_from_numpy(scores, binary_data=False)
        rank = InferOutput(name="positive", shape=list(scores.shape), datatype="BOOL")
        rank.set_data_from_numpy(scores > 0, binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out, rank], response_id="r")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    ModelServer().start([Scorer(args.model_name)])
'''

# KServe's v1 custom predictor, as its docs write it: predict takes the
# request's dict and answers a dict.
CUSTOM_V1 = '''
from typing import Dict

import kserve
from kserve import Model, ModelServer, model_server


class Summer(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = False

    def load(self):
        self.ready = True

    def predict(self, payload: Dict, headers: Dict[str, str] = None) -> Dict:
        instances = payload["instances"]
        return {"predictions": [{"sum": sum(row), "first": row[0]} for row in instances]}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    model = Summer(args.model_name)
    model.load()
    ModelServer().start([model])
'''

ROWS = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6], [5.1, 3.5, 1.4, 0.2]]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("kserve-samples")
    subprocess.run([sys.executable, "-c", TRAIN, str(root)], check=True, capture_output=True, timeout=300)
    (root / "custom").mkdir()
    (root / "custom" / "model.py").write_text(CUSTOM)
    (root / "custom-v1").mkdir()
    (root / "custom-v1" / "model.py").write_text(CUSTOM_V1)
    # KServe's samples keep a request's example beside the model; its
    # runtimes look only at their model files, and so must wirespeed.
    for name in ("sklearn", "lightgbm"):
        (root / name / "iris-input.json").write_text('{"instances": [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]}')
    return root


@pytest.fixture(scope="module")
def servers(folders):
    """wirespeed on each folder as /mnt/models, named as KServe names it;
    its workers on the Python kserve runs in."""
    saved = os.environ.get("WIRESPEED_PYTHON")
    os.environ["WIRESPEED_PYTHON"] = sys.executable
    started = {}
    try:
        for name in ("sklearn", "xgboost", "lightgbm", "custom", "custom-v1"):
            started[name] = RunningServer(folders / name, ["--model-name", f"{name}-iris"])
        os.environ["PREDICT_PROBA"] = "true"
        started["sklearn-proba"] = RunningServer(folders / "sklearn", ["--model-name", "sklearn-iris"])
    finally:
        os.environ.pop("PREDICT_PROBA", None)
        if saved is None:
            del os.environ["WIRESPEED_PYTHON"]
        else:
            os.environ["WIRESPEED_PYTHON"] = saved
    yield started
    for server in started.values():
        server.stop()


def run(*args, env=None):
    out = subprocess.run([sys.executable, str(CALLS), *map(str, args)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def same(ours, theirs):
    if "predictions" in theirs:
        np.testing.assert_allclose(np.array(ours["predictions"], dtype=float),
                                   np.array(theirs["predictions"], dtype=float), rtol=1e-5, atol=1e-6)
        return
    assert [(o["name"], o["datatype"], o["shape"]) for o in ours["outputs"]] == \
        [(o["name"], o["datatype"], o["shape"]) for o in theirs["outputs"]], (ours, theirs)
    for a, b in zip(ours["outputs"], theirs["outputs"]):
        np.testing.assert_allclose(np.array(a["data"], dtype=float), np.array(b["data"], dtype=float),
                                   rtol=1e-5, atol=1e-6)


FILES = {"sklearn": "model.joblib", "xgboost": "model.bst", "lightgbm": "model.bst"}


@pytest.mark.parametrize("runtime", ["sklearn", "xgboost", "lightgbm"])
def test_kserve_sample_models_answer_as_kserves_runtimes(servers, folders, runtime):
    server = servers[runtime]
    model = f"{runtime}-iris"
    path = folders / runtime / FILES[runtime]
    v1 = {"instances": ROWS}
    same(run("call", "rest-v1", server.address, model, json.dumps(v1)),
         run("expect", runtime, path, model, json.dumps(v1)))
    v2 = {"name": "input-0", "datatype": "FP32", "shape": [3, 4], "data": ROWS}
    expected = run("expect", runtime, path, model, json.dumps(v2))
    same(run("call", "rest-v2", server.address, model, json.dumps(v2)), expected)
    same(run("call", "grpc", f"127.0.0.1:{server.grpc_port}", model, json.dumps(v2)), expected)


def test_sklearnservers_predict_proba_switch_is_read_from_the_environment(servers, folders):
    server = servers["sklearn-proba"]
    path = folders / "sklearn" / "model.joblib"
    v1 = {"instances": ROWS}
    ours = run("call", "rest-v1", server.address, "sklearn-iris", json.dumps(v1))
    same(ours, run("expect", "sklearn", path, "sklearn-iris", json.dumps(v1), env={"PREDICT_PROBA": "true"}))
    assert len(ours["predictions"][0]) == 3


@pytest.fixture(scope="module")
def kserve_custom(folders):
    """The custom predictors under KServe's own ModelServer, each started
    by its own main."""
    started = {}
    for folder in ("custom", "custom-v1"):
        http, grpc = free_port(), free_port()
        process = subprocess.Popen(
            [sys.executable, str(folders / folder / "model.py"), "--model_name", f"{folder}-iris",
             "--http_port", str(http), "--grpc_port", str(grpc)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        started[folder] = {"http": http, "grpc": grpc, "process": process}
    for folder, server in started.items():
        wait_until("KServe ready", lambda: server["process"].poll() is None
                   and http_ok(f"http://127.0.0.1:{server['http']}/v2/models/{folder}-iris/ready"))
    yield started
    for server in started.values():
        server["process"].terminate()
        server["process"].wait(timeout=15)


def test_a_custom_kserve_model_answers_as_under_kserve(servers, kserve_custom):
    server = servers["custom"]
    kserve = kserve_custom["custom"]
    v2 = {"name": "rows", "datatype": "FP32", "shape": [3, 4], "data": ROWS}
    theirs = run("call", "rest-v2", f"127.0.0.1:{kserve['http']}", "custom-iris", json.dumps(v2))
    same(run("call", "rest-v2", server.address, "custom-iris", json.dumps(v2)), theirs)
    theirs = run("call", "grpc", f"127.0.0.1:{kserve['grpc']}", "custom-iris", json.dumps(v2))
    same(run("call", "grpc", f"127.0.0.1:{server.grpc_port}", "custom-iris", json.dumps(v2)), theirs)
    assert [o["name"] for o in theirs["outputs"]] == ["score", "positive"]


def test_a_v1_custom_predictor_gets_the_body_and_answers_its_dict(servers, kserve_custom):
    server = servers["custom-v1"]
    kserve = kserve_custom["custom-v1"]
    v1 = {"instances": ROWS}
    theirs = run("call", "rest-v1", f"127.0.0.1:{kserve['http']}", "custom-v1-iris", json.dumps(v1))
    ours = run("call", "rest-v1", server.address, "custom-v1-iris", json.dumps(v1))
    assert ours == theirs
    assert ours["predictions"][0] == {"sum": sum(ROWS[0]), "first": 6.8}
    # Not JSON: the client's mistake, before the model is called.
    import requests

    r = requests.post(f"http://{server.address}/v1/models/custom-v1-iris:predict", data=b"{nope", timeout=10)
    assert r.status_code == 400 and "not JSON" in r.json()["error"], r.text


def test_kserves_answers_field_by_field(servers, kserve_custom):
    """What a client of KServe reads, field by field, from KServe's own
    ModelServer and from wirespeed on the same predictor: the V2 answer
    (a null model_version and null empty parameters, an id), the model's
    V2 metadata and its v1 status."""
    import requests

    ours, theirs = f"http://{servers['custom'].address}", f"http://127.0.0.1:{kserve_custom['custom']['http']}"
    body = {"inputs": [{"name": "rows", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
    answers = [requests.post(f"{base}/v2/models/custom-iris/infer", json=body, timeout=60).json()
               for base in (ours, theirs)]
    for answer in answers:
        # The id: the request's, or one made; a predictor's own id (this
        # one's "r") is KServe's alone.
        assert answer.pop("id"), answer
        for output in answer["outputs"]:
            output["data"] = np.array(output["data"], dtype=np.float32).tolist()
    assert answers[0] == answers[1], answers
    assert answers[0]["model_version"] is None and answers[0]["parameters"] is None
    for path in ("/v2/models/custom-iris", "/v1/models/custom-iris"):
        mine, other = (requests.get(base + path, timeout=60) for base in (ours, theirs))
        assert mine.status_code == other.status_code == 200, (path, mine.text, other.text)
        assert mine.json() == other.json(), path
