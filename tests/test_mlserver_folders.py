"""MLServer's model folders, served unchanged by wirespeed and by MLServer
itself, answer the same, field by field.

The folders are built as MLServer's own examples build them (its
repository's docs/examples: sklearn's mnist-svm, xgboost's mushroom
classifier, lightgbm's iris, catboost's classifier, mlflow's wine
ElasticNet, the custom runtime with `decode_args`, custom-json's JSON
echo, content types per request and per input, streaming's
`predict_stream`, versions side by side, adaptive batching, the
repository API), trained by the Python of .venv-mlserver, the models' own
environment, which wirespeed's workers run too. The same folders are
loaded into the session's MLServer through its repository API, and every
request goes to both with the same body, written as the examples write
it; the answers must agree as a client reads them: status, model name and
version, id, the response's and each output's parameters, names,
datatypes, shapes and values, model metadata, stream events, the
repository index. docs/migrating.md lists what differs, and why.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import ROOT, RunningServer, free_port, wirespeed_binary

MODELS_PYTHON = ROOT / ".venv-mlserver" / "bin" / "python"

TRAIN = r'''
import json, os, sys
import numpy as np
import joblib
from sklearn import datasets, svm
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression
import xgboost as xgb
import lightgbm as lgb

root = sys.argv[1]

def folder(name, settings):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    with open(os.path.join(root, name, "model-settings.json"), "w") as f:
        json.dump(settings, f)
    return os.path.join(root, name)

# docs/examples/sklearn: the MNIST SVM of scikit-learn's documentation.
digits = datasets.load_digits()
data = digits.images.reshape((len(digits.images), -1))
classifier = svm.SVC(gamma=0.001)
X_train, X_test, y_train, y_test = train_test_split(data, digits.target, test_size=0.5, shuffle=False)
classifier.fit(X_train, y_train)
d = folder("mnist-svm", {"name": "mnist-svm", "implementation": "mlserver_sklearn.SKLearnModel",
                         "parameters": {"uri": "./mnist-svm.joblib", "version": "v0.1.0"}})
joblib.dump(classifier, os.path.join(d, "mnist-svm.joblib"))
np.save(os.path.join(root, "digits.npy"), X_test[:8].astype(np.float32))

# A scikit-learn pipeline with predict_proba, its default output chosen
# by parameters.extra.predict_fn, in MLServer's well-known file name.
iris = datasets.load_iris()
pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(iris.data, iris.target)
d = folder("iris-pipeline", {"name": "iris-pipeline", "implementation": "mlserver_sklearn.SKLearnModel",
                             "parameters": {"extra": {"predict_fn": "predict_proba"}}})
joblib.dump(pipeline, os.path.join(d, "model.joblib"))

# docs/examples/xgboost: a binary XGBClassifier saved as JSON (the
# mushroom data's shape: 126 one-hot features).
rng = np.random.default_rng(3)
x = (rng.random((600, 126)) > 0.8).astype(np.float32)
y = (x[:, 3] + x[:, 7] * x[:, 11] + x[:, 40] > 0.5).astype(int)
model = xgb.XGBClassifier(n_estimators=30, max_depth=4).fit(x, y)
d = folder("mushroom-xgboost", {"name": "mushroom-xgboost", "implementation": "mlserver_xgboost.XGBoostModel",
                                "parameters": {"uri": "./mushroom-xgboost.json", "version": "v0.1.0"}})
model.save_model(os.path.join(d, "mushroom-xgboost.json"))
np.save(os.path.join(root, "mushrooms.npy"), x[:8])

# Two versions of one model, each in a folder of its own with its
# settings (docs/reference/model-settings: parameters.version).
for version, trees in (("v0.1.0", 3), ("v0.2.0", 30)):
    model = xgb.XGBClassifier(n_estimators=trees, max_depth=3).fit(x, y)
    d = folder(os.path.join("versioned", version),
               {"name": "versioned", "implementation": "mlserver_xgboost.XGBoostModel",
                "parameters": {"uri": "./model.json", "version": version}})
    model.save_model(os.path.join(d, "model.json"))

# docs/examples/mlflow: an ElasticNet on the wine-quality columns, saved
# as an MLflow model with its signature (the wine data itself is
# downloaded by the example; these rows are drawn here in its ranges).
import mlflow.sklearn
import pandas as pd
from mlflow.models.signature import infer_signature
from sklearn.linear_model import ElasticNet

columns = ["fixed acidity", "volatile acidity", "citric acid", "residual sugar", "chlorides",
           "free sulfur dioxide", "total sulfur dioxide", "density", "pH", "sulphates", "alcohol"]
low = np.array([4.6, 0.12, 0.0, 0.9, 0.012, 1.0, 6.0, 0.990, 2.74, 0.33, 8.4])
high = np.array([15.9, 1.58, 1.0, 15.5, 0.611, 72.0, 289.0, 1.004, 4.01, 2.0, 14.9])
wine = pd.DataFrame(low + rng.random((400, 11)) * (high - low), columns=columns).astype(np.float32)
quality = pd.DataFrame({"quality": (3 + 6 * rng.random(400)).round()})
lr = ElasticNet(alpha=0.5, l1_ratio=0.5, random_state=42).fit(wine, quality)
d = folder("wine-classifier", {"name": "wine-classifier", "implementation": "mlserver_mlflow.MLflowRuntime",
                               "parameters": {"uri": "./model"}})
mlflow.sklearn.save_model(lr, os.path.join(d, "model"), signature=infer_signature(wine, quality))
wine.iloc[:3].to_json(os.path.join(root, "wine.json"), orient="columns")

# docs/examples/lightgbm: iris, multiclass.
X_train, X_test, y_train, y_test = train_test_split(iris.data, iris.target, test_size=0.1, random_state=0)
booster = lgb.train(params={"objective": "multiclass", "metric": "softmax", "num_class": 3, "verbose": -1},
                    train_set=lgb.Dataset(X_train, label=y_train))
d = folder("iris-lgb", {"name": "iris-lgb", "implementation": "mlserver_lightgbm.LightGBMModel",
                        "parameters": {"uri": "./iris-lightgbm.bst", "version": "v0.1.0"}})
booster.save_model(os.path.join(d, "iris-lightgbm.bst"))
np.save(os.path.join(root, "iris.npy"), X_test.astype(np.float32))

# docs/examples/catboost: a two-tree classifier on random integers.
from catboost import CatBoostClassifier
train_data = rng.integers(0, 100, size=(100, 10))
train_labels = rng.integers(0, 2, size=100)
model = CatBoostClassifier(iterations=2, depth=2, learning_rate=1, loss_function="Logloss", verbose=False,
                           allow_writing_files=False)
model.fit(train_data, train_labels)
d = folder("catboost", {"name": "catboost", "implementation": "mlserver_catboost.CatboostModel",
                        "parameters": {"uri": "./model.cbm", "version": "v0.1.0"}})
model.save_model(os.path.join(d, "model.cbm"))
np.save(os.path.join(root, "catboost.npy"), rng.integers(0, 100, size=(4, 10)))
'''

# docs/examples/custom, with numpy where it uses numpyro: its model file
# read through get_model_uri, its inputs decoded by name with decode_args.
CUSTOM = '''
import json

import numpy as np
from mlserver import MLModel
from mlserver.codecs import decode_args
from mlserver.errors import InferenceError
from mlserver.utils import get_model_uri


class LinearModel(MLModel):
    async def load(self) -> bool:
        model_uri = await get_model_uri(self._settings)
        with open(model_uri) as model_file:
            self._weights = np.array(json.load(model_file)["weights"])
        self._offset = float(self.settings.parameters.extra["offset"])
        return True

    @decode_args
    async def predict(self, marriage: np.ndarray, age: np.ndarray) -> np.ndarray:
        if np.any(age < 0):
            raise InferenceError("age cannot be negative")
        return np.asarray(marriage * self._weights[0] + age * self._weights[1] + self._offset)
'''

# MLServer's content types: a request with content_type "pd" decoded into
# a DataFrame, answered as one (of numbers: MLServer 1.7's PandasCodec
# cannot encode pandas 3's string columns).
PANDAS = '''
import pandas as pd
from mlserver import MLModel
from mlserver.codecs import PandasCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Columns(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        frame = self.decode_request(payload, default_codec=PandasCodec)
        answer = pd.DataFrame({
            "total": frame["price"] * frame["quantity"],
            "letters": [len(name) for name in frame["name"]],
        })
        return PandasCodec.encode_response(self.name, answer)
'''


# docs/examples/content-type: each input decoded by its own content type
# (np, str, base64), as the request's parameters say, and described.
CONTENT_TYPES = '''
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Describe(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        described = []
        for request_input in payload.inputs:
            decoded = self.decode(request_input)
            if hasattr(decoded, "tolist"):
                decoded = decoded.tolist()
            described.append("%s=%s:%r" % (request_input.name, type(decoded).__name__, decoded))
        return InferenceResponse(model_name=self.name,
                                 outputs=[StringCodec.encode_output("described", described)])
'''


# MLServer's adaptive batching of a custom runtime: requests joined along
# their first dimension up to max_batch_size, each answered its rows.
BATCHED = '''
import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Summer(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = self.decode(payload.inputs[0], default_codec=NumpyCodec)
        return InferenceResponse(model_name=self.name, outputs=[
            NumpyCodec.encode_output("total", x.sum(axis=1)),
            NumpyCodec.encode_output("rows", np.full(x.shape[0], x.shape[0])),
        ])
'''


# docs/examples/custom-json: JSON text in, JSON text out, each one BYTES
# element whose shape is its length in bytes, as the example writes it.
JSON_HELLO = '''
import json

from mlserver import MLModel, types
from mlserver.codecs import StringCodec


class JsonHelloWorldModel(MLModel):
    async def predict(self, payload: types.InferenceRequest) -> types.InferenceResponse:
        request = {inp.name: json.loads("".join(self.decode(inp, default_codec=StringCodec)))
                   for inp in payload.inputs}
        shapes = {inp.name: inp.shape for inp in payload.inputs}
        body = json.dumps({"request": request, "shapes": shapes, "server_response": "Hello"}).encode("UTF-8")
        return types.InferenceResponse(id=payload.id, model_name=self.name, model_version=self.version, outputs=[
            types.ResponseOutput(name="echo_response", shape=[len(body)], datatype="BYTES", data=[body],
                                 parameters=types.Parameters(content_type="str")),
        ])
'''


# docs/examples/streaming: predict_stream yields the text word by word
# (the example's half-second wait between words is left out).
TEXT_MODEL = '''
from typing import AsyncIterator

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class TextModel(MLModel):
    async def predict_stream(self, payloads: AsyncIterator[InferenceRequest]) -> AsyncIterator[InferenceResponse]:
        payload = [_ async for _ in payloads][0]
        text = StringCodec.decode_input(payload.inputs[0])[0]
        words = text.split(" ")
        for i, word in enumerate(words):
            yield InferenceResponse(model_name=self._settings.name, outputs=[
                StringCodec.encode_output(name="output", payload=[word if i == 0 else " " + word], use_bytes=True),
            ])
'''


# A runtime that answers its input back as MLServer hands it over: the
# input's TensorData as the output's data.
ECHO = '''
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class Echo(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        first = payload.inputs[0]
        return InferenceResponse(id=payload.id, model_name=self.name, outputs=[
            ResponseOutput(name="echo", shape=first.shape, datatype=first.datatype, data=first.data,
                           parameters=first.parameters),
        ])
'''


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The example folders, trained by the models' own Python."""
    if not MODELS_PYTHON.exists():
        pytest.fail(f"{MODELS_PYTHON} is missing: scripts/test installs MLServer into .venv-mlserver")
    root = tmp_path_factory.mktemp("mlserver-examples")
    subprocess.run([str(MODELS_PYTHON), "-c", TRAIN, str(root)], check=True, capture_output=True, timeout=300)
    def runtime(name, file, code, **settings):
        """A custom runtime's folder: its code in `file`, its settings
        named `name` and implemented by `file`'s module's class."""
        folder = root / name
        folder.mkdir()
        (folder / file).write_text(code)
        (folder / "model-settings.json").write_text(json.dumps({"name": name, **settings}))
        return folder

    linear = runtime("linear", "models.py", CUSTOM, implementation="models.LinearModel",
                     parameters={"uri": "./weights.json", "extra": {"offset": 1.5}})
    (linear / "weights.json").write_text(json.dumps({"weights": [0.5, -0.25]}))
    runtime("columns", "runtime.py", PANDAS, implementation="runtime.Columns")
    runtime("content-types", "runtime.py", CONTENT_TYPES, implementation="runtime.Describe")
    # A full batch goes at once; the wait only bounds a batch that is not.
    runtime("batched", "models.py", BATCHED, implementation="models.Summer", max_batch_size=4, max_batch_time=5,
            inputs=[{"name": "x", "datatype": "FP64", "shape": [-1, 3]}])
    runtime("json-hello-world", "jsonmodels.py", JSON_HELLO, implementation="jsonmodels.JsonHelloWorldModel")
    runtime("text-model", "text_model.py", TEXT_MODEL, implementation="text_model.TextModel",
            versions=["text-model/v1.2.3"], platform="mlserver",
            inputs=[{"datatype": "BYTES", "name": "prompt", "shape": [1]}],
            outputs=[{"datatype": "BYTES", "name": "output", "shape": [1]}])
    # A key MLServer's settings do not have: ignored by both.
    runtime("echo", "runtime.py", ECHO, implementation="runtime.Echo", version="not a settings key")
    (root / "settings.json").write_text(json.dumps({"debug": "true", "parallel_workers": 0}))
    return root


