"""Triton ensembles (`platform: "ensemble"`, `ensemble_scheduling`) served
unchanged: an ensemble of a Python preprocessing step, an ONNX model and a
FIL tree model, each with the `config.pbtxt` Triton's docs write, asked
with tritonclient as Triton's ensemble examples ask (`ensemble_image_client.py`:
the ensemble's inputs in, its outputs out, its configuration read for its
steps) and checked against the three run by hand: numpy for the Python
step, onnxruntime for the ONNX one, xgboost for the trees. Then what
Triton refuses at load (a cycle, a step naming a model not served, a tensor
no step gives) and a step's error, named by its step."""

import os

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from conftest import ROOT, RunningServer, run_wirespeed

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

RAW, HIDDEN = 8, 4

PREPROCESS_CONFIG = f"""
name: "preprocess"
backend: "python"
max_batch_size: 8
input [ {{ name: "RAW" data_type: TYPE_FP32 dims: [ {RAW} ] }} ]
output [ {{ name: "SCALED" data_type: TYPE_FP32 dims: [ {RAW} ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""

PREPROCESS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            scaled = (raw * 2.0 - 1.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SCALED", scaled)]))
        return responses
"""

LINEAR_CONFIG = f"""
name: "linear"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {RAW} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }} ]
"""

TREES_CONFIG = f"""
name: "trees"
backend: "fil"
max_batch_size: 8
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters [
  {{ key: "model_type" value: {{ string_value: "xgboost_json" }} }},
  {{ key: "is_classifier" value: {{ string_value: "false" }} }}
]
"""

ENSEMBLE_CONFIG = f"""
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {RAW} ] }} ]
output [
  {{ name: "FEATURES" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }},
  {{ name: "SCORE" data_type: TYPE_FP32 dims: [ 1 ] }}
]
ensemble_scheduling {{
  step [
    {{
      model_name: "trees"
      model_version: -1
      input_map {{ key: "input__0" value: "FEATURES" }}
      output_map {{ key: "output__0" value: "SCORE" }}
    }},
    {{
      model_name: "preprocess"
      model_version: -1
      input_map {{ key: "RAW" value: "INPUT" }}
      output_map {{ key: "SCALED" value: "scaled" }}
    }},
    {{
      model_name: "linear"
      model_version: -1
      input_map {{ key: "X" value: "scaled" }}
      output_map {{ key: "Y" value: "FEATURES" }}
    }}
  ]
}}
"""


def linear_onnx(weights, bias):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", RAW])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", HIDDEN])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "B"], ["Y"])],
        "linear", [x], [y],
        initializer=[numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    rng = np.random.default_rng(3)
    for name, config in [("preprocess", PREPROCESS_CONFIG), ("linear", LINEAR_CONFIG),
                         ("trees", TREES_CONFIG), ("pipeline", ENSEMBLE_CONFIG)]:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
    (root / "preprocess" / "1" / "model.py").write_text(PREPROCESS_MODEL)
    weights = rng.normal(size=(RAW, HIDDEN)).astype(np.float32)
    bias = rng.normal(size=HIDDEN).astype(np.float32)
    onnx.save(linear_onnx(weights, bias), root / "linear" / "1" / "model.onnx")
    x = rng.normal(size=(500, HIDDEN)).astype(np.float32)
    y = x[:, 0] * 2 + np.sin(x[:, 1]) - x[:, 2] * x[:, 3]
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 4}, xgb.DMatrix(x, label=y), 30)
    booster.save_model(root / "trees" / "1" / "xgboost.json")
    return root


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository)
    yield running
    running.stop()


