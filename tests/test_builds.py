"""The tree-only build (`cargo build -p wirespeed --no-default-features`,
which scripts/test copies to target/debug/wirespeed-trees-only): it serves
the bundled Titanic models, answering what the real xgboost package does,
through an unmodified tritonclient; a model folder naming a backend the
build left out stops it with a message naming the feature; and the
commands of the features it lacks are not there."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import xgboost as xgb

import conftest
from conftest import MODELS, ROOT, RunningServer
from titanic import features, load_params, passenger_rows


@pytest.fixture(scope="module")
def trees_only():
    path = Path(os.environ.get("WIRESPEED_TREES_ONLY_BIN", ROOT / "target" / "debug" / "wirespeed-trees-only"))
    if not path.is_file():
        pytest.fail(f"{path} does not exist: scripts/test builds it (cargo build -p wirespeed --no-default-features)")
    return path


def test_the_tree_only_build_answers_as_xgboost_does(trees_only, monkeypatch):
    monkeypatch.setenv("WIRESPEED_BIN", str(trees_only))
    server = RunningServer(MODELS)
    try:
        client = httpclient.InferenceServerClient(url=server.address)
        params = load_params()
        x = np.array([features(r, params) for r in passenger_rows()], dtype=np.float32)
        model = xgb.Booster()
        model.load_model(str(MODELS / "titanic" / "model.json"))
        expected = model.predict(xgb.DMatrix(x))
        inp = httpclient.InferInput("features", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("titanic", [inp]).as_numpy("probability")
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)


def test_a_backend_left_out_is_named_with_its_feature(trees_only, tmp_path):
    model = tmp_path / "net"
    model.mkdir()
    (model / "config.toml").write_text('backend = "onnx"\nmodel_file = "model.onnx"\n')
    done = subprocess.run(
        [str(trees_only), "serve", "--models", str(tmp_path), "--http", "127.0.0.1:0", "--grpc", "off"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "backend 'onnx' is not in this build of wirespeed" in done.stderr, done.stderr
    assert "'onnx' feature" in done.stderr, done.stderr


def test_the_proxy_command_is_left_out_too(trees_only):
    done = subprocess.run([str(trees_only), "proxy", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "proxy" in done.stderr
    assert "serve" in subprocess.run([str(trees_only), "--help"], capture_output=True, text=True).stdout


def test_the_default_build_has_every_backend():
    done = subprocess.run(
        [str(conftest.wirespeed_binary()), "proxy", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
