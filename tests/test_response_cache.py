"""Triton's response cache: `--cache-config local,size=N` and a model's
`response_cache = true` (or `response_cache { enable: true }` in its
config.pbtxt). A repeated request answers from the cache, the same bytes,
without running the model; Triton's statistics (`cache_hit`,
`cache_miss`, `execution_count`) and metrics (`nv_cache_num_hits_per_model`)
count it as Triton's do; a reloaded model never answers from the one it
replaced; the byte budget holds.
"""

import re
import sys

import requests

from conftest import RunningServer, run_wirespeed

# Counts its calls in its answer: an answer from the cache repeats the count.
COUNTING = """
import numpy as np


class Model:
    def load(self, config):
        self.calls = 0
        self.scale = float(config["parameters"].get("scale", 2))

    def predict(self, inputs, parameters):
        self.calls += 1
        return {"y": inputs["x"] * self.scale, "calls": np.array([self.calls], dtype=np.int64)}
"""


def counting_config(scale, cache=True):
    return f"""backend = "python"
python = "{sys.executable}"
response_cache = {str(cache).lower()}
[parameters]
scale = "{scale}"
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1]
[[outputs]]
name = "y"
datatype = "FP32"
shape = [-1]
[[outputs]]
name = "calls"
datatype = "INT64"
shape = [1]
"""


IDENTITY_PBTXT = """name: "echo"
backend: "identity"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
response_cache { enable: true }
"""


def repository(root, scale=2, cache=True):
    (root / "counting").mkdir(parents=True, exist_ok=True)
    (root / "counting" / "model.py").write_text(COUNTING)
    (root / "counting" / "config.toml").write_text(counting_config(scale, cache))
    (root / "echo").mkdir(exist_ok=True)
    (root / "echo" / "config.pbtxt").write_text(IDENTITY_PBTXT)
    return root


def infer(server, x, model="counting"):
    body = {"inputs": [{"name": "x" if model == "counting" else "INPUT0", "shape": [len(x)], "datatype": "FP32",
                        "data": x}]}
    r = requests.post(f"http://{server.address}/v2/models/{model}/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r


def stats(server, model):
    r = requests.get(f"http://{server.address}/v2/models/{model}/stats", timeout=10)
    entry = r.json()["model_stats"][0]
    return entry["inference_stats"], entry["execution_count"]


def metric(server, name, model=None):
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    label = f'model="{model}",' if model else ""
    pattern = rf"^{name}\{{{label}[^}}]*\}} (\d+)" if model else rf"^{name}(?:\{{\}})? (\d+)"
    found = re.search(pattern, text, re.M)
    assert found, f"{name} not in the scrape"
    return int(found.group(1))


def test_a_repeated_request_is_the_same_bytes_without_running_the_model(tmp_path):
    server = RunningServer(repository(tmp_path), ["--cache-config", "local,size=1048576"])
    try:
        first = infer(server, [1.0, 2.0])
        again = infer(server, [1.0, 2.0])
        assert again.content == first.content
        assert again.json()["outputs"][1]["data"] == [1]
        other = infer(server, [1.0, 3.0])
        assert other.json()["outputs"][1]["data"] == [2]
        inference, executions = stats(server, "counting")
        assert inference["cache_hit"]["count"] == 1 and inference["cache_miss"]["count"] == 2
        assert inference["success"]["count"] == 3 and executions == 2
        assert metric(server, "nv_cache_num_hits_per_model", "counting") == 1
        assert metric(server, "nv_cache_num_misses_per_model", "counting") == 2
        # Triton's pbtxt turns it on too.
        assert infer(server, [5.0], "echo").content == infer(server, [5.0], "echo").content
        inference, _ = stats(server, "echo")
        assert inference["cache_hit"]["count"] == 1
    finally:
        server.stop()


def test_a_reloaded_model_never_answers_from_the_one_it_replaced(tmp_path):
    root = repository(tmp_path)
    server = RunningServer(root, ["--cache-config", "local,size=1048576", "--model-control-mode", "explicit",
                                  "--load-model", "counting"])
    try:
        assert infer(server, [1.0]).json()["outputs"][0]["data"] == [2.0]
        assert infer(server, [1.0]).json()["outputs"][1]["data"] == [1]
        (root / "counting" / "config.toml").write_text(counting_config(10))
        r = requests.post(f"http://{server.address}/v2/repository/models/counting/load", timeout=60)
        assert r.status_code == 200, r.text
        answer = infer(server, [1.0]).json()
        assert answer["outputs"][0]["data"] == [10.0] and answer["outputs"][1]["data"] == [1], answer
        assert metric(server, "wirespeed_response_cache_entries") == 1
    finally:
        server.stop()


def test_the_byte_budget_holds(tmp_path):
    server = RunningServer(repository(tmp_path), ["--cache-config", "local,size=2048"])
    try:
        for i in range(200):
            infer(server, [float(i)] * 8, "echo")
        held = metric(server, "wirespeed_response_cache_bytes")
        assert 0 < held <= 2048, held
        assert metric(server, "wirespeed_response_cache_entries") < 200
    finally:
        server.stop()


def test_without_a_cache_the_model_runs_and_the_log_says_why(tmp_path):
    server = RunningServer(repository(tmp_path))
    try:
        server.wait_for_log("the server has no cache: give --cache-config")
        infer(server, [1.0])
        assert infer(server, [1.0]).json()["outputs"][1]["data"] == [2]
    finally:
        server.stop()


def test_a_cache_config_it_cannot_honour_is_refused_by_name(tmp_path):
    root = repository(tmp_path)
    for value, says in (("redis,host=localhost", "not 'redis'"), ("local", "needs size=BYTES"),
                        ("local,size=lots", "not a number of bytes"), ("local,ttl=5", "not 'ttl=5'")):
        out = run_wirespeed("serve", "--models", root, "--http", "127.0.0.1:0", "--grpc", "off", "--check",
                            "--cache-config", value)
        assert out.returncode != 0 and says in out.stderr, (value, out.stderr)


ENSEMBLE = """backend = "ensemble"
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1]
[[outputs]]
name = "calls"
datatype = "INT64"
shape = [1]
[[steps]]
model = "counting"
inputs = { x = "x" }
outputs = { calls = "calls" }
"""

APPLICATION = """backend = "application"
policy = "fixed"
candidates = ["counting"]
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1]
[[outputs]]
name = "calls"
datatype = "INT64"
shape = [1]
"""


def test_the_models_a_composite_calls_answer_from_the_cache_too(tmp_path):
    # As Triton caches an ensemble's composing models: an ensemble's step
    # and an application's candidate are asked as a client asks them, so a
    # repeated step is answered from the cache and the model runs once.
    root = repository(tmp_path)
    for name, config in [("ens", ENSEMBLE), ("app", APPLICATION)]:
        (root / name).mkdir()
        (root / name / "config.toml").write_text(config)
    server = RunningServer(root, ["--cache-config", "local,size=1048576"])
    try:
        for model in ["ens", "app", "ens"]:
            body = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
            r = requests.post(f"http://{server.address}/v2/models/{model}/infer", json=body, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["outputs"][0]["data"] == [1], (model, r.text)
        inference, executions = stats(server, "counting")
        assert inference["cache_miss"]["count"] == 1 and inference["cache_hit"]["count"] == 2
        assert inference["success"]["count"] == 3 and executions == 1
    finally:
        server.stop()
