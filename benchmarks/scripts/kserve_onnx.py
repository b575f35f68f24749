#!/usr/bin/env python3
"""KServe's Python ModelServer serving ONNX files with onnxruntime, the way
a KServe user without Triton serves an ONNX model: a `kserve.Model` whose
`predict` runs an `InferenceSession` (default options). One model a
folder of MODELS (`NAME/model.onnx`), bound to 127.0.0.1 only.

    python kserve_onnx.py MODELS --http_port 8080 --grpc_port 8081
"""

import sys
import uuid
from pathlib import Path

import numpy as np

MODELS = Path(sys.argv.pop(1))
if "--enable_latency_logging" not in sys.argv:
    sys.argv += ["--enable_latency_logging", "False"]

from harness import kserve_on_loopback  # noqa: E402

# KServe binds every interface; a benchmark binds loopback only.
kserve_on_loopback()

import kserve  # noqa: E402
import onnxruntime  # noqa: E402
from kserve import InferOutput, InferRequest, InferResponse  # noqa: E402

DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64", np.dtype(np.int64): "INT64",
             np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL", np.dtype(object): "BYTES"}


class OnnxModel(kserve.Model):
    def __init__(self, name, path):
        super().__init__(name)
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.ready = True

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        feed = {i.name: i.as_numpy() for i in payload.inputs}
        outputs = []
        for name, value in zip(self.names, self.session.run(None, feed)):
            out = InferOutput(name=name, shape=list(value.shape), datatype=DATATYPES[value.dtype])
            out.set_data_from_numpy(value, binary_data=payload.use_binary_outputs)
            outputs.append(out)
        return InferResponse(model_name=self.name, infer_outputs=outputs,
                             response_id=payload.id or str(uuid.uuid4()))


if __name__ == "__main__":
    models = [OnnxModel(folder.name, folder / "model.onnx") for folder in sorted(MODELS.iterdir())
              if (folder / "model.onnx").is_file()]
    kserve.ModelServer().start(models)
