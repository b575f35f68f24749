#!/usr/bin/env python3
"""KServe's ModelServer (the `kserve` package) with the models the upstream
tests put wirespeed in front of.

  xgb          an XGBoost classifier read from XGB_MODEL; output "predict" (INT64 [N, 1])
  echo_fp32, echo_int64, echo_bool, echo_bytes
               output "y" is input "x"
  sleepy       waits SLEEP_S seconds before echoing; a call cancelled while it
               waits appends a line to CANCEL_LOG

Usage: kserve_models.py XGB_MODEL CANCEL_LOG --http_port P --grpc_port Q
Binds 127.0.0.1 only (KServe binds every interface by default).
"""
import asyncio
import sys
import uuid

XGB_MODEL = sys.argv.pop(1)
CANCEL_LOG = sys.argv.pop(1)
SLEEP_S = 30
sys.argv += ["--enable_latency_logging", "False"]

import uvicorn  # noqa: E402

_config = uvicorn.Config.__init__


def _loopback(self, *args, **kwargs):
    kwargs["host"] = "127.0.0.1"
    _config(self, *args, **kwargs)


uvicorn.Config.__init__ = _loopback
from grpc.aio import _server as _grpc_server  # noqa: E402

_add_port = _grpc_server.Server.add_insecure_port
_grpc_server.Server.add_insecure_port = lambda self, addr: _add_port(self, addr.replace("[::]", "127.0.0.1"))

import kserve  # noqa: E402
import numpy as np  # noqa: E402
import xgboost  # noqa: E402
from kserve import InferOutput, InferRequest, InferResponse  # noqa: E402


def answer(model, payload, name, array, datatype):
    out = InferOutput(name=name, shape=list(array.shape), datatype=datatype)
    out.set_data_from_numpy(array, binary_data=payload.use_binary_outputs)
    return InferResponse(model_name=model.name, infer_outputs=[out], response_id=payload.id or str(uuid.uuid4()))


class Xgb(kserve.Model):
    def __init__(self):
        super().__init__("xgb")
        self.booster = xgboost.XGBClassifier()
        self.booster.load_model(XGB_MODEL)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        x = payload.inputs[0].as_numpy()
        y = self.booster.predict(x).astype(np.int64).reshape(-1, 1)
        return answer(self, payload, "predict", y, "INT64")


class Echo(kserve.Model):
    def __init__(self, name, datatype):
        super().__init__(name)
        self.datatype = datatype
        self.ready = True

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        return answer(self, payload, "y", payload.inputs[0].as_numpy(), self.datatype)


class Sleepy(kserve.Model):
    def __init__(self):
        super().__init__("sleepy")
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        try:
            await asyncio.sleep(SLEEP_S)
        except asyncio.CancelledError:
            with open(CANCEL_LOG, "a") as log:
                log.write("cancelled\n")
            raise
        return answer(self, payload, "y", payload.inputs[0].as_numpy(), "FP32")


if __name__ == "__main__":
    kserve.ModelServer().start(
        [
            Xgb(),
            Echo("echo_fp32", "FP32"),
            Echo("echo_int64", "INT64"),
            Echo("echo_bool", "BOOL"),
            Echo("echo_bytes", "BYTES"),
            Sleepy(),
        ]
    )
