"""Tree models laid out for Triton's FIL backend, served unchanged.

The models are made as the FIL backend's QA makes them
(`qa/L0_e2e/generate_example_model.py`: make_classification and
make_regression data, XGBoost and LightGBM classifiers and regressors,
random forests) at a smaller size, saved under FIL's file names in every
format FIL reads (XGBoost JSON, UBJSON and legacy binary, the last written by
XGBoost 1.7, the last release that writes it; LightGBM text), with the
`config.pbtxt` its `generate_config` writes. They are asked with
tritonclient as FIL's `test_model.py` asks them (`input__0`, `output__0`,
small batches and one of `max_batch_size` rows) and checked, as it checks
them, against the packages that trained them: xgboost's and lightgbm's own
predictions, shaped as FIL shapes its outputs (`predict_proba`'s
`[1 - p, p]`, a class index, a thresholded decision)."""

import subprocess
import sys

import lightgbm as lgb
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb
from sklearn.datasets import make_classification, make_regression
from tritonclient.utils import InferenceServerException

from conftest import ROOT, RunningServer, run_wirespeed

FEATURES = 32
MAX_BATCH = 8192
LEGACY_PYTHON = ROOT / ".venv-xgboost1" / "bin" / "python"


def fil_config(name, *, model_format, features=FEATURES, output_dim=1, predict_proba=False,
               task="classification", threshold=0.5, classifier_key="is_classifier",
               max_batch_size=MAX_BATCH, extra_output=""):
    """FIL's QA generate_config(), as it writes the file."""
    predict_proba = str(bool(predict_proba)).lower()
    is_classifier = str(task == "classification").lower()
    return f"""name: "{name}"
backend: "fil"
max_batch_size: {max_batch_size}
input [
 {{
    name: "input__0"
    data_type: TYPE_FP32
    dims: [ {features} ]
  }}
]
output [
 {{
    name: "output__0"
    data_type: TYPE_FP32
    dims: [ {output_dim} ]
  }}
 {extra_output}
]
instance_group [{{ kind: KIND_CPU }}]
parameters [
  {{
    key: "model_type"
    value: {{ string_value: "{model_format}" }}
  }},
  {{
    key: "predict_proba"
    value: {{ string_value: "{predict_proba}" }}
  }},
  {{
    key: "{classifier_key}"
    value: {{ string_value: "{is_classifier}" }}
  }},
  {{
    key: "threshold"
    value: {{ string_value: "{threshold}" }}
  }},
  {{
    key: "layout"
    value: {{ string_value: "depth_first" }}
  }},
  {{
    key: "xgboost_allow_unknown_field"
    value: {{ string_value: "true" }}
  }}
]

dynamic_batching {{ }}"""


def classification_data(classes=2, rows=1000, cols=FEATURES):
    return make_classification(n_samples=rows, n_features=cols, n_informative=cols // 3,
                               n_classes=classes, random_state=0)


def softmax(margins):
    e = np.exp(margins - margins.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# The legacy binary model, trained and saved by XGBoost 1.7 in its own venv,
# with its own predicted probabilities for the rows it is given.
LEGACY_SCRIPT = """
import sys
import numpy as np
import xgboost as xgb
folder = sys.argv[1]
data = np.load(folder + "/train.npz")
booster = xgb.train({"objective": "binary:logistic", "max_depth": 6, "tree_method": "hist"},
                    xgb.DMatrix(data["x"], label=data["y"]), 40)
booster.save_model(folder + "/1/xgboost.model")
probe = np.load(folder + "/probe.npy")
np.save(folder + "/expected.npy", booster.predict(xgb.DMatrix(probe)))
"""


@pytest.fixture(scope="module")
def probe():
    """Rows to ask: random ones as FIL's test draws them, NaNs (missing
    values) among them."""
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(64, FEATURES)).astype(np.float32) * 2
    rows[::7, 3] = np.nan
    return rows


