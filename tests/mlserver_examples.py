"""MLServer's example model folders (its repository's docs/examples, and
runtimes for its content types, batching, streaming and the repository
API), written into a folder for tests/test_mlserver_folders.py: the
trained models by the Python of .venv-mlserver, the models' own
environment, the custom runtimes as their source files with their
settings."""

import json
import subprocess

from conftest import ROOT

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


def write_examples(root):
    """Every example folder under `root`, and MLServer's settings.json."""
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
