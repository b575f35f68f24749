"""A V2 inference endpoint in FastAPI, decoded and encoded by wirespeed.

    WIRESPEED_MODEL=models/titanic uvicorn fastapi_app:app --port 8000

Any V2 client (tritonclient, the kserve SDK, curl) calls it as it calls
Triton: JSON, or Triton's binary tensor data. The body is decoded straight
into numpy arrays (no json.loads, no Python lists), the model is
wirespeed's tree runtime, and the answer is written by wirespeed too.
"""

import os

import wirespeed
from fastapi import FastAPI, Request, Response

app = FastAPI()
MODEL = os.environ.get("WIRESPEED_MODEL", "models/titanic")
model = wirespeed.trees.load(MODEL)
NAME = os.path.basename(os.path.normpath(MODEL))


@app.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request) -> Response:
    if name != NAME:
        return Response(f'{{"error": "unknown model \'{name}\'"}}', status_code=404, media_type="application/json")
    header = request.headers.get("inference-header-content-length")
    try:
        decoded = wirespeed.decode_request(await request.body(), int(header) if header else None)
        x = decoded.inputs["features"]
        outputs = {"probability": model.predict(x), "margin": model.predict_margin(x)}
    except (wirespeed.DecodeError, KeyError, ValueError) as error:
        message = f"missing input {error}" if isinstance(error, KeyError) else str(error)
        return Response(wirespeed.encode_error(message), status_code=400, media_type="application/json")
    # The outputs asked for, in binary when the client asked for binary.
    asked = {o["name"]: o["parameters"].get("binary_data", False) for o in decoded.outputs}
    if asked:
        outputs = {k: v for k, v in outputs.items() if k in asked}
    binary = any(asked.values()) or decoded.parameters.get("binary_data_output", False)
    body, header_length = wirespeed.encode_response(
        outputs, model_name=NAME, model_version="1", id=decoded.id, binary=binary
    )
    headers = {"Inference-Header-Content-Length": str(header_length)} if binary else {}
    media_type = "application/octet-stream" if binary else "application/json"
    return Response(body, media_type=media_type, headers=headers)
