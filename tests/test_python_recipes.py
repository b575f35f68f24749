"""The recipes of docs/python.md, run as written (python/examples/): a
FastAPI endpoint and an MLServer custom model that decode and encode with
wirespeed, called by tritonclient unchanged, in JSON and in binary, their
answers checked against the xgboost package."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient
import xgboost
from tritonclient.utils import InferenceServerException

from conftest import MLSERVER, MODELS, ROOT, free_port, http_ok, wait_until
from titanic import features, load_params, passenger_rows

EXAMPLES = ROOT / "python" / "examples"


def titanic_batch(rows=50):
    params = load_params()
    return np.array([features(r, params) for r in passenger_rows()[:rows]], dtype=np.float32)


def start(command, ready_url, env, cwd=None):
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    wait_until(ready_url, lambda: process.poll() is None and http_ok(ready_url))
    return process


def ask(url, model, x, binary):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("features", list(x.shape), "FP32").set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("probability", binary_data=binary)
    return client.infer(model, [inp], outputs=[out], request_id="r").as_numpy("probability")


@pytest.fixture(scope="module")
def fastapi_app():
    port = free_port()
    env = {**os.environ, "WIRESPEED_MODEL": str(MODELS / "titanic")}
    process = start([sys.executable, "-m", "uvicorn", "--app-dir", str(EXAMPLES), "fastapi_app:app",
                     "--host", "127.0.0.1", "--port", str(port)], f"http://127.0.0.1:{port}/docs", env)
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=15)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_the_fastapi_recipe_answers_tritonclient(fastapi_app, binary):
    x = titanic_batch()
    booster = xgboost.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    np.testing.assert_array_equal(ask(fastapi_app, "titanic", x, binary), booster.inplace_predict(x))
    client = httpclient.InferenceServerClient(fastapi_app)
    wrong = httpclient.InferInput("features", [1, 3], "FP32").set_data_from_numpy(np.ones((1, 3), np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("titanic", [wrong])
    assert refused.value.status() == "400" and "12 features" in refused.value.message()
    bad = client._post("v2/models/titanic/infer", b'{"inputs": [{"name": "features"', None, None)
    assert bad.status_code == 400 and b"syntax" in bad.read()


def test_the_mlserver_recipe_answers_tritonclient(tmp_path):
    if not MLSERVER.exists():
        pytest.fail(f"{MLSERVER} is missing: scripts/test installs MLServer into .venv-mlserver")
    http, grpc, metrics = free_port(), free_port(), free_port()
    (tmp_path / "settings.json").write_text(
        f'{{"host": "127.0.0.1", "http_port": {http}, "grpc_port": {grpc}, "metrics_port": {metrics},'
        f' "parallel_workers": 0}}'
    )
    (tmp_path / "titanic").mkdir()
    (tmp_path / "titanic" / "model.json").write_bytes((MODELS / "titanic" / "model.json").read_bytes())
    (tmp_path / "titanic" / "model-settings.json").write_text(
        '{"name": "titanic", "implementation": "mlserver_model.FastTrees", "parameters": {"uri": "./model.json"}}'
    )
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES)}
    process = start([str(MLSERVER), "start", str(tmp_path)], f"http://127.0.0.1:{http}/v2/models/titanic/ready",
                    env, cwd=tmp_path)
    try:
        x = titanic_batch()
        want = xgboost.Booster(model_file=str(MODELS / "titanic" / "model.json")).inplace_predict(x)
        for binary in (True, False):
            np.testing.assert_array_equal(ask(f"127.0.0.1:{http}/fast", "titanic", x, binary), want)
        # MLServer's own endpoint, the same model: the same answers, slower.
        np.testing.assert_array_equal(ask(f"127.0.0.1:{http}", "titanic", x, False).ravel(), want)
    finally:
        process.terminate()
        process.wait(timeout=15)
