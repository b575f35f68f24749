"""KServe's InferenceGraph, served in-process: the YAML files of KServe's
graph samples (docs/samples/graph: sequence.yaml, switch.yaml,
ensemble.yaml, splitter.yaml), each in a folder as applied to a cluster,
with the models they name served from their KServe folders beside them.

The calls and data are the samples' (iris-input.json, the Switch's
documented input); the answers are checked against what KServe's router
would return from the same models: the xgboost and scikit-learn packages'
own predictions on the same rows, and the Switch's documented route.
"""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import requests
from onnx import TensorProto, helper

from conftest import RunningServer, run_wirespeed

TRAIN = r'''
import os, sys
import joblib
import xgboost as xgb
from sklearn import datasets, svm

root = sys.argv[1]
iris = datasets.load_iris()
X, y = iris.data, iris.target
os.makedirs(os.path.join(root, "sklearn-iris"), exist_ok=True)
os.makedirs(os.path.join(root, "xgboost-iris"), exist_ok=True)
clf = svm.SVC(gamma="scale")
clf.fit(X, y)
joblib.dump(clf, os.path.join(root, "sklearn-iris", "model.joblib"))
booster = xgb.train({"objective": "multi:softmax", "num_class": 3, "max_depth": 3, "nthread": 1},
                    xgb.DMatrix(X, label=y), 20)
booster.save_model(os.path.join(root, "xgboost-iris", "model.bst"))
'''

PREDICT = r'''
import json, sys
import joblib
import numpy as np
import xgboost as xgb

root, rows = sys.argv[1], np.array(json.loads(sys.argv[2]))
booster = xgb.Booster()
booster.load_model(root + "/xgboost-iris/model.bst")
print(json.dumps({
    "sklearn-iris": joblib.load(root + "/sklearn-iris/model.joblib").predict(rows).tolist(),
    "xgboost-iris": booster.predict(xgb.DMatrix(rows)).tolist(),
}))
'''

# docs/samples/graph/iris-input.json
IRIS_INPUT = {"instances": [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]}

# docs/samples/graph/*.yaml, the InferenceGraph documents as KServe's
# samples write them (the InferenceService documents beside them in the
# sample files are kept in sequence.yaml, to show they are skipped).
SEQUENCE = """---
apiVersion: "serving.kserve.io/v1beta1"
kind: "InferenceService"
metadata:
  name: "sklearn-iris"
spec:
  predictor:
    sklearn:
      storageUri: "gs://kfserving-examples/models/sklearn/1.0/model"
---
apiVersion: "serving.kserve.io/v1beta1"
kind: "InferenceService"
metadata:
  name: "xgboost-iris"
spec:
  predictor:
    xgboost:
      storageUri: "gs://kfserving-examples/models/xgboost/iris"
---
apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: model-chainer
spec:
  nodes:
    root:
      routerType: Sequence
      steps:
        - serviceName: sklearn-iris
        - serviceName: xgboost-iris
          data: $request
"""

SWITCH = """apiVersion: "serving.kserve.io/v1alpha1"
kind: InferenceGraph
metadata: 
  name: model-switch
spec:
  nodes:
    root:
      routerType: Switch
      steps:
      - serviceUrl: http://single-1.default.{$your-domain}/switch
        condition: "[@this].#(source==client)" #object matching
      - serviceUrl: http://single-2.default.{$your-domain}/switch
        condition: "instances.#(intval>10)" #array matching
      - serviceUrl: http://single-3.default.{$your-domain}/switch 
        condition: "instances.#(strval%*red-server*)" #pattern matching
"""

ENSEMBLE = """apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: ensemble-model
spec:
  nodes:
    root:
      routerType: Ensemble
      steps:
        - serviceName: sklearn-iris
          name: sklearn-iris
        - serviceName: xgboost-iris
          name: xgboost-iris
"""

