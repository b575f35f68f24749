"""An MLServer custom model whose V2 endpoint is decoded and encoded by
wirespeed, and whose predictions are wirespeed's tree runtime.

model-settings.json:

    {"name": "titanic", "implementation": "mlserver_model.FastTrees",
     "parameters": {"uri": "./model.json"}}

MLServer's own `/v2/models/titanic/infer` still works (its pydantic
decoding); the custom handler serves the same protocol under `/fast`, so
tritonclient calls it with `url="host:8080/fast"`.
"""

import wirespeed
from fastapi import Request, Response
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.handlers import custom_handler
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class FastTrees(MLModel):
    async def load(self) -> bool:
        # The uri, relative to model-settings.json's folder.
        self.trees = wirespeed.trees.load(await get_model_uri(self.settings))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("probability", self.trees.predict(x))],
        )

    @custom_handler(rest_path="/fast/v2/models/titanic/infer")
    async def fast_infer(self, request: Request) -> Response:
        header = request.headers.get("inference-header-content-length")
        try:
            decoded = wirespeed.decode_request(await request.body(), int(header) if header else None)
            probability = self.trees.predict(decoded.inputs["features"])
        except (wirespeed.DecodeError, KeyError, ValueError) as error:
            return Response(wirespeed.encode_error(str(error)), status_code=400, media_type="application/json")
        binary = any(o["parameters"].get("binary_data") for o in decoded.outputs) or decoded.parameters.get(
            "binary_data_output", False
        )
        body, header_length = wirespeed.encode_response(
            {"probability": probability}, model_name=self.name, id=decoded.id, binary=binary
        )
        headers = {"Inference-Header-Content-Length": str(header_length)} if binary else {}
        return Response(body, media_type="application/octet-stream" if binary else "application/json",
                        headers=headers)
