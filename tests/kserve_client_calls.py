"""Calls wirespeed with kserve's own SDK and prints what it got, as JSON.

kserve's generated protos and tritonclient's both define the `inference`
package in protobuf's default descriptor pool, so the two cannot be
imported in one process: test_kserve_client.py runs this script in its
own. Usage: kserve_client_calls.py {rest-v1|rest-v2|grpc} ADDRESS FEATURES_JSON
"""

import asyncio
import json
import sys

import httpx
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig


def request_for(x):
    inp = InferInput(name="features", shape=list(x.shape), datatype="FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    return InferRequest(model_name="titanic", infer_inputs=[inp], request_id="gaps")


async def rest_v2(address, x):
    client = InferenceRESTClient(RESTConfig(protocol="v2"))
    try:
        base = f"http://{address}"
        response = await client.infer(base, request_for(x), model_name="titanic")
        return {
            "live": await client.is_server_live(base),
            "ready": await client.is_server_ready(base),
            "model_ready": await client.is_model_ready(base, "titanic"),
            "id": response.id,
            "outputs": {o.name: o.as_numpy().tolist() for o in response.outputs},
        }
    finally:
        await client.close()


async def rest_v1(address, x):
    client = InferenceRESTClient(RESTConfig(protocol="v1"))
    try:
        base = f"http://{address}"
        # v1 bodies are TF Serving's: rows in "instances"; the client
        # writes them with orjson, NaN as null.
        body = {"instances": x.tolist()}
        response = await client.infer(base, body, model_name="titanic")
        try:
            await client.explain(base, "titanic", body)
            explain = None
        except httpx.HTTPStatusError as e:
            explain = [e.response.status_code, e.response.json()["error"]]
        return {
            "live": await client.is_server_live(base),
            "model_ready": await client.is_model_ready(base, "titanic"),
            "outputs": {"probability": [p["probability"] for p in response["predictions"]]},
            "explain": explain,
        }
    finally:
        await client.close()


async def grpc(address, x):
    async with InferenceGRPCClient(address) as client:
        response = await client.infer(request_for(x))
        return {
            "live": await client.is_server_live(),
            "ready": await client.is_server_ready(),
            "model_ready": await client.is_model_ready("titanic"),
            # Not served is not ready: False, not an exception.
            "unknown_ready": await client.is_model_ready("nosuch"),
            "id": response.id,
            "outputs": {o.name: o.as_numpy().tolist() for o in response.outputs},
        }


if __name__ == "__main__":
    mode, address, features = sys.argv[1:4]
    x = np.array(json.loads(features, parse_constant=float), dtype=np.float32)
    run = {"rest-v1": rest_v1, "rest-v2": rest_v2, "grpc": grpc}[mode]
    print(json.dumps(asyncio.run(run(address, x))))