SPLITTER = """apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: splitter-model
spec:
  nodes:
    root:
      routerType: Splitter
      steps:
        - serviceName: sklearn-iris
          weight: 20
        - serviceName: xgboost-iris
          weight: 80
"""

# The sample's custom service (docs/samples/graph/bgtest): it answers the
# instances it was sent, with its own name in "from". Written here as a
# KServe v1 predictor, which wirespeed runs unchanged.
BGTEST = '''
from typing import Dict

from kserve import Model


class BgTest(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    def predict(self, payload: Dict, headers: Dict[str, str] = None) -> Dict:
        return {"from": "TARGET", "instances": payload.get("instances", [])}
'''

# A chain whose second step takes the first's answer ($response): y = 2x,
# then z = y + 1, with input names that do not match (bound in order).
SCALE_SHIFT = """apiVersion: serving.kserve.io/v1alpha1
kind: InferenceGraph
metadata:
  name: chain
spec:
  nodes:
    root:
      routerType: Sequence
      steps:
        - serviceName: scale
          name: scale
        - serviceName: shift
          name: shift
          data: $response
        - nodeName: check
          name: check
          data: $response
          condition: "outputs.#(data.0>100)"
    check:
      routerType: Sequence
      steps:
        - serviceName: shift
          data: $request
"""