@pytest.fixture(scope="module")
def repository(tmp_path_factory, probe):
    root = tmp_path_factory.mktemp("fil")
    expected = {}

    def folder(name, config):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        return root / name / "1"

    x, y = classification_data()
    clf = xgb.XGBClassifier(objective="binary:logistic", tree_method="hist", max_depth=7,
                            n_estimators=60, eval_metric="error").fit(x, y)
    clf.save_model(folder("xgboost_json", fil_config("xgboost_json", model_format="xgboost_json",
                                                     output_dim=2, predict_proba=True)) / "xgboost.json")
    clf.save_model(folder("xgboost_ubj", fil_config("xgboost_ubj", model_format="xgboost_ubj",
                                                    output_dim=2, predict_proba=True)) / "xgboost.ubj")
    expected["xgboost_json"] = expected["xgboost_ubj"] = clf.predict_proba(probe)

    # FIL's binary decision at a threshold, with the probability alone too.
    clf.save_model(folder("xgboost_threshold", fil_config("xgboost_threshold", model_format="xgboost_json",
                                                          threshold=0.3)) / "xgboost.json")
    p = clf.predict_proba(probe)[:, 1]
    expected["xgboost_threshold"] = (p > np.float32(0.3)).astype(np.float32)

    # XGBoost's multi:softmax: a class index, and with predict_proba its
    # margins' softmax (FIL sets Treelite's softmax postprocessor).
    x3, y3 = classification_data(classes=3)
    booster = xgb.train({"objective": "multi:softmax", "num_class": 3, "max_depth": 5},
                        xgb.DMatrix(x3, label=y3), 30)
    booster.save_model(folder("xgboost_softmax", fil_config("xgboost_softmax", model_format="xgboost_ubj",
                                                            output_dim=3, predict_proba=True)) / "xgboost.ubj")
    margins = booster.predict(xgb.DMatrix(probe), output_margin=True)
    expected["xgboost_softmax"] = softmax(margins)

    # LightGBM's random forest of 10 classes, with probabilities (FIL's
    # lightgbm_rf); and its class index, under FIL's older output_class.
    x10, y10 = classification_data(classes=10)
    rf = lgb.train({"boosting": "rf", "bagging_fraction": 0.8, "bagging_freq": 1,
                    "objective": "multiclass", "num_class": 10, "max_depth": 10, "verbose": -1},
                   lgb.Dataset(x10, label=y10), 20)
    rf.save_model(folder("lightgbm_rf", fil_config("lightgbm_rf", model_format="lightgbm",
                                                   output_dim=10, predict_proba=True)) / "model.txt")
    expected["lightgbm_rf"] = rf.predict(probe)
    rf.save_model(folder("lightgbm_class", fil_config("lightgbm_class", model_format="lightgbm",
                                                      classifier_key="output_class")) / "model.txt")
    expected["lightgbm_class"] = np.argmax(rf.predict(probe), axis=1).astype(np.float32)

    # FIL's regression model: LightGBM, deep and few trees.
    xr, yr = make_regression(n_samples=1000, n_features=FEATURES, n_informative=FEATURES // 3, random_state=0)
    reg = lgb.train({"objective": "regression", "metric": "l2", "max_depth": 25, "verbose": -1},
                    lgb.Dataset(xr, yr), 10)
    reg.save_model(folder("regression", fil_config("regression", model_format="lightgbm",
                                                   task="regression")) / "model.txt")
    expected["regression"] = reg.predict(probe)

    # XGBoost's legacy binary format, FIL's default model_type, from 1.7.
    legacy = folder("xgboost_legacy", fil_config("xgboost_legacy", model_format="xgboost",
                                                 output_dim=1, predict_proba=True))
    np.savez(legacy.parent / "train.npz", x=x.astype(np.float32), y=y)
    np.save(legacy.parent / "probe.npy", probe)
    subprocess.run([str(LEGACY_PYTHON), "-c", LEGACY_SCRIPT, str(legacy.parent)], check=True)
    expected["xgboost_legacy"] = np.load(legacy.parent / "expected.npy")

    # The same model from a config.toml: FIL's keys as its [parameters].
    (root / "xgboost_toml").mkdir()
    clf.save_model(root / "xgboost_toml" / "xgboost.json")
    (root / "xgboost_toml" / "config.toml").write_text(f"""
backend = "fil"
max_batch_size = {MAX_BATCH}
[[inputs]]
name = "input__0"
datatype = "FP32"
shape = [-1, {FEATURES}]
[[outputs]]
name = "output__0"
datatype = "FP32"
shape = [-1, 2]
[parameters]
model_type = "xgboost_json"
is_classifier = "true"
predict_proba = "true"
""")
    expected["xgboost_toml"] = expected["xgboost_json"]
    return root, expected


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository[0])
    yield running
    running.stop()


def client_of(module, server):
    return module.InferenceServerClient(server.address if module is httpclient else server.grpc_address)


def predict(module, client, name, rows):
    """FIL's test client call: input__0 as FP32, output__0 asked."""
    inp = module.InferInput("input__0", list(rows.shape), "FP32")
    if module is httpclient:
        inp.set_data_from_numpy(rows, binary_data=True)
        out = module.InferRequestedOutput("output__0", binary_data=True)
    else:
        inp.set_data_from_numpy(rows)
        out = module.InferRequestedOutput("output__0")
    return client.infer(name, [inp], outputs=[out]).as_numpy("output__0")