NAMES = ["mnist-svm", "iris-pipeline", "mushroom-xgboost", "iris-lgb", "linear", "columns", "content-types",
         "versioned", "batched", "wine-classifier", "echo", "json-hello-world", "text-model", "catboost"]


@pytest.fixture(scope="module")
def theirs(mlserver, folders):
    """The session's MLServer with the same folders, loaded through its
    repository API."""
    repo = Path(mlserver["repo"])
    for name in NAMES:
        shutil.copytree(folders / name, repo / name, dirs_exist_ok=True)
        r = requests.post(f"http://127.0.0.1:{mlserver['http']}/v2/repository/models/{name}/load", timeout=120)
        assert r.status_code == 200, r.text
    return f"http://127.0.0.1:{mlserver['http']}"


@pytest.fixture(scope="module")
def ours(folders):
    """wirespeed on the folders as they are, its workers on the models'
    Python."""
    saved = os.environ.get("WIRESPEED_PYTHON")
    os.environ["WIRESPEED_PYTHON"] = str(MODELS_PYTHON)
    try:
        server = RunningServer(folders)
    finally:
        if saved is None:
            del os.environ["WIRESPEED_PYTHON"]
        else:
            os.environ["WIRESPEED_PYTHON"] = saved
    yield server
    server.stop()


