"""kserve's own SDK, unmodified: InferenceRESTClient with protocol v1 and
v2, and InferenceGRPCClient, against the Titanic model, with missing
values (NaN) among the features. kserve's client writes NaN as JSON null
(orjson), which wirespeed reads as a missing value, as KServe's server
does. Reference: the xgboost package, which reads NaN as missing too."""

import asyncio

import httpx
import numpy as np
import pytest
import xgboost as xgb
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

from conftest import MODELS


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


def request_for(x):
    inp = InferInput(name="features", shape=list(x.shape), datatype="FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    return InferRequest(model_name="titanic", infer_inputs=[inp], request_id="gaps")


def run(coroutine):
    return asyncio.run(coroutine)


def test_rest_v2_client_with_missing_values(demo_server):
    async def go():
        client = InferenceRESTClient(RESTConfig(protocol="v2"))
        try:
            base = f"http://{demo_server.address}"
            assert await client.is_server_live(base)
            assert await client.is_server_ready(base)
            assert await client.is_model_ready(base, "titanic")
            x = features_with_gaps()
            response = await client.infer(base, request_for(x), model_name="titanic")
            return x, response
        finally:
            await client.close()

    x, response = run(go())
    got = {o.name: o.as_numpy() for o in response.outputs}
    np.testing.assert_allclose(got["probability"], xgboost_says(x), rtol=1e-6)
    assert response.id == "gaps"


def test_rest_v1_client(demo_server):
    async def go():
        client = InferenceRESTClient(RESTConfig(protocol="v1"))
        try:
            base = f"http://{demo_server.address}"
            assert await client.is_server_live(base)
            assert await client.is_model_ready(base, "titanic") is True
            x = features_with_gaps()
            # v1 bodies are TF Serving's: rows in "instances"; kserve's
            # client writes them with orjson, NaN as null.
            body = {"instances": [[None if np.isnan(v) else float(v) for v in row] for row in x]}
            response = await client.infer(base, body, model_name="titanic")
            with pytest.raises(httpx.HTTPStatusError, match="501"):
                await client.explain(base, "titanic", body)
            return x, response
        finally:
            await client.close()

    x, response = run(go())
    probability = np.array([p["probability"] for p in response["predictions"]], dtype=np.float32)
    np.testing.assert_allclose(probability, xgboost_says(x), rtol=1e-6)


def test_grpc_client_with_missing_values(demo_server):
    async def go():
        async with InferenceGRPCClient(demo_server.grpc_address) as client:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("titanic")
            x = features_with_gaps()
            return x, await client.infer(request_for(x))

    x, response = run(go())
    got = {o.name: o.as_numpy() for o in response.outputs}
    np.testing.assert_allclose(got["probability"], xgboost_says(x), rtol=1e-6)
