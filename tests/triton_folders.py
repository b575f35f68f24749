"""Folders the Triton-repository tests share: Triton's `simple` example
with the ONNX graph that runs it, and its inputs as NVIDIA's client
examples make them."""

import os

import tritonclient.http as httpclient
from onnx import TensorProto, helper

from conftest import ROOT

# Python models run on the interpreter that has numpy (scripts/test's venv).
os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

# Triton's `simple` example (docs/examples/model_repository/simple), with
# the platform that runs it here.
SIMPLE_CONFIG = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

def simple_onnx():
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, batched."""
    io = lambda name: helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])  # noqa: E731
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "simple", [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def inputs_of(module, data0, data1, binary=True):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    for inp, data in zip(inputs, (data0, data1)):
        if module is httpclient:
            inp.set_data_from_numpy(data, binary_data=binary)
        else:
            inp.set_data_from_numpy(data)
    return inputs