def post(base, path, body):
    r = requests.post(base + path, json=body, timeout=60)
    return r.status_code, r.json()


def same_outputs(ours, theirs):
    """The answers agree field by field: model name and version (absent in
    both when the settings name none), the request's id when it had one;
    each output's name, datatype, shape and parameters (its content type)
    exactly, values to FP32's precision (numbers) or exactly (integers and
    strings); the response's parameters exactly, and an id in both (a
    UUID each invents when the request has none)."""
    assert ours["model_name"] == theirs["model_name"], (ours, theirs)
    assert ours.get("model_version") == theirs.get("model_version"), (ours, theirs)
    assert ours.get("parameters") == theirs.get("parameters"), (ours, theirs)
    assert ("id" in ours) == ("id" in theirs), (ours, theirs)
    assert [o["name"] for o in ours["outputs"]] == [o["name"] for o in theirs["outputs"]], (ours, theirs)
    for mine, other in zip(ours["outputs"], theirs["outputs"]):
        assert mine["datatype"] == other["datatype"], (mine, other)
        assert mine["shape"] == other["shape"], (mine, other)
        assert mine.get("parameters") == other.get("parameters"), (mine, other)
        a, b = np.array(mine["data"]).reshape(-1), np.array(other["data"]).reshape(-1)
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-5, atol=1e-6)
        else:
            assert a.tolist() == b.tolist(), (mine, other)


