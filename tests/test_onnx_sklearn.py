"""scikit-learn, XGBoost and LightGBM models as users convert them, with
skl2onnx's and onnxmltools' defaults (ZipMap on): a ColumnTransformer
pipeline of numeric and string columns, SVC, KNN, IsolationForest,
GaussianNB, MLPClassifier with integer and string labels, XGBoost
multi-class and LightGBM regression. Each is a folder with only
`model.onnx`, served by the default engine (`auto`: tract, or ONNX Runtime
from the onnxruntime wheel's library for what tract cannot run), asked
at 1, 7 and 300 rows, and compared with onnxruntime running the same file:
labels exactly, scores and probabilities within float rounding. A
classifier's ZipMap output comes back as its probabilities tensor, one
column per class in the classifier's order, and the classification
extension names the classes."""

import lightgbm
import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.http as httpclient
import xgboost
from onnxmltools import convert_lightgbm, convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType as MLFloat
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import IsolationForest
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import SVC

import onnx_suite
from conftest import RunningServer

RNG = np.random.default_rng(11)
N = 400
X = RNG.standard_normal((N, 4)).astype(np.float32)
Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1).astype(np.int64)
NAMES = np.array(["low", "mid", "high"])[Y]
CITIES = RNG.choice(["paris", "lyon", "nice"], size=(N, 1))


def models():
    """name -> (model, inputs for `rows` rows)."""
    out = {}
    plain = lambda rows: {"X": X[:rows]}  # noqa: E731
    pipe = Pipeline([
        ("columns", ColumnTransformer([
            ("num", StandardScaler(), [0, 1, 2, 3]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), [4]),
        ])),
        ("clf", LogisticRegression(max_iter=300)),
    ])
    mixed = np.concatenate([X.astype(object), CITIES.astype(object)], axis=1)
    pipe.fit(mixed, NAMES)
    out["pipeline"] = (
        to_onnx(pipe, initial_types=[("num", FloatTensorType([None, 4])), ("cat", StringTensorType([None, 1]))],
                target_opset=17),
        lambda rows: {"num": X[:rows], "cat": CITIES[:rows].astype(object)},
    )
    for name, model, labels in [
        ("svc", SVC(probability=True, random_state=0), Y),
        ("knn", KNeighborsClassifier(5), Y),
        ("gaussian_nb", GaussianNB(), Y),
        ("mlp_int", MLPClassifier((16,), max_iter=300, random_state=0), Y),
        ("mlp_str", MLPClassifier((16,), max_iter=300, random_state=0), NAMES),
    ]:
        model.fit(X, labels)
        out[name] = (to_onnx(model, X[:1], target_opset=17), plain)
    forest = IsolationForest(n_estimators=20, random_state=0).fit(X)
    out["isolation_forest"] = (to_onnx(forest, X[:1], target_opset={"": 17, "ai.onnx.ml": 3}), plain)
    booster = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(X, Y)
    out["xgboost_multiclass"] = (convert_xgboost(booster, initial_types=[("X", MLFloat([None, 4]))], target_opset=15),
                                 plain)
    regressor = lightgbm.LGBMRegressor(n_estimators=10, num_leaves=8, verbose=-1).fit(X, X[:, 0] * 2 + X[:, 1])
    out["lightgbm_regression"] = (convert_lightgbm(regressor, initial_types=[("X", MLFloat([None, 4]))],
                                                   target_opset=15), plain)
    return out


MODELS = models()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sklearn")
    for name, (model, _) in MODELS.items():
        (root / name).mkdir()
        onnx.save(model, root / name / "model.onnx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ORT_DYLIB_PATH", onnx_suite.onnxruntime_library())
        running = RunningServer(root, ["--metrics", "off"])
    yield running, root
    running.stop()


def reference(root, name, feeds):
    """onnxruntime's outputs; a ZipMap's list of maps as a matrix, one
    column per class in the map's (the classifier's) order."""
    session = onnxruntime.InferenceSession(str(root / name / "model.onnx"), providers=["CPUExecutionProvider"])
    values = session.run(None, feeds)
    out = {}
    for meta, value in zip(session.get_outputs(), values):
        if isinstance(value, list):
            keys = list(value[0].keys())
            value = np.array([[row[k] for k in keys] for row in value], dtype=np.float32)
            out[meta.name] = (value, [str(k) for k in keys])
        else:
            out[meta.name] = (np.asarray(value), None)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_a_default_conversion_answers_as_onnxruntime(server, name, rows):
    running, root = server
    _, make = MODELS[name]
    feeds = make(rows)
    client = httpclient.InferenceServerClient(running.address)
    inputs = []
    for input_name, array in feeds.items():
        datatype = "BYTES" if array.dtype == object else "FP32"
        tensor = httpclient.InferInput(input_name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    want = reference(root, name, feeds)
    result = client.infer(name, inputs)
    for output, (expected, _) in want.items():
        got = result.as_numpy(output)
        assert got is not None, (name, output)
        if expected.dtype == object:
            assert [g.decode() for g in got.reshape(-1)] == [str(e) for e in expected.reshape(-1)], (name, output)
        elif expected.dtype.kind in "iub":
            np.testing.assert_array_equal(got.reshape(expected.shape), expected, err_msg=f"{name} {output}")
        else:
            np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} {output}")


def test_a_zipmap_output_names_its_classes(server):
    running, root = server
    client = httpclient.InferenceServerClient(running.address)
    metadata = client.get_model_metadata("mlp_str")
    probabilities = next(o for o in metadata["outputs"] if o["name"] == "output_probability")
    assert probabilities["datatype"] == "FP32" and probabilities["shape"] == [-1, 3]
    tensor = httpclient.InferInput("X", [1, 4], "FP32")
    tensor.set_data_from_numpy(X[:1])
    asked = httpclient.InferRequestedOutput("output_probability", class_count=3)
    top = [c.decode().split(":") for c in client.infer("mlp_str", [tensor], outputs=[asked])
           .as_numpy("output_probability").reshape(-1)]
    want, classes = reference(root, "mlp_str", {"X": X[:1]})["output_probability"]
    order = np.argsort(-want[0], kind="stable")
    assert [label for _, _, label in top] == [classes[i] for i in order]
    assert [int(index) for _, index, _ in top] == order.tolist()