MODELS = ["xgboost_json", "xgboost_ubj", "xgboost_threshold", "xgboost_softmax", "xgboost_legacy",
          "lightgbm_rf", "lightgbm_class", "regression", "xgboost_toml"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_fil_models_answer_as_the_packages_that_trained_them(server, repository, probe, module, name):
    """test_model.py's test_small: one row at a time, then the rows as one
    batch, each against the package's own prediction."""
    expected = repository[1][name]
    client = client_of(module, server)
    one_by_one = np.concatenate([predict(module, client, name, probe[i:i + 1]) for i in range(8)])
    batch = predict(module, client, name, probe)
    want = expected.reshape(batch.shape)
    np.testing.assert_allclose(one_by_one, want[:8], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch, want, rtol=1e-5, atol=1e-6)
    # FIL's shapes: a row of the output's dims per input row.
    assert batch.shape[0] == len(probe) and batch.ndim == 2


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_batch_of_max_batch_size_rows_is_served_and_one_more_refused(server, repository, module):
    """test_model.py's test_max_batch, and Triton's refusal past it."""
    rng = np.random.default_rng(1)
    rows = rng.random((MAX_BATCH, FEATURES), dtype=np.float32)
    client = client_of(module, server)
    got = predict(module, client, "xgboost_json", rows)
    clf = xgb.XGBClassifier()
    clf.load_model(repository[0] / "xgboost_json" / "1" / "xgboost.json")
    np.testing.assert_allclose(got, clf.predict_proba(rows), rtol=1e-5, atol=1e-6)
    with pytest.raises(InferenceServerException) as raised:
        predict(module, client, "xgboost_json", np.zeros((MAX_BATCH + 1, FEATURES), np.float32))
    assert "batch-size must be <= 8192" in str(raised.value), raised.value


def test_the_configuration_reads_back_as_fils_test_reads_it(server):
    """test_model.py's model_data fixture: the parameters, the dims without
    the batch dimension, max_batch_size and the instance kind (CPU)."""
    client = grpcclient.InferenceServerClient(server.grpc_address)
    config = client.get_model_config("xgboost_json").config
    assert config.parameters["model_type"].string_value == "xgboost_json"
    assert config.parameters["predict_proba"].string_value == "true"
    assert config.parameters["is_classifier"].string_value == "true"
    assert config.max_batch_size == MAX_BATCH
    assert {i.name: list(i.dims) for i in config.input} == {"input__0": [FEATURES]}
    assert {o.name: list(o.dims) for o in config.output} == {"output__0": [2]}
    assert config.instance_group[0].kind != 1  # not KIND_GPU: FIL's use_cpu
    assert config.backend == "fil"
    http = httpclient.InferenceServerClient(server.address).get_model_config("regression")
    assert http["parameters"]["is_classifier"]["string_value"] == "false"


def test_a_wrong_input_gets_a_clear_error(server):
    client = httpclient.InferenceServerClient(server.address)
    inp = httpclient.InferInput("input__0", [1, FEATURES - 1], "FP32")
    inp.set_data_from_numpy(np.zeros((1, FEATURES - 1), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("regression", [inp])
    assert "input__0" in str(raised.value) and str(FEATURES) in str(raised.value), raised.value


@pytest.mark.parametrize("change, words", [
    (lambda c: c.replace('key: "is_classifier"', 'key: "is_classifer"'), "is_classifier is required"),
    (lambda c: c.replace('"xgboost_json"', '"treelite_checkpoint"'), "treelite_checkpoint"),
    (lambda c: c.replace("dims: [ 2 ]", "dims: [ 3 ]"), "dims [ 1 ] or [ 2 ]"),
    (lambda c: c.replace("dims: [ 32 ]", "dims: [ 31 ]"), "32 features"),
    (lambda c: c.replace('name: "input__0"', 'name: "features"'), "input__0"),
    (lambda c: c.replace(' {\n    name: "output__0"', ' {\n    name: "treeshap_output" data_type: TYPE_FP32 '
                         'dims: [ 33 ] },\n {\n    name: "output__0"'), "treeshap_output"),
    (lambda c: c.replace('string_value: "true" }\n  },\n  {\n    key: "is_classifier"',
                         'string_value: "maybe" }\n  },\n  {\n    key: "is_classifier"'), "predict_proba"),
])
def test_a_config_fil_would_not_run_is_refused_by_name(repository, tmp_path, change, words):
    root = repository[0]
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "xgboost.json").write_bytes((root / "xgboost_json" / "1" / "xgboost.json").read_bytes())
    config = (root / "xgboost_json" / "config.pbtxt").read_text()
    changed = change(config)
    assert changed != config
    (tmp_path / "m" / "config.pbtxt").write_text(changed)
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode != 0
    assert words in checked.stderr, checked.stderr


def test_the_fil_repository_passes_check(repository):
    checked = run_wirespeed("serve", "--check", "--models", repository[0])
    assert checked.returncode == 0, checked.stderr
    for name in MODELS:
        assert name in checked.stdout + checked.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