def by_hand(repository, raw):
    """The three steps run by their own packages."""
    scaled = (raw * 2.0 - 1.0).astype(np.float32)
    session = onnxruntime.InferenceSession(str(repository / "linear" / "1" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    (features,) = session.run(None, {"X": scaled})
    booster = xgb.Booster()
    booster.load_model(repository / "trees" / "1" / "xgboost.json")
    score = booster.predict(xgb.DMatrix(features)).reshape(-1, 1)
    return features, score


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_ensemble_answers_as_its_three_steps_run_by_hand(server, repository, module):
    client = module.InferenceServerClient(server.address if module is httpclient else server.grpc_address)
    raw = np.random.default_rng(5).normal(size=(5, RAW)).astype(np.float32)
    inp = module.InferInput("INPUT", list(raw.shape), "FP32")
    inp.set_data_from_numpy(raw)
    result = client.infer("pipeline", [inp], outputs=[module.InferRequestedOutput("SCORE"),
                                                     module.InferRequestedOutput("FEATURES")])
    features, score = by_hand(repository, raw)
    np.testing.assert_allclose(result.as_numpy("FEATURES"), features, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.as_numpy("SCORE"), score, rtol=1e-5, atol=1e-5)
    # One output alone, the intermediate not asked for.
    only = client.infer("pipeline", [inp], outputs=[module.InferRequestedOutput("SCORE")])
    np.testing.assert_allclose(only.as_numpy("SCORE"), score, rtol=1e-5, atol=1e-5)
    assert only.as_numpy("FEATURES") is None


def test_the_configuration_lists_the_steps_and_the_statistics_count_them(server):
    """What ensemble clients and perf_analyzer read: the platform, the
    steps with their maps; and each composing model's statistics count
    the ensemble's requests, as Triton's do."""
    client = grpcclient.InferenceServerClient(server.grpc_address)
    config = client.get_model_config("pipeline").config
    assert config.platform == "ensemble"
    steps = config.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocess", "linear", "trees"]  # running order
    assert dict(steps[0].input_map) == {"RAW": "INPUT"}
    assert dict(steps[2].output_map) == {"output__0": "SCORE"}
    http = httpclient.InferenceServerClient(server.address).get_model_config("pipeline")
    assert http["ensemble_scheduling"]["step"][1]["output_map"] == {"Y": "FEATURES"}

    def count(model):
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
        return int(stats["inference_stats"]["success"].get("count", 0))

    before = {m: count(m) for m in ("pipeline", "preprocess", "linear", "trees")}
    inp = grpcclient.InferInput("INPUT", [1, RAW], "FP32")
    inp.set_data_from_numpy(np.zeros((1, RAW), np.float32))
    client.infer("pipeline", [inp])
    after = {m: count(m) for m in before}
    assert all(after[m] == before[m] + 1 for m in before), (before, after)


def test_a_bad_request_is_refused_in_the_ensembles_terms(server):
    client = httpclient.InferenceServerClient(server.address)
    inp = httpclient.InferInput("INPUT", [1, RAW + 1], "FP32")
    inp.set_data_from_numpy(np.zeros((1, RAW + 1), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("pipeline", [inp])
    assert raised.value.status() == "400" and "INPUT" in str(raised.value), raised.value
    big = httpclient.InferInput("INPUT", [9, RAW], "FP32")
    big.set_data_from_numpy(np.zeros((9, RAW), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("pipeline", [big])
    assert "batch-size must be <= 8" in str(raised.value), raised.value


def test_a_steps_error_names_the_step(repository, tmp_path):
    """A composing model unloaded while the ensemble stays: the ensemble's
    requests fail naming the step and the model; loading the ensemble
    again loads it too, as Triton's explicit mode does."""
    server = RunningServer(repository, extra_args=["--model-control-mode", "explicit", "--load-model", "*"])
    try:
        client = httpclient.InferenceServerClient(server.address)
        client.unload_model("linear")
        inp = httpclient.InferInput("INPUT", [1, RAW], "FP32")
        inp.set_data_from_numpy(np.zeros((1, RAW), np.float32))
        with pytest.raises(InferenceServerException) as raised:
            client.infer("pipeline", [inp])
        message = str(raised.value)
        assert "in ensemble 'pipeline'," in message and "'linear'" in message, message
        assert not client.is_model_ready("linear")
        client.load_model("pipeline")
        assert client.is_model_ready("linear") and client.is_model_ready("pipeline")
        np.testing.assert_array_equal(client.infer("pipeline", [inp]).as_numpy("FEATURES").shape, [1, HIDDEN])
    finally:
        server.stop()


@pytest.mark.parametrize("change, words", [
    (lambda c: c.replace('value: "scaled" }\n      output_map { key: "Y"', 'value: "SCORE" }\n      output_map { key: "Y"'),
     "cycle"),
    (lambda c: c.replace('model_name: "linear"', 'model_name: "nosuch"'), "model 'nosuch'"),
    (lambda c: c.replace('key: "X"', 'key: "Z"'), "no input 'Z'"),
    (lambda c: c.replace('value: "scaled" }\n      output_map { key: "Y"', 'value: "unmapped" }\n      output_map { key: "Y"'),
     "'unmapped'"),
    (lambda c: c.replace('key: "output__0" value: "SCORE"', 'key: "output__0" value: "OTHER"'),
     "ensemble output 'SCORE'"),
])
def test_graphs_triton_refuses_are_refused_at_load(repository, tmp_path, change, words):
    for name in ("preprocess", "linear", "trees"):
        os.symlink(repository / name, tmp_path / name)
    changed = change(ENSEMBLE_CONFIG)
    assert changed != ENSEMBLE_CONFIG
    (tmp_path / "pipeline" / "1").mkdir(parents=True)
    (tmp_path / "pipeline" / "config.pbtxt").write_text(changed)
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode != 0
    assert words in checked.stderr, checked.stderr


def test_an_ensemble_loaded_at_start_brings_its_steps(repository):
    """`--model-control-mode explicit --load-model pipeline`: as Triton, the
    ensemble's steps' models load with it."""
    server = RunningServer(repository, extra_args=["--model-control-mode", "explicit", "--load-model", "pipeline"])
    try:
        client = httpclient.InferenceServerClient(server.address)
        index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
        assert all(client.is_model_ready(m) for m in ("pipeline", "preprocess", "linear", "trees")), index
        inp = httpclient.InferInput("INPUT", [1, RAW], "FP32")
        inp.set_data_from_numpy(np.zeros((1, RAW), np.float32))
        features, score = by_hand(repository, np.zeros((1, RAW), np.float32))
        np.testing.assert_allclose(client.infer("pipeline", [inp]).as_numpy("SCORE"), score, rtol=1e-5, atol=1e-5)
    finally:
        server.stop()


DIAMOND_CONFIG = f"""
name: "diamond"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {RAW} ] }} ]
output [
  {{ name: "A" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }},
  {{ name: "B" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }}
]
ensemble_scheduling {{
  step [
    {{ model_name: "preprocess" model_version: -1
       input_map {{ key: "RAW" value: "INPUT" }} output_map {{ key: "SCALED" value: "s1" }} }},
    {{ model_name: "preprocess" model_version: -1
       input_map {{ key: "RAW" value: "INPUT" }} output_map {{ key: "SCALED" value: "s2" }} }},
    {{ model_name: "linear" model_version: -1
       input_map {{ key: "X" value: "s1" }} output_map {{ key: "Y" value: "A" }} }},
    {{ model_name: "linear" model_version: -1
       input_map {{ key: "X" value: "s2" }} output_map {{ key: "Y" value: "B" }} }}
  ]
}}
"""


def test_independent_steps_run_together_and_a_shared_tensor_reaches_each(repository, tmp_path):
    """Two branches from one input (Triton runs them at once): the input
    goes to both preprocessing steps, and each branch's answer is the
    three run by hand."""
    for name in ("preprocess", "linear", "trees"):
        os.symlink(repository / name, tmp_path / name)
    (tmp_path / "diamond" / "1").mkdir(parents=True)
    (tmp_path / "diamond" / "config.pbtxt").write_text(DIAMOND_CONFIG)
    server = RunningServer(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        raw = np.random.default_rng(9).normal(size=(3, RAW)).astype(np.float32)
        inp = grpcclient.InferInput("INPUT", [3, RAW], "FP32")
        inp.set_data_from_numpy(raw)
        result = client.infer("diamond", [inp])
        features, _ = by_hand(repository, raw)
        np.testing.assert_allclose(result.as_numpy("A"), features, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.as_numpy("B"), features, rtol=1e-5, atol=1e-6)
    finally:
        server.stop()
