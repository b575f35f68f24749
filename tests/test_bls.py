"""Triton's BLS (a Python model calling other models from `execute`), as
python_backend's `examples/bls` use it: `bls_sync` calls the model its
MODEL_NAME input names with `InferenceRequest(...).exec()`, `bls_async`
awaits `async_exec()` of two models with `asyncio.gather`; their clients'
checks (sums and differences) on the answers. Where the example calls a
PyTorch model, an ONNX model computing the same is called; a FIL tree model
too, against xgboost; a model that does not exist gives the caller an
error response, which the example raises."""

import os
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from conftest import ROOT, RunningServer, wait_until
from test_triton_peer_bls_memory import IDENTITY, IDENTITY_IO

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ADD_SUB = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
'''

BLS_SYNC = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME")
            model_name_string = model_name.as_numpy()[0]
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name_string,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[in_0, in_1],
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=infer_response.output_tensors()))
        return responses
'''

BLS_ASYNC = '''
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            awaits = []
            for model_name in ["onnx_add_sub", "add_sub"]:
                infer_request = pb_utils.InferenceRequest(
                    model_name=model_name,
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=[in_0, in_1],
                )
                awaits.append(infer_request.async_exec())
            inference_responses = await asyncio.gather(*awaits)
            for infer_response in inference_responses:
                if infer_response.has_error():
                    raise pb_utils.TritonModelException(infer_response.error().message())
            onnx_output0 = pb_utils.get_output_tensor_by_name(inference_responses[0], "OUTPUT0")
            addsub_output1 = pb_utils.get_output_tensor_by_name(inference_responses[1], "OUTPUT1")
            responses.append(pb_utils.InferenceResponse(output_tensors=[onnx_output0, addsub_output1]))
        return responses
'''

BLS_TREES = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "ROWS").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="trees",
                requested_output_names=["output__0"],
                inputs=[pb_utils.Tensor("input__0", rows)],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            score = pb_utils.get_output_tensor_by_name(answer, "output__0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SCORE", score * 2)]))
        return responses
