#!/usr/bin/env python3
"""TF Serving's gRPC Predict against V2's gRPC ModelInfer on the same
server, the same grpcio client and the same tensors, rounds interleaved.

- one Titanic row (12 FP32) to `titanic`;
- one 262144x8 FP32 tensor to `identity_fp32`, as `tensor_content` and as
  `raw_input_contents`.

The messages are the published ones: tritonclient's `grpc_service_pb2`
for V2, and the tensorflow-serving-api wheel's through
tests/tfserving_protos.py for TF Serving.

TF Serving answers in the typed fields (`float_val`), as wirespeed does by
default; with a second address (a `wirespeed serve --tf-tensor-content`
on the same models), Predict's answer in `tensor_content` is measured
beside it, in the same rounds.

Usage: tf_grpc.py HOST:GRPC_PORT [ROUNDS] [HOST:GRPC_PORT_TENSOR_CONTENT]
(`wirespeed serve` on the bundled models; scripts/test installs the
packages into .venv)
"""
import statistics
import sys
import time
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as v2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from tfserving_protos import load  # noqa: E402

ADDRESS = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
CONTENT_ADDRESS = sys.argv[3] if len(sys.argv) > 3 else None
_, message = load()


def open_channel(address):
    return grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", 1 << 28), ("grpc.max_receive_message_length", 1 << 28)])


def predict_on(channel):
    return channel.unary_unary(
        "/tensorflow.serving.PredictionService/Predict",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=message("tensorflow.serving.PredictResponse").FromString)


channel = open_channel(ADDRESS)
predict = predict_on(channel)
infer = channel.unary_unary(
    "/inference.GRPCInferenceService/ModelInfer",
    request_serializer=lambda m: m.SerializeToString(),
    response_deserializer=v2.ModelInferResponse.FromString)


def tf_request(model, name, array):
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = model
    tensor = request.inputs[name]
    tensor.dtype = 1  # DT_FLOAT
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = array.astype("<f4").tobytes()
    return request


def v2_request(model, name, array):
    request = v2.ModelInferRequest(model_name=model)
    request.inputs.add(name=name, datatype="FP32", shape=list(array.shape))
    request.raw_input_contents.append(array.astype("<f4").tobytes())
    return request


def p50(call, request, calls):
    for _ in range(max(1, calls // 10)):
        call(request, timeout=120)
    latencies = []
    for _ in range(calls):
        start = time.perf_counter()
        call(request, timeout=120)
        latencies.append(time.perf_counter() - start)
    return statistics.median(latencies) * 1e3


row = np.array([[3, 1, 22, 1, 0, 7.25, 0, 0, 1, 0, 0, 1]], dtype=np.float32)
big = np.random.default_rng(0).random((262144, 8), dtype=np.float32)
cases = [
    ("one Titanic row", "titanic", "features", row, 3000),
    ("262144x8 FP32", "identity_fp32", "INPUT0", big, 30),
]
paths = [("V2 ModelInfer", infer, v2_request), ("TF Predict", predict, tf_request)]
if CONTENT_ADDRESS:
    paths.append(("TF Predict, tensor_content", predict_on(open_channel(CONTENT_ADDRESS)), tf_request))
results = {}
for rnd in range(ROUNDS):
    for label, model, name, array, calls in cases:
        for path, call, build in paths:
            ms = p50(call, build(model, name, array), calls)
            results.setdefault((label, path), []).append(ms)
            print(f"round {rnd} {label} {path}: p50 {ms:.3f} ms", flush=True)

names = [p for p, _, _ in paths]
print("\n| case | " + " | ".join(f"{n} p50" for n in names) + " | " + " | ".join(f"{n} / V2" for n in names[1:]) + " |")
print("|---" * (2 * len(names)) + "|")
for label, *_ in cases:
    medians = [statistics.median(results[(label, n)]) for n in names]
    print(f"| {label} | " + " | ".join(f"{m:.3f} ms" for m in medians) + " | "
          + " | ".join(f"{m / medians[0]:.2f}x" for m in medians[1:]) + " |")
