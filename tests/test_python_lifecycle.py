"""`backend = "python"`: a Python model's life outside its requests. A
config.pbtxt asking what cannot be honoured, `finalize` and the workers'
end at unload, the interpreter a model's config names (a venv of its own,
one that is not there), and an `initialize` that never ends."""

import textwrap
from pathlib import Path

import numpy as np
import requests
import tritonclient.http as httpclient

from conftest import RunningServer, wait_until
from python_folders import ADD_SUB_CONFIG, ADD_SUB_MODEL, PYTHON, python_model


def test_a_config_pbtxt_wirespeed_cannot_honour_is_refused_by_name(tmp_path):
    from conftest import run_wirespeed

    folder = tmp_path / "repo" / "m"
    (folder / "1").mkdir(parents=True)
    # Decoupled is for models that stream: the Python backend's, not ONNX's.
    (folder / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmodel_transaction_policy { decoupled: true }\n')
    (folder / "1" / "model.onnx").write_bytes(b"")
    result = run_wirespeed("serve", "--models", tmp_path / "repo", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
    assert result.returncode != 0
    assert "config.pbtxt" in result.stderr and "decoupled" in result.stderr, result.stderr


def test_unloading_runs_finalize_and_ends_the_workers(tmp_path):
    marker = tmp_path / "finalized"
    folder = tmp_path / "repo" / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        ADD_SUB_CONFIG.replace('name: "add_sub"', 'name: "m"')
        + f'\nparameters: {{ key: "marker" value: {{ string_value: "{marker}" }} }}\n'
    )
    (folder / "1" / "model.py").write_text(ADD_SUB_MODEL.replace(
        '        print("Cleaning up...")',
        '        path = self.model_config["parameters"]["marker"]["string_value"]\n'
        '        with open(path, "w") as f:\n'
        '            f.write("finalized")',
    ))
    server = RunningServer(tmp_path / "repo", extra_args=["--model-control-mode", "explicit", "--load-model", "m"])
    try:
        url = f"http://{server.address}"
        server.wait_for_log("python worker ready model=m")
        workers = [int(p) for t in Path(f"/proc/{server.process.pid}/task").glob("*/children")
                   for p in t.read_text().split()]
        assert len(workers) == 1
        assert requests.post(f"{url}/v2/repository/models/m/unload").status_code == 200
        wait_until("finalize to run", lambda: marker.exists() and marker.read_text() == "finalized")
        wait_until("the worker to end", lambda: not Path(f"/proc/{workers[0]}").exists()
                   or "zombie" in Path(f"/proc/{workers[0]}/status").read_text())
        assert requests.post(f"{url}/v2/repository/models/m/load").status_code == 200
        client = httpclient.InferenceServerClient(server.address)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(np.ones(4, dtype=np.float32))
        inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
        assert client.infer("m", inputs).as_numpy("OUTPUT0").tolist() == [2.0] * 4
    finally:
        server.stop()


def test_a_model_runs_in_the_venv_its_config_names(tmp_path):
    import subprocess
    import sysconfig

    folder = tmp_path / "repo" / "v"
    folder.mkdir(parents=True)
    env = folder / "env"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (folder / "config.toml").write_text(textwrap.dedent("""
        backend = "python"
        venv = "env"
        [[inputs]]
        name = "x"
        datatype = "INT32"
        shape = [1]
        [[outputs]]
        name = "prefix"
        datatype = "BYTES"
        shape = [1]
    """))
    (folder / "model.py").write_text(textwrap.dedent("""
        import sys
        import numpy as np

        class Model:
            def predict(self, inputs, parameters):
                return {"prefix": np.array([sys.prefix], dtype=np.object_)}
    """))
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}]}
    # A bare venv has no numpy: the model is not ready, and says why.
    server = RunningServer(tmp_path / "repo")
    try:
        r = requests.post(f"http://{server.address}/v2/models/v/infer", json=body)
        assert r.status_code == 503
        assert f"the model's Python ({env}/bin/python) cannot import numpy" in r.json()["error"], r.text
    finally:
        server.stop()
    # Given the test venv's packages, it serves, from its own prefix.
    site = subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "test-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    server = RunningServer(tmp_path / "repo")
    try:
        r = requests.post(f"http://{server.address}/v2/models/v/infer", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [str(env)]
    finally:
        server.stop()


def test_an_interpreter_that_is_not_there_fails_the_load_naming_it(tmp_path):
    from conftest import run_wirespeed

    folder = tmp_path / "repo" / "m"
    python_model(folder, "class Model:\n    def predict(self, inputs, parameters):\n        return {}\n",
                 [("x", "FP32", [1])], [("y", "FP32", [1])])
    config = folder / "config.toml"
    config.write_text(config.read_text().replace(f'python = "{PYTHON}"', 'python = "/no/such/python3"'))
    result = run_wirespeed("serve", "--models", tmp_path / "repo", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
    assert result.returncode != 0
    assert "cannot start the model's Python '/no/such/python3'" in result.stderr, result.stderr


SPINNING_INITIALIZE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Never done, and talking to the server all along.
        self.family = pb_utils.MetricFamily(name="spins", description="d", kind=pb_utils.MetricFamily.COUNTER)
        spins = self.family.Metric()
        while True:
            spins.increment(1)

    def execute(self, requests):
        return []
"""


def test_an_initialize_that_never_ends_is_bounded_by_the_load_timeout_though_it_uses_metrics(tmp_path):
    """Each metric operation is a message to the server; the load's time
    bounds them all, not each one."""
    python_model(tmp_path / "repo" / "spinning", SPINNING_INITIALIZE, [("x", "FP32", [1])], [("y", "FP32", [1])],
                 keys="load_timeout_s = 2")
    server = RunningServer(tmp_path / "repo")
    try:
        server.wait_for_log("loading took longer than 2s (load_timeout_s)")
        r = requests.post(f"http://{server.address}/v2/models/spinning/infer",
                          json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})
        assert r.status_code == 503, r.text
        assert requests.get(f"http://{server.address}/v2/health/live").status_code == 200
    finally:
        server.stop()
