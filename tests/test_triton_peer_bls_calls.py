"""A Python model that manages and calls another from its own code, against
the real Triton 2.51: `pb_utils.load_model` with the model's files (a
`model.py` of 300 KB), `is_model_ready`, two BLS calls of 4 MB tensors in a
row (the first answer must still hold its values after the second call,
whose tensors cross where the first's did), and `unload_model`. Both
servers serve the same repository in explicit mode; the answers are
compared field by field, and each server must stop serving the loaded
model afterwards.
"""

import json
import os
import sys
import textwrap

import numpy as np
import tritonclient.http as httpclient

from conftest import wait_until
from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

EXPLICIT = ["--model-control-mode=explicit", "--load-model=manager"]

# The model the manager loads: its file is larger than a socket's buffer,
# so that it crosses as a large call does.
DOUBLER = textwrap.dedent('''
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]) for r in requests]
    ''') + "#" + "x" * 300_000 + "\n"

DOUBLER_CONFIG = json.dumps({
    "name": "doubler",
    "backend": "python",
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
})

MANAGER = textwrap.dedent('''
    import numpy as np
    import triton_python_backend_utils as pb_utils

    DOUBLER = %r
    CONFIG = %r


    def double(x):
        response = pb_utils.InferenceRequest(
            model_name="doubler", inputs=[pb_utils.Tensor("IN", x)],
            requested_output_names=["OUT"]).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        return pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                before = pb_utils.is_model_ready("doubler")
                pb_utils.load_model("doubler", config=CONFIG,
                                    files={"file:1/model.py": DOUBLER.encode()})
                loaded = pb_utils.is_model_ready("doubler")
                first = double(x)
                second = double(x + 1)
                pb_utils.unload_model("doubler")
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("FIRST", first),
                    pb_utils.Tensor("SECOND", second),
                    pb_utils.Tensor("READY", np.array([before, loaded], dtype=np.bool_)),
                ]))
            return responses
    ''') % (DOUBLER, DOUBLER_CONFIG)


def repository(root):
    (root / "manager" / "1").mkdir(parents=True)
    (root / "manager" / "config.pbtxt").write_text(textwrap.dedent("""\
        name: "manager"
        backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "FIRST" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "SECOND" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "READY" data_type: TYPE_BOOL dims: [ 2 ] } ]
        instance_group [ { kind: KIND_CPU count: 1 } ]
        """))
    (root / "manager" / "1" / "model.py").write_text(MANAGER)


def test_a_model_loads_calls_and_unloads_another_as_in_triton(tmp_path):
    repository(tmp_path / "repo")
    x = np.arange(1 << 20, dtype=np.float32)
    with side_by_side(tmp_path / "repo", tmp_path / "triton.log", EXPLICIT, EXPLICIT) as servers:
        answers = {}
        for name, server in servers.items():
            client = httpclient.InferenceServerClient(server.address, network_timeout=120)
            try:
                given = httpclient.InferInput("X", list(x.shape), "FP32")
                given.set_data_from_numpy(x, binary_data=True)
                wanted = [httpclient.InferRequestedOutput(o, binary_data=True)
                          for o in ("FIRST", "SECOND", "READY")]
                result = client.infer("manager", [given], outputs=wanted)
                answers[name] = {o: result.as_numpy(o) for o in ("FIRST", "SECOND", "READY")}
                wait_until(f"{name} to stop serving the unloaded model",
                           lambda: not client.is_model_ready("doubler"))
            finally:
                client.close()
    triton, ours = answers["triton"], answers["wirespeed"]
    # Triton's answer is the reference; the values are checked as well,
    # so that two servers wrong alike cannot pass.
    np.testing.assert_array_equal(triton["FIRST"], x * 2)
    np.testing.assert_array_equal(triton["SECOND"], (x + 1) * 2)
    assert triton["READY"].tolist() == [False, True]
    for output in ("FIRST", "SECOND", "READY"):
        assert ours[output].dtype == triton[output].dtype, output
        np.testing.assert_array_equal(ours[output], triton[output], err_msg=output)
