"""Request parameters against the real Triton: keys starting with
`triton_` are Triton's and refused (but the one perf_analyzer sends), and
HTTP headers and gRPC metadata that match `--http-header-forward-pattern`
and `--grpc-header-forward-pattern` reach a Python model as parameters,
which it reads with `request.parameters()`. Triton 2.51 and wirespeed
serve the same folder with the same flags; tritonclient asks both the
same, and the answers (a model's view of its parameters, or the error's
status and text) are compared field by field."""

import json
import os
import queue
import sys

import grpc as grpc_lib
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

PARAMETERS = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.array([r.parameters().encode()], dtype=np.object_))]) for r in requests]
'''

CONFIG = """
name: "parameters"
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

PATTERN = "tenant|^trace"
FORWARD = [f"--http-header-forward-pattern={PATTERN}", f"--grpc-header-forward-pattern={PATTERN}"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    repo = tmp_path_factory.mktemp("parameters_repo")
    (repo / "parameters" / "1").mkdir(parents=True)
    (repo / "parameters" / "config.pbtxt").write_text(CONFIG)
    (repo / "parameters" / "1" / "model.py").write_text(PARAMETERS)
    log = tmp_path_factory.mktemp("triton_log") / "triton.log"
    with side_by_side(repo, log, FORWARD, FORWARD) as servers:
        yield servers


def unary(client_module, address, parameters=None, headers=None):
    """The model's view of its parameters through one tritonclient call,
    or the error's status and text."""
    client = client_module.InferenceServerClient(address)
    try:
        x = client_module.InferInput("IN", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], np.float32))
        result = client.infer("parameters", [x], parameters=parameters, headers=headers)
        return "ok", json.loads(result.as_numpy("OUT")[0])
    except InferenceServerException as e:
        return e.status(), e.message()
    finally:
        client.close()


def rest(server, **kwargs):
    return unary(httpclient, server.address, **kwargs)


def grpc(server, **kwargs):
    return unary(grpcclient, server.grpc_address, **kwargs)


def stream(server, parameters=None, headers=None):
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=headers)
        x = grpcclient.InferInput("IN", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], np.float32))
        client.async_stream_infer("parameters", [x], parameters=parameters)
        result, error = answers.get(timeout=30)
        if error is not None:
            return error.status(), error.message()
        return "ok", json.loads(result.as_numpy("OUT")[0])
    finally:
        client.stop_stream()
        client.close()


def both(servers, ask, **kwargs):
    # tritonclient adds its own headers to the dict it is given: a copy each.
    return {name: ask(server, **{k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()})
            for name, server in servers.items()}


def raw_rest(server, parameters):
    """The V2 REST request with `parameters`, sent as JSON (tritonclient
    refuses keys starting with `triton_` before it sends anything)."""
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0]}], "parameters": parameters}
    answer = requests.post(f"http://{server.address}/v2/models/parameters/infer", json=body, timeout=30)
    if answer.status_code != 200:
        return answer.status_code, answer.json()
    # The model's view of its parameters: Triton's compact JSON (the
    # order of its keys is the body's there, sorted here).
    seen = answer.json()["outputs"][0]["data"][0]
    return 200, json.loads(seen), "," in seen and ", " not in seen


def grpc_request(parameters):
    request = service_pb2.ModelInferRequest(model_name="parameters")
    tensor = request.inputs.add(name="IN", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    for key, value in parameters.items():
        if isinstance(value, bool):
            request.parameters[key].bool_param = value
        elif isinstance(value, int):
            request.parameters[key].int64_param = value
        else:
            request.parameters[key].string_param = value
    return request


def raw_grpc(server, parameters):
    with grpc_lib.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            answer = stub.ModelInfer(grpc_request(parameters), timeout=30)
        except grpc_lib.RpcError as e:
            return e.code().name, e.details()
    return "ok", json.loads(answer.raw_output_contents[0][4:] if answer.raw_output_contents
                            else answer.outputs[0].contents.bytes_contents[0])


def raw_stream(server, parameters):
    """Each answer of a one-request stream: its error, or the model's view
    of its parameters and the response's own parameters."""
    with grpc_lib.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = []
        for answer in stub.ModelStreamInfer(iter([grpc_request(parameters)]), timeout=30):
            if answer.error_message:
                answers.append(("error", answer.error_message))
                continue
            response = answer.infer_response
            out = (response.raw_output_contents[0][4:] if response.raw_output_contents
                   else response.outputs[0].contents.bytes_contents[0])
            own = {k: v.WhichOneof("parameter_choice") for k, v in response.parameters.items()}
            answers.append(("ok", json.loads(out), own))
    return answers


@pytest.mark.parametrize("ask", [raw_rest, raw_grpc, raw_stream])
@pytest.mark.parametrize("parameters", [
    {"triton_custom": 1},
    {"triton_": "x"},
    {"triton_enable_empty_final_response": True},
    {"TRITON_custom": 1, "tritonish": 2, "plain": "kept"},
])
def test_triton_keys_are_refused_as_triton_refuses_them(servers, ask, parameters):
    answers = both(servers, ask, parameters=parameters)
    assert answers["wirespeed"] == answers["triton"]


@pytest.mark.parametrize("ask", [rest, grpc, stream])
@pytest.mark.parametrize("headers", [
    {"x-tenant-id": "acme", "traceparent": "00-abc-def-01", "x-other": "not forwarded"},
    {"tenant": "one"},
    {"my-trace": "no: the pattern anchors trace at the start"},
])
def test_matching_headers_reach_the_model_as_parameters(servers, ask, headers):
    answers = both(servers, ask, headers=headers)
    assert answers["triton"][0] == "ok", answers["triton"]
    assert answers["wirespeed"] == answers["triton"]


@pytest.mark.parametrize("ask", [rest, grpc])
def test_a_header_wins_over_a_parameter_of_its_name_as_in_triton(servers, ask):
    answers = both(servers, ask, parameters={"tenant": "from-body"}, headers={"tenant": "from-header"})
    assert answers["triton"] == ("ok", {"tenant": "from-header"})
    assert answers["wirespeed"] == answers["triton"]
