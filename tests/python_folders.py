"""Python model folders the Python-model tests share: Triton's `add_sub`
example as published, and a `config.toml` folder made from a model's code."""

import os
import textwrap
from pathlib import Path

from conftest import ROOT

PYTHON = str(ROOT / ".venv" / "bin" / "python")
# The interpreter of models that name none (Triton's config.pbtxt has no
# place for it): the test venv, with numpy.
os.environ["WIRESPEED_PYTHON"] = PYTHON

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"

input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
input [
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]

instance_group [{ kind: KIND_CPU }]
"""

# Triton's python_backend examples/add_sub/model.py, as published.
ADD_SUB_MODEL = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        output0_dtype = self.output0_dtype
        output1_dtype = self.output1_dtype
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (
                in_0.as_numpy() + in_1.as_numpy(),
                in_0.as_numpy() - in_1.as_numpy(),
            )
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(output1_dtype))
            inference_response = pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1])
            responses.append(inference_response)
        return responses

    def finalize(self):
        print("Cleaning up...")
'''


def python_model(folder: Path, code: str, inputs, outputs, keys="", tables=""):
    """A model folder with `config.toml` and `model.py`."""
    folder.mkdir(parents=True)
    tensors = ""
    for kind, specs in (("inputs", inputs), ("outputs", outputs)):
        for name, datatype, shape in specs:
            tensors += f'\n[[{kind}]]\nname = "{name}"\ndatatype = "{datatype}"\nshape = {list(shape)}\n'
    (folder / "config.toml").write_text(f'backend = "python"\npython = "{PYTHON}"\n{keys}\n{tensors}\n{tables}')
    (folder / "model.py").write_text(textwrap.dedent(code))
