"""Model repositories in Azure Blob Storage (Azure's own emulator,
Azurite), Google Cloud Storage (fake-gcs-server) and on a plain HTTP
server (KServe's `storageUri` to one model file); answers held to the
xgboost package's own predictions."""

import http.server
import shutil
import threading
from functools import partial

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import xgboost

from conftest import MODELS, RunningServer, run_wirespeed
from object_storage import AZURITE_ACCOUNT, Azurite
from test_storage_s3 import assert_answers_as_xgboost


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    emulator = Azurite(tmp_path_factory.mktemp("azurite"))
    yield emulator
    emulator.stop()


@pytest.mark.parametrize("form", ["az://{container}/{prefix}", "as://{account}/{container}/{prefix}"])
def test_a_repository_in_azure_blob_storage(azurite, tmp_path, form):
    """object_store's `az://` and Triton's `as://account/...`, the account
    and key from Azure's connection string, as Azure's tools and Azurite's
    documentation give it."""
    shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
    azurite.upload(tmp_path / "repo", "models", "azure")
    url = form.format(account=AZURITE_ACCOUNT, container="models", prefix="azure")
    server = RunningServer(url, env=azurite.env(), extra_args=["--model-cache-dir", str(tmp_path / "cache")])
    try:
        assert_answers_as_xgboost(httpclient.InferenceServerClient(server.address))
    finally:
        server.stop()


def test_a_wrong_azure_key_is_named(azurite, tmp_path):
    shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
    azurite.upload(tmp_path / "repo", "models", "wrongkey")
    wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
    done = run_wirespeed("serve", "--models", "az://models/wrongkey", "--model-cache-dir", tmp_path / "cache",
                         "--check", env=azurite.env(key=wrong))
    assert done.returncode != 0
    assert "cannot read the model repository az://models/wrongkey" in done.stderr, done.stderr
    assert "credentials were refused" in done.stderr, done.stderr
    assert wrong not in done.stderr


@pytest.fixture
def http_folder(tmp_path):
    """A plain HTTP server (Python's) on a folder: no listing, files only."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_one_model_file_over_http_as_kserve_takes_it(http_folder, tmp_path, xgb_model):
    """KServe's `storageUri: https://.../model.json`: the one file, served
    under `--model-name` as KServe's xgbserver serves it."""
    root, base = http_folder
    path, _, rows = xgb_model
    shutil.copy(path, root / "model.json")
    server = RunningServer(f"{base}/model.json", extra_args=["--model-name", "xgb",
                                                             "--model-cache-dir", str(tmp_path / "cache")])
    try:
        answer = requests.post(f"http://{server.address}/v1/models/xgb:predict",
                               json={"instances": rows[:5].tolist()}, timeout=30)
        assert answer.status_code == 200, answer.text
        expected = xgboost.Booster(model_file=str(path)).predict(xgboost.DMatrix(rows[:5]))
        assert np.allclose(answer.json()["predictions"], expected, atol=1e-6)
    finally:
        server.stop()


def test_a_missing_file_over_http_is_named(http_folder, tmp_path):
    _, base = http_folder
    done = run_wirespeed("serve", "--models", f"{base}/nothing/model.json",
                         "--model-cache-dir", tmp_path / "cache", "--check")
    assert done.returncode != 0
    assert f"cannot read the model repository {base}/nothing/model.json" in done.stderr, done.stderr


def test_a_signed_url_is_refused_without_showing_its_signature(tmp_path):
    done = run_wirespeed("serve", "--models", "https://example.invalid/m/model.json?X-Amz-Signature=SECRET",
                         "--model-cache-dir", tmp_path / "cache", "--check")
    assert done.returncode != 0
    assert "carries a query" in done.stderr and "https://example.invalid/m/model.json" in done.stderr, done.stderr
    assert "SECRET" not in done.stderr
