"""Calls a server with kserve's own SDK, or computes what KServe's runtimes
answer, and prints it as JSON (test_kserve_folders.py runs it in a process
of its own: kserve's protos and tritonclient's cannot share one).

Usage:
  kserve_folder_calls.py call {rest-v1|rest-v2|grpc} ADDRESS MODEL REQUEST_JSON
  kserve_folder_calls.py expect {sklearn|xgboost|lightgbm} MODEL_FILE MODEL REQUEST_JSON

REQUEST_JSON is `{"instances": ...}` for v1, or one input,
`{"name", "datatype", "shape", "data"}`, for v2. `expect` runs the
framework's own predict on the file the way KServe's sklearnserver,
xgbserver and lgbserver do (their model.py: joblib.load and predict or
predict_proba; xgboost.Booster.predict on a DMatrix; lightgbm.Booster.predict),
through kserve's own get_predict_input and get_predict_response.
"""

import asyncio
import json
import os
import sys

import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.utils.utils import get_predict_input, get_predict_response


def v2_request(model, spec):
    array = np.array(spec["data"], dtype={"FP32": np.float32, "FP64": np.float64}[spec["datatype"]])
    inp = InferInput(name=spec["name"], shape=list(array.shape), datatype=spec["datatype"])
    inp.set_data_from_numpy(array)
    return InferRequest(model_name=model, infer_inputs=[inp], request_id="r1")


def outputs(response):
    return {
        "outputs": [
            {"name": o.name, "datatype": o.datatype, "shape": list(o.shape), "data": o.as_numpy().tolist()}
            for o in response.outputs
        ]
    }


async def call(mode, address, model, request):
    if mode == "grpc":
        async with InferenceGRPCClient(address) as client:
            return outputs(await client.infer(v2_request(model, request)))
    client = InferenceRESTClient(RESTConfig(protocol=mode.removeprefix("rest-")))
    try:
        base = f"http://{address}"
        if mode == "rest-v1":
            return await client.infer(base, request, model_name=model)
        return outputs(await client.infer(base, v2_request(model, request), model_name=model))
    finally:
        await client.close()


def expect(runtime, path, model, request):
    if runtime == "sklearn":
        import joblib

        estimator = joblib.load(path)
        predict = estimator.predict
        if os.environ.get("PREDICT_PROBA", "false").lower() == "true" and hasattr(estimator, "predict_proba"):
            predict = estimator.predict_proba
    elif runtime == "xgboost":
        import xgboost as xgb

        booster = xgb.Booster(params={"nthread": 1}, model_file=path)

        def predict(instances):
            return booster.predict(xgb.DMatrix(instances, nthread=1))
    else:
        import lightgbm

        booster = lightgbm.Booster(params={"nthread": 1}, model_file=path)
        predict = booster.predict
    payload = request if "instances" in request else v2_request(model, request)
    answer = get_predict_response(payload, predict(get_predict_input(payload)), model)
    return answer if isinstance(answer, dict) else outputs(answer)


if __name__ == "__main__":
    verb, mode, where, model, request = sys.argv[1:6]
    request = json.loads(request)
    if verb == "call":
        print(json.dumps(asyncio.run(call(mode, where, model, request))))
    else:
        print(json.dumps(expect(mode, where, model, request)))
