"""End to end: an unmodified tritonclient against `wirespeed serve` on the
bundled models, checked against the real xgboost package."""

import numpy as np
import pytest
import tritonclient.http as httpclient
import xgboost as xgb
from tritonclient.utils import InferenceServerException

from conftest import MODELS
from titanic import features, load_params, passenger_rows


@pytest.fixture(scope="module")
def client(demo_server):
    return httpclient.InferenceServerClient(url=demo_server.address)


@pytest.fixture(scope="module")
def passengers():
    params = load_params()
    rows = passenger_rows()
    return rows, np.array([features(r, params) for r in rows], dtype=np.float32)


def test_the_feature_transform_reproduces_the_published_reference_row(passengers):
    rows, x = passengers
    (i,) = [k for k, r in enumerate(rows) if r["PassengerId"] == "904"]
    # README.txt: "Go features = [1 0 1 0.2875 0.3333333333333333 0 0.322667 0 1 0 0 0]"
    expected = [1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0]
    np.testing.assert_allclose(x[i], np.array(expected, dtype=np.float32), rtol=0, atol=0)


def test_health(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("titanic")
    assert client.is_model_ready("titanic", model_version="1")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client):
    meta = client.get_server_metadata()
    assert meta["name"] == "wirespeed"
    assert isinstance(meta["version"], str) and meta["version"]
    assert isinstance(meta["extensions"], list)


def test_model_metadata(client):
    meta = client.get_model_metadata("titanic")
    assert meta["name"] == "titanic"
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 12]}]
    assert meta["outputs"] == [
        {"name": "probability", "datatype": "FP32", "shape": [-1]},
        {"name": "margin", "datatype": "FP32", "shape": [-1]},
    ]
    assert client.get_model_metadata("titanic", model_version="1") == meta


@pytest.mark.parametrize("model", ["titanic", "titanic_large"])
def test_all_418_passengers_match_xgboost(client, passengers, model):
    _, x = passengers
    booster = xgb.Booster(model_file=str(MODELS / model / "model.json"))
    want_p = booster.predict(xgb.DMatrix(x))
    want_m = booster.predict(xgb.DMatrix(x), output_margin=True)

    inp = httpclient.InferInput("features", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput("probability", binary_data=False),
        httpclient.InferRequestedOutput("margin", binary_data=False),
    ]
    result = client.infer(model, [inp], outputs=outputs, request_id="batch-418", model_version="1")

    assert result.get_response()["id"] == "batch-418"
    assert result.get_response()["model_name"] == model
    p, m = result.as_numpy("probability"), result.as_numpy("margin")
    assert p.shape == (418,) and p.dtype == np.float32
    np.testing.assert_allclose(p, want_p, rtol=1e-6, atol=0)
    np.testing.assert_allclose(m, want_m, rtol=1e-6, atol=0)
    # Not a constant model: the passengers get different answers.
    assert np.unique(p).size > 10


def test_outputs_list_is_honoured(client, passengers):
    _, x = passengers
    inp = httpclient.InferInput("features", [3, 12], "FP32")
    inp.set_data_from_numpy(x[:3], binary_data=False)
    result = client.infer("titanic", [inp], outputs=[httpclient.InferRequestedOutput("margin", binary_data=False)])
    names = [o["name"] for o in result.get_response()["outputs"]]
    assert names == ["margin"]


def test_tritonclient_defaults_binary_both_ways_match_xgboost(client, passengers):
    _, x = passengers
    booster = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    want_p = booster.predict(xgb.DMatrix(x))
    inp = httpclient.InferInput("features", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)  # tritonclient's default: binary tensor data
    result = client.infer("titanic", [inp])  # and binary outputs
    assert "data" not in result.get_response()["outputs"][0]
    np.testing.assert_allclose(result.as_numpy("probability"), want_p, rtol=1e-6, atol=0)
