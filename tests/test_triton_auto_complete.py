"""Triton's auto-complete of a Python model's configuration, as the Python
backend's `examples/auto_complete` uses it: `1/model.py` alone (no
config.pbtxt), its `TritonPythonModel.auto_complete_config` adding the
inputs and outputs and setting `max_batch_size` (0 for
`nobatch_auto_complete`, 4 with dynamic batching for
`batch_auto_complete`). The checks are the example client's (`client.py`):
the configuration read back has the max_batch_size, data types and dims
the model set; then the model answers (its add_sub). A configuration that
disagrees with the code is refused in Triton's words, and
`--disable-auto-complete-config` turns it off."""

import os

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import ROOT, RunningServer, run_wirespeed

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

MODEL = '''
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        outputs = [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        config = auto_complete_model_config.as_dict()
        input_names = [i["name"] for i in config["input"]]
        output_names = [o["name"] for o in config["output"]]
        for tensor in inputs:
            if tensor["name"] not in input_names:
                auto_complete_model_config.add_input(tensor)
        for tensor in outputs:
            if tensor["name"] not in output_names:
                auto_complete_model_config.add_output(tensor)
        auto_complete_model_config.set_max_batch_size(MAX_BATCH_SIZE)
        DYNAMIC
        return auto_complete_model_config

    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        self.dtype0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "OUTPUT0")["data_type"])
        self.dtype1 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "OUTPUT1")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype(self.dtype0)),
                pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype(self.dtype1)),
            ]))
        return responses
'''

NOBATCH = MODEL.replace("MAX_BATCH_SIZE", "0").replace("        DYNAMIC\n", "")
BATCH = MODEL.replace("MAX_BATCH_SIZE", "4").replace("DYNAMIC", "auto_complete_model_config.set_dynamic_batching()")

EXPECTED_INPUTS = [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                   {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
EXPECTED_OUTPUTS = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                    {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("auto_complete")
    for name, code in [("nobatch_auto_complete", NOBATCH), ("batch_auto_complete", BATCH)]:
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(code)
    return root


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository)
    yield running
    running.stop()


def validate_ios(config, expected):
    """client.py's validate_ios: every expected tensor is there with its
    data type and dims."""
    by_name = {io["name"]: io for io in config}
    for want in expected:
        got = by_name[want["name"]]
        assert got["data_type"] == want["data_type"], got
        assert got["dims"] == want["dims"], got


@pytest.mark.parametrize("name, max_batch_size", [("nobatch_auto_complete", 0), ("batch_auto_complete", 4)])
def test_the_configuration_is_what_auto_complete_config_set(server, name, max_batch_size):
    with httpclient.InferenceServerClient(server.address) as client:
        config = client.get_model_config(name)
        assert config["max_batch_size"] == max_batch_size
        validate_ios(config["input"], EXPECTED_INPUTS)
        validate_ios(config["output"], EXPECTED_OUTPUTS)
        assert ("dynamic_batching" in config) == (max_batch_size > 0)
        # And the model serves as configured.
        shape = [1, 4] if max_batch_size else [4]
        a = np.arange(4, dtype=np.float32).reshape(shape)
        b = np.ones(shape, dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", shape, "FP32"), httpclient.InferInput("INPUT1", shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(name, inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_a_config_that_disagrees_with_the_code_is_refused_in_tritons_words(tmp_path):
    # A model that adds its inputs whatever the configuration says.
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text(NOBATCH.replace('if tensor["name"] not in input_names:', "if True:"))
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nbackend: "python"\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]\n')
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode != 0
    assert "the model expects dims [4] but the model configuration specifies dims [8]" in checked.stderr, \
        checked.stderr
    # A config that agrees is completed with the rest.
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nbackend: "python"\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode == 0, checked.stderr


def test_disable_auto_complete_config_turns_it_off(repository):
    checked = run_wirespeed("serve", "--check", "--disable-auto-complete-config", "--models", repository)
    assert checked.returncode != 0
    assert "nobatch_auto_complete" in checked.stderr or "batch_auto_complete" in checked.stderr, checked.stderr