def onnx_model(op, operand, input_name, output_name):
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [None, 1])
    y = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [None, 1])
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [operand])
    graph = helper.make_graph([helper.make_node(op, [input_name, "c"], [output_name])], op, [x], [y],
                              initializer=[c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("graphs")
    subprocess.run([sys.executable, "-c", TRAIN, str(root)], check=True, capture_output=True, timeout=300)
    for folder, text in [("model-chainer", SEQUENCE), ("model-switch", SWITCH), ("ensemble-model", ENSEMBLE),
                         ("splitter-model", SPLITTER), ("chain", SCALE_SHIFT)]:
        (root / folder).mkdir()
        (root / folder / f"{folder}.yaml").write_text(text)
    for n in (1, 2, 3):
        (root / f"single-{n}").mkdir()
        (root / f"single-{n}" / "model.py").write_text(BGTEST.replace("TARGET", f"single-{n}"))
    for name, model in [("scale", onnx_model("Mul", 2.0, "x", "y")), ("shift", onnx_model("Add", 1.0, "v", "z"))]:
        (root / name).mkdir()
        onnx.save(model, root / name / "model.onnx")
    return root


@pytest.fixture(scope="module")
def server(repository):
    saved = os.environ.get("WIRESPEED_PYTHON")
    os.environ["WIRESPEED_PYTHON"] = sys.executable
    try:
        running = RunningServer(repository, ["--metrics", "127.0.0.1:0"])
    finally:
        if saved is None:
            del os.environ["WIRESPEED_PYTHON"]
        else:
            os.environ["WIRESPEED_PYTHON"] = saved
    yield running
    running.stop()


def expected(repository, rows):
    out = subprocess.run([sys.executable, "-c", PREDICT, str(repository), json.dumps(rows)], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def predict(server, graph, body):
    return requests.post(f"http://{server.address}/v1/models/{graph}:predict", json=body, timeout=60)


def test_a_sequence_answers_as_its_last_step(server, repository):
    """sequence.yaml: sklearn-iris, then xgboost-iris on the request
    ($request); the answer is xgboost-iris's, `{"predictions":[1,1]}` as
    KServe's docs show, which is what xgboost predicts."""
    r = predict(server, "model-chainer", IRIS_INPUT)
    assert r.status_code == 200, r.text
    truth = expected(repository, IRIS_INPUT["instances"])
    assert r.json() == {"predictions": truth["xgboost-iris"]}
    assert truth["xgboost-iris"] == [1.0, 1.0]
    # Both steps ran, each counted in its own model's statistics.
    for model in ("sklearn-iris", "xgboost-iris"):
        stats = requests.get(f"http://{server.address}/v2/models/{model}/stats", timeout=10).json()
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] >= 1


def test_a_switch_routes_by_its_gjson_conditions(server):
    """switch.yaml with the docs' input: only the pattern condition matches,
    and single-3 answers; the other conditions route to theirs; none
    matching is KServe's 404."""
    documented = {"source": "client1", "instances": [{"name": "blue", "intval": 0, "strval": "kserve"},
                                                     {"name": "green", "intval": 1, "strval": "1red-server1"}]}
    r = predict(server, "model-switch", documented)
    assert r.status_code == 200, r.text
    assert r.json() == {"from": "single-3", "instances": documented["instances"]}
    by_source = {"source": "client", "instances": []}
    assert predict(server, "model-switch", by_source).json()["from"] == "single-1"
    by_value = {"instances": [{"name": "x", "intval": 11, "strval": ""}]}
    assert predict(server, "model-switch", by_value).json()["from"] == "single-2"
    r = predict(server, "model-switch", {"instances": [{"intval": 1}]})
    assert r.status_code == 404 and "None of the routes matched" in r.text, r.text


def test_an_ensemble_merges_its_answers_by_step_name(server, repository):
    r = predict(server, "ensemble-model", IRIS_INPUT)
    assert r.status_code == 200, r.text
    truth = expected(repository, IRIS_INPUT["instances"])
    assert r.json() == {name: {"predictions": truth[name]} for name in ("sklearn-iris", "xgboost-iris")}


def test_a_splitter_splits_by_its_weights(server):
    """splitter.yaml, 20/80: sklearn-iris answers integers, xgboost-iris
    floats; over 1,000 requests the split is within 5 points of 20%."""
    counts = Counter()
    with requests.Session() as session:
        for _ in range(1000):
            r = session.post(f"http://{server.address}/v1/models/splitter-model:predict", json=IRIS_INPUT,
                             timeout=60)
            assert r.status_code == 200, r.text
            counts["float" if "." in r.text else "int"] += 1
    assert 150 <= counts["int"] <= 250, counts
    # The metrics count the splitter's routes as the answers show them.
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    routed = {target: float(value) for target, value in re.findall(
        r'^wirespeed_graph_steps_total\{graph="splitter-model",node="root",step="\d",target="([^"]+)"\} (\S+)',
        text, re.M)}
    assert routed == {"sklearn-iris": counts["int"], "xgboost-iris": counts["float"]}, routed


def test_tensors_flow_between_steps_on_v2(server, repository):
    """A V2 request through a $response chain: 2x, then +1 (its input is
    named otherwise: bound in order), checked against onnxruntime running
    the two files in turn; a conditional step that the answer does not
    meet leaves it as it is, one that it meets runs."""
    scale = ort.InferenceSession(str(repository / "scale" / "model.onnx"))
    shift = ort.InferenceSession(str(repository / "shift" / "model.onnx"))
    for x in (3.5, 60.0):
        body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [x]}]}
        r = requests.post(f"http://{server.address}/v2/models/chain/infer", json=body, timeout=60)
        assert r.status_code == 200, r.text
        once = shift.run(None, {"v": scale.run(None, {"x": np.array([[x]], dtype=np.float32)})[0]})[0]
        want = float(once[0][0])
        if want > 100:
            # The check node ran: shift again, on its own request, which
            # is the answer the step was given ($response).
            want += 1
        output = r.json()["outputs"][0]
        assert output["data"] == [want], (x, output)
    metadata = requests.get(f"http://{server.address}/v2/models/chain", timeout=10).json()
    assert metadata["platform"] == "inference_graph"


def test_a_graph_naming_a_model_not_served_is_refused(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "graph.yaml").write_text(SPLITTER)
    result = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert result.returncode != 0 and "sklearn-iris" in result.stderr, result.stderr
    (tmp_path / "g" / "graph.yaml").write_text(SPLITTER.replace("weight: 80", "weight: 70"))
    result = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert result.returncode != 0 and "should be 100" in result.stderr, result.stderr