'''


def onnx_add_sub():
    io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [4])  # noqa: E731
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "onnx_add_sub", [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("bls")

    def model(name, config, code=None):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        if code is not None:
            (root / name / "1" / "model.py").write_text(code)
        return root / name / "1"

    model("add_sub", f'name: "add_sub"\nbackend: "python"\n{IO}', ADD_SUB)
    onnx.save(onnx_add_sub(), model("onnx_add_sub", f'name: "onnx_add_sub"\nplatform: "onnxruntime_onnx"\n{IO}')
              / "model.onnx")
    model("bls_sync", 'name: "bls_sync"\nbackend: "python"\n'
          'input [ { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] } ]\n' + IO
          + "instance_group [{ kind: KIND_CPU }]\n", BLS_SYNC)
    model("bls_async", f'name: "bls_async"\nbackend: "python"\n{IO}', BLS_ASYNC)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 3}, xgb.DMatrix(x, label=x[:, 0] - x[:, 2]), 20)
    booster.save_model(model("trees", 'backend: "fil"\nmax_batch_size: 16\n'
                             'input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
                             'output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                             'parameters [ { key: "model_type" value: { string_value: "xgboost_json" } },'
                             ' { key: "is_classifier" value: { string_value: "false" } } ]\n') / "xgboost.json")
    model("bls_trees", 'name: "bls_trees"\nbackend: "python"\nmax_batch_size: 16\n'
          'input [ { name: "ROWS" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
          'output [ { name: "SCORE" data_type: TYPE_FP32 dims: [ 1 ] } ]\n', BLS_TREES)
    return root


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository)
    yield running
    running.stop()


def sync_inputs(module, a, b, target):
    inputs = [module.InferInput("INPUT0", a.shape, np_to_triton_dtype(a.dtype)),
              module.InferInput("INPUT1", b.shape, np_to_triton_dtype(b.dtype)),
              module.InferInput("MODEL_NAME", [1], np_to_triton_dtype(np.object_))]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    inputs[2].set_data_from_numpy(np.array([target], dtype=np.object_))
    return inputs


@pytest.mark.parametrize("target", ["add_sub", "onnx_add_sub"])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_bls_sync_as_the_example_client_checks_it(server, module, target):
    client = module.InferenceServerClient(server.address if module is httpclient else server.grpc_address)
    a = np.random.rand(4).astype(np.float32)
    b = np.random.rand(4).astype(np.float32)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    response = client.infer("bls_sync", sync_inputs(module, a, b, target), request_id=str(1), outputs=outputs)
    assert np.allclose(a + b, response.as_numpy("OUTPUT0"))
    assert np.allclose(a - b, response.as_numpy("OUTPUT1"))


def test_bls_async_gathers_two_calls(server):
    client = httpclient.InferenceServerClient(server.address)
    a = np.random.rand(4).astype(np.float32)
    b = np.random.rand(4).astype(np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    response = client.infer("bls_async", inputs)
    assert np.allclose(a + b, response.as_numpy("OUTPUT0"))
    assert np.allclose(a - b, response.as_numpy("OUTPUT1"))


def test_a_bls_call_to_a_tree_model_answers_as_xgboost(server, repository):
    client = grpcclient.InferenceServerClient(server.grpc_address)
    rows = np.random.default_rng(4).normal(size=(5, 3)).astype(np.float32)
    inp = grpcclient.InferInput("ROWS", [5, 3], "FP32")
    inp.set_data_from_numpy(rows)
    got = client.infer("bls_trees", [inp]).as_numpy("SCORE")
    booster = xgb.Booster()
    booster.load_model(repository / "trees" / "1" / "xgboost.json")
    np.testing.assert_allclose(got.reshape(-1), booster.predict(xgb.DMatrix(rows)) * 2, rtol=1e-5, atol=1e-6)
    # The callee's statistics count the call.
    stats = client.get_inference_statistics("trees", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) >= 1


def test_a_bls_call_to_a_model_that_is_not_there_is_the_callers_error(server):
    client = httpclient.InferenceServerClient(server.address)
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("bls_sync", sync_inputs(httpclient, a, a, "nosuch"))
    assert "nosuch" in str(raised.value), raised.value
    # The server and the model go on.
    response = client.infer("bls_sync", sync_inputs(httpclient, a, a, "add_sub"))
    assert np.allclose(response.as_numpy("OUTPUT0"), a)


def write_slow(root, delay_ms):
    """`slow`: Triton's identity backend, `delay_ms` per request."""
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "config.pbtxt").write_text(
        'backend: "identity"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }} ]\n')


def write_caller(root, name, code):
    """A Python model `name` (INPUT0 to OUTPUT0, 4 FP32) whose model.py is `code`."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    (root / name / "1" / "model.py").write_text(code)


def test_a_bls_call_ends_at_the_callers_deadline(tmp_path):
    """A call to a slow model (Triton's identity backend with a delay) ends
    at the calling request's deadline (the client's gRPC timeout), and the
    server goes on."""
    write_slow(tmp_path, 3000)
    write_caller(tmp_path, "caller",
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        answer = pb_utils.InferenceRequest(model_name='slow', requested_output_names=['OUTPUT0'],\n"
        "            inputs=[pb_utils.get_input_tensor_by_name(requests[0], 'INPUT0')]).exec()\n"
        "        if answer.has_error():\n"
        "            raise pb_utils.TritonModelException(answer.error().message())\n"
        "        return [pb_utils.InferenceResponse(answer.output_tensors())]\n")
    server = RunningServer(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        inp = grpcclient.InferInput("INPUT0", [4], "FP32")
        inp.set_data_from_numpy(np.ones(4, dtype=np.float32))
        with pytest.raises(InferenceServerException) as raised:
            client.infer("caller", [inp], client_timeout=0.5)
        assert "DEADLINE_EXCEEDED" in str(raised.value.status()), raised.value
        # The slow model's call was cancelled at the deadline, not left to
        # run: its statistics count it failed (a call left to run would
        # succeed), and the server answers the next request.
        def failed():
            stats = client.get_inference_statistics("slow", as_json=True)["model_stats"][0]
            return int(stats["inference_stats"]["fail"].get("count", 0)) >= 1

        wait_until("the slow call counted as failed", failed)
        assert client.is_server_ready()
    finally:
        server.stop()


def test_is_model_ready_and_a_calls_own_timeout(tmp_path):
    """`pb_utils.is_model_ready` says which models the server serves; a
    BLS request's own `timeout` (microseconds) ends its call before the
    calling request's deadline, as the callee's error."""
    write_slow(tmp_path, 3000)
    write_caller(tmp_path, "asker",
        "import numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        answer = pb_utils.InferenceRequest(model_name='slow', requested_output_names=['OUTPUT0'],\n"
        "            inputs=[pb_utils.get_input_tensor_by_name(requests[0], 'INPUT0')], timeout=200000).exec()\n"
        "        timed_out = answer.has_error() and 'deadline' in answer.error().message()\n"
        "        flags = [pb_utils.is_model_ready('slow'), pb_utils.is_model_ready('nosuch'),\n"
        "                 pb_utils.is_model_ready('slow', '7'), timed_out]\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0', np.array(flags, np.float32))])]\n")
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)
        inp = httpclient.InferInput("INPUT0", [4], "FP32")
        inp.set_data_from_numpy(np.ones(4, dtype=np.float32))
        flags = client.infer("asker", [inp]).as_numpy("OUTPUT0").tolist()
        assert flags == [1.0, 0.0, 0.0, 1.0]
    finally:
        server.stop()


def test_a_bls_call_ends_when_the_callers_client_leaves(tmp_path):
    """An HTTP client that gives up (its connection closed, no deadline
    sent) cancels the calling request, and with it the BLS call it is
    waiting on: the slow callee counts it failed, not left to run."""
    import requests

    write_slow(tmp_path, 5000)
    write_caller(tmp_path, "caller",
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        answer = pb_utils.InferenceRequest(model_name='slow', requested_output_names=['OUTPUT0'],\n"
        "            inputs=[pb_utils.get_input_tensor_by_name(requests[0], 'INPUT0')]).exec()\n"
        "        return [pb_utils.InferenceResponse(answer.output_tensors(), error=answer.error())]\n")
    server = RunningServer(tmp_path)
    try:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(f"http://{server.address}/v2/models/caller/infer", json=body, timeout=0.5)
        client = httpclient.InferenceServerClient(server.address)

        def failed():
            stats = client.get_inference_statistics("slow")["model_stats"][0]
            return int(stats["inference_stats"]["fail"].get("count", 0)) >= 1

        wait_until("the slow call counted as failed", failed, timeout=4)
        assert client.is_server_ready()
    finally:
        server.stop()


def call_segment_resident_mib(server, model):
    """The MiB of `model`'s worker's call segment resident in the server's
    mapping of it (from /proc: the segment is a memfd named for it)."""
    text = (Path("/proc") / str(server.process.pid) / "smaps").read_text()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        if f"memfd:wirespeed-{model}-0-calls" in block.split("\n", 1)[0]:
            return int(re.search(r"^Rss:\s+(\d+) kB", block, re.M).group(1)) // 1024
    return 0


SUMMER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array(
            [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().sum(dtype=np.uint64)]))])
            for r in requests]
"""

SUMMING_CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            size = int(pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy()[0])
            answer = pb_utils.InferenceRequest(
                model_name="summer", requested_output_names=["SUM"],
                inputs=[pb_utils.Tensor("INPUT0", np.full(size, 7, dtype=np.uint8))]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
"""


def python_models(root, models):
    """Writes each (name, model.py, inputs and outputs) as a Python model
    of `root`."""
    for name, code, io in models:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + io)
        (root / name / "1" / "model.py").write_text(code)


def test_a_large_calls_pages_are_given_back_after_a_smaller_one(tmp_path):
    """A call's tensors past 64 KiB cross the caller's call segment, which
    stays grown (as Triton's pool does) but gives back what lies past four
    times a later call's use, counting what the worker wrote there (a
    large input with a small answer)."""
    python_models(tmp_path, [
        ("caller", SUMMING_CALLER,
         'input [ { name: "SIZE" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
         'output [ { name: "SUM" data_type: TYPE_UINT64 dims: [ 1 ] } ]\n'),
        ("summer", SUMMER,
         'input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
         'output [ { name: "SUM" data_type: TYPE_UINT64 dims: [ 1 ] } ]\n'),
    ])
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)

        def ask(size):
            x = httpclient.InferInput("SIZE", [1], "INT64")
            x.set_data_from_numpy(np.array([size], dtype=np.int64))
            return int(client.infer("caller", [x]).as_numpy("SUM")[0])

        assert ask(64 << 20) == 7 * (64 << 20)
        assert call_segment_resident_mib(server, "caller") >= 64
        assert ask(100_000) == 700_000
        assert call_segment_resident_mib(server, "caller") <= 4
    finally:
        server.stop()


HOLDING_CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            size, count, hold = (int(pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0])
                                 for name in ("SIZE", "COUNT", "HOLD"))
            held, right = [], 0
            for i in range(count):
                answer = pb_utils.InferenceRequest(
                    model_name="identity", requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", np.full(size, i % 251, dtype=np.uint8))]).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                if hold:
                    held.append((i, answer))
                else:
                    right += bool((answer.output_tensors()[0].as_numpy() == i % 251).all())
            for i, answer in held:
                right += bool((answer.output_tensors()[0].as_numpy() == i % 251).all())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RIGHT", np.array([right]))]))
        return responses
"""


# The holding caller and the identity it calls, with their inputs and
# outputs.
HOLDING_MODELS = [
    ("caller", HOLDING_CALLER,
     'input [ { name: "SIZE" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
     'input [ { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
     'input [ { name: "HOLD" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
     'output [ { name: "RIGHT" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'),
    ("identity", IDENTITY, IDENTITY_IO),
]


def call_segment_mib(server, model):
    """The MiB of `model`'s worker's call segment (the length of the
    server's mapping of it)."""
    text = (Path("/proc") / str(server.process.pid) / "maps").read_text()
    for line in text.splitlines():
        if f"memfd:wirespeed-{model}-0-calls" in line:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            return (end - start) >> 20
    return 0


def test_answers_a_model_holds_keep_their_place_and_the_rest_is_reused(tmp_path):
    """A call's answer is read in the call segment, where the server wrote
    it: the model may hold it across later calls (each goes past the
    answers still held), and the place of one it dropped is used again."""
    python_models(tmp_path, HOLDING_MODELS)
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)

        def ask(size, count, hold):
            given = []
            for name, value in (("SIZE", size), ("COUNT", count), ("HOLD", int(hold))):
                given.append(httpclient.InferInput(name, [1], "INT64"))
                given[-1].set_data_from_numpy(np.array([value], dtype=np.int64))
            return int(client.infer("caller", given).as_numpy("RIGHT")[0])

        # Each answer dropped before the next but one: two places in turn.
        assert ask(16 << 20, 12, hold=False) == 12
        assert call_segment_mib(server, "caller") <= 64
        # All twelve held to the end: each past the others.
        assert ask(16 << 20, 12, hold=True) == 12
        assert call_segment_mib(server, "caller") >= 12 * 16
        # Once they are dropped, their pages are given back after a call.
        assert ask(100_000, 1, hold=False) == 1
        assert call_segment_resident_mib(server, "caller") <= 4
    finally:
        server.stop()


# A model that sends the server BLS messages of its own making, through
# the worker's call function, with places in its call segment that lie
# past it.
STRAY_CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        errors = []
        for at, held in [(1 << 40, 0), (0, 1 << 40)]:
            reply = pb_utils._bls_call({
                "op": "bls", "model": "identity", "outputs": ["OUTPUT0"],
                "inputs": [["INPUT0", "UINT8", [4], 0, 4]],
                "segment": True, "at": at, "held": held})
            errors.append((reply.get("error") or "no error").encode())
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ERRORS", np.array(errors, dtype=np.object_))])
                for _ in requests]
"""


def test_a_call_placed_past_its_segment_is_the_callers_error(tmp_path):
    """A call whose place, or the answers it says it holds, lie past the
    worker's call segment is refused with the reason, as the call's
    error; the worker lives on and the next proper call is answered."""
    python_models(tmp_path, [
        ("stray", STRAY_CALLER,
         'input [ { name: "X" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
         'output [ { name: "ERRORS" data_type: TYPE_STRING dims: [ 2 ] } ]\n'),
    ] + HOLDING_MODELS)
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)
        x = httpclient.InferInput("X", [1], "INT64")
        x.set_data_from_numpy(np.array([1], dtype=np.int64))
        # Twice: the worker that sent them answers again.
        for _ in range(2):
            errors = [e.decode() for e in client.infer("stray", [x]).as_numpy("ERRORS").tolist()]
            for error, at, held in zip(errors, [1 << 40, 0], [0, 1 << 40]):
                assert f"a call at {at}, past answers held to {held}, in a call segment of" in error, error
        given = []
        for name, value in (("SIZE", 1 << 20), ("COUNT", 3), ("HOLD", 1)):
            given.append(httpclient.InferInput(name, [1], "INT64"))
            given[-1].set_data_from_numpy(np.array([value], dtype=np.int64))
        assert int(client.infer("caller", given).as_numpy("RIGHT")[0]) == 3
    finally:
        server.stop()
