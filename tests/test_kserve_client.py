"""kserve's own SDK, unmodified: InferenceRESTClient with protocol v1 and
v2, and InferenceGRPCClient, against the Titanic model, with missing
values (NaN) among the features. kserve's client writes NaN as JSON null
(orjson), which wirespeed reads as a missing value, as KServe's server
does. Reference: the xgboost package, which reads NaN as missing too.

The SDK runs in a process of its own (kserve_client_calls.py): its protos
and tritonclient's cannot share one."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from conftest import MODELS

CALLS = Path(__file__).resolve().parent / "kserve_client_calls.py"


def features_with_gaps():
    rng = np.random.default_rng(11)
    x = rng.random((8, 12), dtype=np.float32)
    x[0, 3] = np.nan  # a passenger without an age
    x[5, :4] = np.nan
    x[7, 11] = np.nan
    return x


def xgboost_says(x):
    booster = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    return booster.predict(xgb.DMatrix(x, missing=np.nan))


def kserve(mode, address, x):
    done = subprocess.run(
        [sys.executable, str(CALLS), mode, address, json.dumps(x.tolist())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["rest-v2", "grpc"])
def test_v2_clients_with_missing_values(demo_server, mode):
    x = features_with_gaps()
    address = demo_server.address if mode == "rest-v2" else demo_server.grpc_address
    got = kserve(mode, address, x)
    assert got["live"] and got["ready"] and got["model_ready"]
    if mode == "grpc":
        assert got["unknown_ready"] is False
    assert got["id"] == "gaps"
    np.testing.assert_allclose(np.array(got["outputs"]["probability"]), xgboost_says(x), rtol=1e-6)


def test_v1_client(demo_server):
    x = features_with_gaps()
    got = kserve("rest-v1", demo_server.address, x)
    assert got["live"] is True and got["model_ready"] is True
    np.testing.assert_allclose(np.array(got["outputs"]["probability"]), xgboost_says(x), rtol=1e-6)
    status, error = got["explain"]
    assert status == 501 and ":explain" in error