def test_the_sklearn_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "digits.npy")
    # The example's request, to the example's versioned endpoint.
    for rows in (x[0:1], x):
        body = {"inputs": [{"name": "predict", "shape": list(rows.shape), "datatype": "FP32", "data": rows.tolist()}]}
        path = "/v2/models/mnist-svm/versions/v0.1.0/infer"
        status, mine = post(f"http://{ours.address}", path, body)
        assert status == 200, mine
        _, other = post(theirs, path, body)
        same_outputs(mine, other)
        assert mine["model_version"] == other["model_version"] == "v0.1.0"


def test_a_pipelines_outputs_and_default_function_answer_as_mlserver(ours, theirs):
    rows = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]
    for outputs in (None, [{"name": "predict"}], [{"name": "predict"}, {"name": "predict_proba"}]):
        body = {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP64", "data": rows}]}
        if outputs:
            body["outputs"] = outputs
        status, mine = post(f"http://{ours.address}", "/v2/models/iris-pipeline/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/iris-pipeline/infer", body)
        same_outputs(mine, other)


def test_the_xgboost_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "mushrooms.npy")
    for outputs in (None, [{"name": "predict_proba"}], [{"name": "predict_proba"}, {"name": "predict"}]):
        body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]}
        if outputs:
            body["outputs"] = outputs
        status, mine = post(f"http://{ours.address}", "/v2/models/mushroom-xgboost/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/mushroom-xgboost/infer", body)
        same_outputs(mine, other)


def test_versions_of_one_model_answer_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "mushrooms.npy")
    body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}],
            "outputs": [{"name": "predict_proba"}]}
    answers = {}
    # Each version by name, and the newest when none is named.
    for path in ("/v2/models/versioned/versions/v0.1.0/infer", "/v2/models/versioned/versions/v0.2.0/infer",
                 "/v2/models/versioned/infer"):
        status, mine = post(f"http://{ours.address}", path, body)
        assert status == 200, mine
        _, other = post(theirs, path, body)
        same_outputs(mine, other)
        assert mine["model_version"] == other["model_version"], (mine, other)
        answers[path] = mine["outputs"][0]["data"]
    assert answers["/v2/models/versioned/infer"] == answers["/v2/models/versioned/versions/v0.2.0/infer"]
    assert answers["/v2/models/versioned/versions/v0.1.0/infer"] != answers["/v2/models/versioned/infer"]


def test_the_lightgbm_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "iris.npy")
    body = {"inputs": [{"name": "predict-prob", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/iris-lgb/versions/v0.1.0/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/iris-lgb/versions/v0.1.0/infer", body)
    same_outputs(mine, other)


def test_a_custom_runtime_runs_unchanged(ours, theirs):
    body = {"inputs": [
        {"name": "marriage", "shape": [3], "datatype": "FP64", "data": [1.0, 2.0, 3.5]},
        {"name": "age", "shape": [3], "datatype": "FP64", "data": [30.0, 40.0, 50.0]},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/linear/infer", body)
    same_outputs(mine, other)
    np.testing.assert_allclose(mine["outputs"][0]["data"], [1.0 * 0.5 - 7.5 + 1.5, 1.0 - 10 + 1.5, 1.75 - 12.5 + 1.5])
    # Its own InferenceError is the client's mistake, as in MLServer: 400
    # with its message.
    body["inputs"][1]["data"] = [30.0, -1.0, 50.0]
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", body)
    their_status, other = post(theirs, "/v2/models/linear/infer", body)
    assert status == their_status == 400, (mine, other)
    assert "age cannot be negative" in mine["error"]


def test_pandas_content_types_reach_the_runtime_as_mlserver_decodes_them(ours, theirs):
    body = {
        "parameters": {"content_type": "pd"},
        "inputs": [
            {"name": "name", "shape": [2], "datatype": "BYTES", "data": ["apple", "pear"]},
            {"name": "price", "shape": [2], "datatype": "FP64", "data": [0.5, 1.25]},
            {"name": "quantity", "shape": [2], "datatype": "INT64", "data": [4, 2]},
        ],
    }
    status, mine = post(f"http://{ours.address}", "/v2/models/columns/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/columns/infer", body)
    same_outputs(mine, other)
    assert mine["outputs"][1]["data"] == [5, 4]


def test_each_inputs_content_type_reaches_the_runtime(ours, theirs):
    body = {"inputs": [
        {"name": "metadata-np", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4],
         "parameters": {"content_type": "np"}},
        {"name": "metadata-str", "datatype": "BYTES", "shape": [2], "data": ["hello", "world"],
         "parameters": {"content_type": "str"}},
        {"name": "metadata-b64", "datatype": "BYTES", "shape": [1], "data": ["aGVsbG8gd29ybGQ="],
         "parameters": {"content_type": "base64"}},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/content-types/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/content-types/infer", body)
    same_outputs(mine, other)
    assert mine["outputs"][0]["data"][1] == "metadata-str=list:['hello', 'world']", mine


def test_adaptive_batching_joins_a_custom_runtimes_requests_as_mlserver_does(ours, theirs):
    from concurrent.futures import ThreadPoolExecutor

    def ask(base, i):
        body = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [i, i, i]}]}
        return post(base, "/v2/models/batched/infer", body)

    for base in (f"http://{ours.address}", theirs):
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: ask(base, i), range(4)))
        for i, (status, answer) in enumerate(answers):
            assert status == 200, answer
            outputs = {o["name"]: o for o in answer["outputs"]}
            assert outputs["total"]["data"] == [3.0 * i] and outputs["total"]["shape"] == [1, 1], answer
            # All four in one call of predict.
            assert outputs["rows"]["data"] == [4], (base, answer)


def test_the_mlflow_example_answers_as_mlserver(ours, theirs, folders):
    rows = json.loads((folders / "wine.json").read_text())
    # The example's request: one FP32 input per column.
    body = {"inputs": [
        {"name": column, "shape": [3], "datatype": "FP32", "data": list(values.values())}
        for column, values in rows.items()
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/wine-classifier/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/wine-classifier/infer", body)
    same_outputs(mine, other)


def test_tritonclient_calls_an_mlserver_folder_unchanged(ours, theirs, folders):
    x = np.load(folders / "digits.npy")
    answers = []
    for address in (ours.address, theirs.removeprefix("http://")):
        client = httpclient.InferenceServerClient(address)
        assert client.is_model_ready("mnist-svm")
        inp = httpclient.InferInput("predict", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=False)
        answers.append(client.infer("mnist-svm", [inp]).as_numpy("predict"))
    np.testing.assert_array_equal(answers[0], answers[1])


def test_a_request_the_runtime_cannot_take_is_a_clear_400(ours):
    two = {"inputs": [
        {"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    ]}
    status, answer = post(f"http://{ours.address}", "/v2/models/mushroom-xgboost/infer", two)
    assert status == 400 and "takes one input, and the request gives 2" in answer["error"], answer
    wide = {"inputs": [{"name": "a", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    status, answer = post(f"http://{ours.address}", "/v2/models/mnist-svm/infer", wide)
    assert status == 400 and "Expected [-1,64], got [1,3]" in answer["error"], answer
    status, answer = post(f"http://{ours.address}", "/v2/models/iris-pipeline/infer",
                          {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
                           "outputs": [{"name": "transform"}]})
    assert status == 400 and "transform" in answer["error"], answer


def test_asked_it_listens_where_mlserver_would(folders, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(folders / "iris-lgb", root / "iris-lgb")
    http, grpc = free_port(), free_port()
    (root / "settings.json").write_text(json.dumps({"host": "127.0.0.1", "http_port": http, "grpc_port": grpc}))
    process = subprocess.Popen([str(wirespeed_binary()), "serve", "--models", str(root), "--ports-from-settings"],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        seen = set()
        for line in process.stderr:
            for port in (http, grpc):
                if f"127.0.0.1:{port}" in line and "listening on" in line:
                    seen.add(port)
            if seen == {http, grpc}:
                break
        assert seen == {http, grpc}
        x = [[5.1, 3.5, 1.4, 0.2]]
        status, answer = post(f"http://127.0.0.1:{http}", "/v2/models/iris-lgb/infer",
                              {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]})
        assert status == 200 and answer["outputs"][0]["shape"] == [1, 3], answer
    finally:
        process.terminate()
        process.wait(timeout=15)
    # Asked twice where to listen: refused, naming both.
    out = subprocess.run([str(wirespeed_binary()), "serve", "--models", str(root), "--ports-from-settings",
                          "--http", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--ports-from-settings" in out.stderr and "--http" in out.stderr, out.stderr


def test_a_runtime_gets_mlservers_own_types_and_answers_them_back(ours, theirs):
    for body in (
        {"id": "r-1", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, 2, 3, 4]}]},
        {"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["a", "b"],
                     "parameters": {"content_type": "str"}}]},
    ):
        status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/echo/infer", body)
        same_outputs(mine, other)
        if "id" in body:
            assert mine["id"] == other["id"] == body["id"], (mine, other)


def test_what_mlservers_schema_takes_is_taken(ours, theirs):
    # pydantic's .dict() of a request writes its unset fields as null; one
    # value may stand for the whole data.
    nulls = {"id": None, "parameters": None, "outputs": None, "inputs": [
        {"name": "marriage", "shape": [1], "datatype": "FP64", "data": [1.0], "parameters": None},
        {"name": "age", "shape": [1], "datatype": "FP64", "data": 30.0, "parameters": {"content_type": None}},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", nulls)
    their_status, other = post(theirs, "/v2/models/linear/infer", nulls)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)
    one = {"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": "hello world"}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", one)
    their_status, other = post(theirs, "/v2/models/echo/infer", one)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)


def test_outputs_carry_their_content_type_over_grpc_as_mlserver(ours, theirs, mlserver, folders):
    import tritonclient.grpc as grpcclient

    x = np.load(folders / "iris.npy")[:2]
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        client = grpcclient.InferenceServerClient(address)
        inp = grpcclient.InferInput("predict-prob", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        answer = client.infer("iris-lgb", [inp], model_version="v0.1.0")
        outputs = answer.get_response(as_json=True)["outputs"]
        # MLServer sets an empty `contents` beside the raw bytes; an unset
        # message reads the same.
        outputs = [{k: v for k, v in o.items() if (k, v) != ("contents", {})} for o in outputs]
        answers.append((outputs, answer.as_numpy("predict")))
    (mine, mine_values), (other, other_values) = answers
    assert mine == other, (mine, other)
    assert mine[0]["parameters"] == {"content_type": {"string_param": "np"}}, mine
    np.testing.assert_allclose(mine_values, other_values, rtol=1e-6)


def test_models_unload_and_load_through_the_repository_api_as_mlservers_do(ours, theirs):
    """MLServer always allows its repository API; so does wirespeed on its
    models when no --model-control-mode is given. An unloaded model keeps
    its version in the index."""
    indexes = {}
    for base in (f"http://{ours.address}", theirs):
        assert requests.post(f"{base}/v2/repository/models/iris-lgb/unload", timeout=60).status_code == 200
        index = requests.post(f"{base}/v2/repository/index", json={}, timeout=60).json()
        entry = [e for e in index if e["name"] == "iris-lgb"]
        assert [(e["version"], e["state"]) for e in entry] == [("v0.1.0", "UNAVAILABLE")], (base, index)
        # The index entry by entry (MLServer lists them in its own order).
        indexes[base] = sorted(json.dumps(e, sort_keys=True) for e in index if e["name"] in NAMES)
        assert requests.get(f"{base}/v2/models/iris-lgb/ready", timeout=60).status_code != 200
        assert requests.post(f"{base}/v2/repository/models/iris-lgb/load", timeout=120).status_code == 200
        assert requests.get(f"{base}/v2/models/iris-lgb/ready", timeout=60).status_code == 200
    assert indexes[f"http://{ours.address}"] == indexes[theirs], indexes


def test_the_custom_json_example_answers_as_mlserver(ours, theirs, mlserver):
    """MLServer's custom-json example: a string whose shape is its length
    in bytes, over REST as its notebook sends it and over gRPC as
    MLServer's own converter builds the message (bytes_contents)."""
    import grpc
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    text = json.dumps({"name": "Foo Bar", "message": "Hello from Client (REST)!"})
    body = {"inputs": [{"name": "echo_request", "shape": [len(text)], "datatype": "BYTES", "data": [text]}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/json-hello-world/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/json-hello-world/infer", body)
    same_outputs(mine, other)
    answer = json.loads(mine["outputs"][0]["data"][0])
    # The runtime saw the shape as the client wrote it.
    assert answer["shapes"] == {"echo_request": [len(text)]} and answer["request"]["echo_request"]["name"] == "Foo Bar"
    assert mine["outputs"][0]["shape"] == [len(mine["outputs"][0]["data"][0])]

    # Two strings of 11 bytes as [2, 11], as MLServer's pandas requests write them.
    two = {"inputs": [{"name": "echo_request", "shape": [2, 2], "datatype": "BYTES", "data": ["{}", "{}"]}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", two)
    their_status, other = post(theirs, "/v2/models/echo/infer", two)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)

    raw = json.dumps({"name": "Foo Bar", "message": "Hello from Client (gRPC)!"}).encode()
    message = service_pb2.ModelInferRequest(model_name="json-hello-world", inputs=[
        service_pb2.ModelInferRequest.InferInputTensor(
            name="echo_request", datatype="BYTES", shape=[len(raw)],
            parameters={"content_type": service_pb2.InferParameter(string_param="str")},
            contents=service_pb2.InferTensorContents(bytes_contents=[raw]))])
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        with grpc.insecure_channel(address) as channel:
            response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=60)
        output = MessageToDict(response.outputs[0])
        output.pop("contents", None)
        contents = list(response.outputs[0].contents.bytes_contents) or [
            bytes(response.raw_output_contents[0][4:])]
        # Where the bytes lie: MLServer answers a request of typed contents
        # in typed contents (code written to its stubs reads them there).
        where = "raw_output_contents" if response.raw_output_contents else "contents.bytes_contents"
        answers.append((output, json.loads(contents[0]), where))
    assert answers[0] == answers[1], answers
    assert answers[0][1]["shapes"] == {"echo_request": [len(raw)]}


def test_the_streaming_example_streams_as_mlserver(ours, theirs):
    """MLServer's streaming example, its REST client as the example writes
    it (httpx-sse on generate_stream, the request's .dict()), and the same
    request to infer_stream: each event an InferenceResponse, the same
    words in the same order."""
    import httpx
    from httpx_sse import connect_sse

    request = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                           "data": ["What is the capital of France?"], "parameters": {"content_type": "str"}}],
               "outputs": [{"name": "output"}]}
    # What pydantic's .dict() of the request writes: its unset fields null.
    as_dict = {"id": None, "parameters": None, **request,
               "inputs": [{**request["inputs"][0]}], "outputs": [{"name": "output", "parameters": None}]}
    streams = {}
    for base in (f"http://{ours.address}", theirs):
        for endpoint, body in (("generate_stream", as_dict), ("infer_stream", request)):
            with httpx.Client(timeout=60) as client:
                with connect_sse(client, "POST", f"{base}/v2/models/text-model/{endpoint}", json=body) as events:
                    assert events.response.status_code == 200, events.response.read()
                    streams[base, endpoint] = [json.loads(sse.data) for sse in events.iter_sse()]
    words = ["What", " is", " the", " capital", " of", " France?"]
    for endpoint in ("generate_stream", "infer_stream"):
        mine, other = streams[f"http://{ours.address}", endpoint], streams[theirs, endpoint]
        assert len(mine) == len(other) == len(words), (mine, other)
        for m, o in zip(mine, other):
            # MLServer's stream events keep the CloudEvents headers its
            # middleware sets (HTTP headers of a unary answer) in the
            # response's parameters.
            o["parameters"].pop("headers", None)
            same_outputs(m, o)
        assert [m["outputs"][0]["data"] for m in mine] == [[w] for w in words], mine


# The streaming example's gRPC client, as its notebook writes it, run by
# the Python MLServer is installed in (its own stub and converters).
GRPC_STREAM_CLIENT = r'''
import asyncio, json, sys

import grpc
import mlserver.grpc.converters as converters
import mlserver.grpc.dataplane_pb2_grpc as dataplane
import mlserver.types as types
from mlserver.codecs import StringCodec

inference_request = types.InferenceRequest.model_validate_json(sys.argv[2])
inference_request.inputs[0] = StringCodec.encode_input("prompt", inference_request.inputs[0].data.root)
inference_request_g = converters.ModelInferRequestConverter.from_types(
    inference_request, model_name="text-model", model_version=None)


async def get_inference_request_stream(inference_request):
    yield inference_request


async def main():
    answers = []
    async with grpc.aio.insecure_channel(sys.argv[1]) as grpc_channel:
        grpc_stub = dataplane.GRPCInferenceServiceStub(grpc_channel)
        async for response in grpc_stub.ModelStreamInfer(get_inference_request_stream(inference_request_g)):
            response = converters.ModelInferResponseConverter.to_types(response)
            answers.append({"model_name": response.model_name,
                            "words": StringCodec.decode_output(response.outputs[0]),
                            "shape": response.outputs[0].shape,
                            "parameters": response.outputs[0].parameters.model_dump(exclude_none=True)})
    print(json.dumps(answers))

asyncio.run(main())
'''


def test_the_streaming_examples_grpc_client_reads_our_stream_as_mlservers(ours, mlserver):
    request = json.dumps({"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                                      "data": ["What is the capital of France?"],
                                      "parameters": {"content_type": "str"}}],
                          "outputs": [{"name": "output"}]})
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        out = subprocess.run([str(MODELS_PYTHON), "-c", GRPC_STREAM_CLIENT, address, request],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        answers.append(json.loads(out.stdout))
    assert answers[0] == answers[1], answers
    assert [a["words"] for a in answers[0]] == [["What"], [" is"], [" the"], [" capital"], [" of"], [" France?"]]


def test_model_metadata_is_mlservers(ours, theirs, mlserver):
    """What MLServer answers of a model is what its settings say (declared
    tensors, versions and platform), over REST and gRPC."""
    import tritonclient.grpc as grpcclient

    for name in NAMES:
        mine = requests.get(f"http://{ours.address}/v2/models/{name}", timeout=60)
        other = requests.get(f"{theirs}/v2/models/{name}", timeout=60)
        assert mine.status_code == other.status_code == 200, (name, mine.text, other.text)
        assert mine.json() == other.json(), name
    for name in ("text-model", "mnist-svm", "batched"):
        answers = [grpcclient.InferenceServerClient(address).get_model_metadata(name, as_json=True)
                   for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}")]
        assert answers[0] == answers[1], answers


def test_the_catboost_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "catboost.npy")
    for rows in (x[0:1], x):
        body = {"inputs": [{"name": "predict-prob", "shape": list(rows.shape), "datatype": "FP32",
                            "data": rows.tolist()}]}
        status, mine = post(f"http://{ours.address}", "/v2/models/catboost/versions/v0.1.0/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/catboost/versions/v0.1.0/infer", body)
        same_outputs(mine, other)
