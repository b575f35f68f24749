"""Python models in a Triton model repository, as Triton's docs and
examples write them: warm-up before ready, a load that carries the model's
files, optional inputs, Triton's example repository checked and served,
an `initialize` that raises, an async `execute`, custom metrics as the
example client reads them, and `TritonError` codes answered with Triton's
status. Asked with tritonclient, unmodified."""


import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import RunningServer, run_wirespeed
from python_folders import ADD_SUB_CONFIG
from triton_folders import SIMPLE_CONFIG, inputs_of, simple_onnx


NOTING_MODEL = '''
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            with open(os.path.join(os.path.dirname(__file__), "seen.txt"), "a") as seen:
                seen.write(f"{list(x.shape)} {float(x.sum())}\\n")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
'''

WARMED_CONFIG = """
name: "noting"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
model_warmup [
  {
    name: "zeros"
    batch_size: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
  },
  {
    name: "from a file"
    count: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "ones.bin" } }
  }
]
optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }
"""


def test_model_warmup_runs_before_the_model_is_ready_and_a_failing_one_fails_the_load(tmp_path):
    folder = tmp_path / "repo" / "noting"
    (folder / "1").mkdir(parents=True)
    (folder / "warmup").mkdir()
    (folder / "warmup" / "ones.bin").write_bytes(np.ones(3, dtype=np.float32).tobytes())
    (folder / "config.pbtxt").write_text(WARMED_CONFIG)
    (folder / "1" / "model.py").write_text(NOTING_MODEL)
    server = RunningServer(tmp_path / "repo")
    try:
        # The server listens once its models are ready: the warmups ran.
        seen = (folder / "1" / "seen.txt").read_text().splitlines()
        assert seen == ["[2, 3] 0.0", "[1, 3] 3.0", "[1, 3] 3.0"], seen
        client = httpclient.InferenceServerClient(server.address)
        inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        inp.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.float32))
        assert client.infer("noting", [inp]).as_numpy("OUTPUT0").tolist() == [[1, 2, 3]]
    finally:
        server.stop()
    (folder / "config.pbtxt").write_text(WARMED_CONFIG.replace('"ones.bin"', '"missing.bin"'))
    result = run_wirespeed("serve", "--check", "--models", tmp_path / "repo")
    assert result.returncode != 0
    assert "warmup 'from a file' failed" in result.stderr and "missing.bin" in result.stderr, result.stderr
    # A warmup is held to the request limits before anything is allocated.
    for wrong, needle in [("dims: [ 3 ] zero_data", "dims: [ 100000000000 ] zero_data"),
                          ("batch_size: 2", "batch_size: 5"), ("count: 2", "count: 1000000")]:
        (folder / "config.pbtxt").write_text(WARMED_CONFIG.replace(wrong, needle, 1))
        result = run_wirespeed("serve", "--check", "--models", tmp_path / "repo")
        assert result.returncode != 0 and "failed" in result.stderr, result.stderr
        assert any(w in result.stderr for w in ("over the limits", "max_batch_size 4", "at most 1000")), result.stderr


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_load_can_carry_the_model_files(tmp_path, module):
    """Triton's `file:` load parameters (tritonclient's `load_model(...,
    files=...)`): a model that is in no folder of the repository is loaded
    from the files sent, its config completed from them; a path component
    too long for a file system is refused and the server stays up, as
    simple_grpc_model_control.py checks (with INVALID_ARGUMENT, which its
    own note says Triton should answer, rather than Triton's INTERNAL)."""
    (tmp_path / "repo").mkdir()
    server = RunningServer(tmp_path / "repo", extra_args=["--model-control-mode", "explicit"])
    try:
        address = server.address if module is httpclient else server.grpc_address
        client = module.InferenceServerClient(address)
        model = (tmp_path / "model.onnx")
        onnx.save(simple_onnx(), model)
        client.load_model("uploaded", config="{}", files={"file:1/model.onnx": model.read_bytes()})
        assert client.is_model_ready("uploaded")
        data = np.arange(32, dtype=np.int32).reshape(2, 16)
        got = client.infer("uploaded", inputs_of(module, data[:1], data[1:])).as_numpy("OUTPUT1")
        np.testing.assert_array_equal(got, data[:1] - data[1:])
        with pytest.raises(InferenceServerException) as raised:
            client.load_model("uploaded", config="{}", files={"file:" + "A" * 256: b"a"})
        assert "failed to poll from model repository" in raised.value.message()
        assert client.is_server_live() and client.is_model_ready("uploaded")
        client.unload_model("uploaded")
        assert not client.is_model_ready("uploaded")
    finally:
        server.stop()


OPTIONAL_CONFIG = """
name: "optional_add"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] optional: true }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""

OPTIONAL_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out = a if b is None else a + b.as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_an_optional_input_may_be_left_out(tmp_path, module):
    """Triton's `optional: true`: a request without the input reaches the
    model, whose get_input_tensor_by_name gives None; one without a
    required input is refused; the configuration reads back optional."""
    (tmp_path / "optional_add" / "1").mkdir(parents=True)
    (tmp_path / "optional_add" / "config.pbtxt").write_text(OPTIONAL_CONFIG)
    (tmp_path / "optional_add" / "1" / "model.py").write_text(OPTIONAL_MODEL)
    server = RunningServer(tmp_path)
    try:
        address = server.address if module is httpclient else server.grpc_address
        client = module.InferenceServerClient(address)
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        b = np.full((1, 4), 10, dtype=np.float32)
        in0, in1 = module.InferInput("INPUT0", [1, 4], "FP32"), module.InferInput("INPUT1", [1, 4], "FP32")
        in0.set_data_from_numpy(a)
        in1.set_data_from_numpy(b)
        np.testing.assert_array_equal(client.infer("optional_add", [in0]).as_numpy("OUTPUT0"), a)
        np.testing.assert_array_equal(client.infer("optional_add", [in0, in1]).as_numpy("OUTPUT0"), a + b)
        with pytest.raises(InferenceServerException) as raised:
            client.infer("optional_add", [in1])
        assert "INPUT0" in str(raised.value), raised.value
        config = client.get_model_config("optional_add", **({} if module is httpclient else {"as_json": True}))
        config = config.get("config", config)
        assert [i.get("optional", False) for i in config["input"]] == [False, True], config["input"]
    finally:
        server.stop()


def test_an_optional_input_of_a_model_that_cannot_leave_it_out_is_refused(tmp_path):
    (tmp_path / "simple" / "1").mkdir(parents=True)
    (tmp_path / "simple" / "config.pbtxt").write_text(
        SIMPLE_CONFIG.replace("dims: [ 16 ]\n  },\n  {\n    name: \"INPUT1\"",
                              "dims: [ 16 ]\n  },\n  {\n    optional: true\n    name: \"INPUT1\""))
    onnx.save(simple_onnx(), tmp_path / "simple" / "1" / "model.onnx")
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode != 0
    assert "input 'INPUT1' is optional" in checked.stderr, checked.stderr


def example_repository(root):
    """Triton's example repository (server/docs/examples/model_repository)
    as published, with models of our own computing what its do: `simple`
    (INT32 sums and differences), `simple_int8` (the same in INT8),
    `simple_string` (strings cast to INT32, added and subtracted, cast
    back), `simple_identity` (a Python model echoing strings), and
    `simple_sequence` (sequence batching; `test_sequences.py` runs its
    clients)."""
    from test_sequences import SIMPLE_SEQUENCE, simple_sequence_onnx

    (root / "simple_sequence" / "1").mkdir(parents=True)
    (root / "simple_sequence" / "config.pbtxt").write_text(SIMPLE_SEQUENCE)
    onnx.save(simple_sequence_onnx(False), root / "simple_sequence" / "1" / "model.onnx")

    def graph(name, elem, cast=False):
        io = lambda n: helper.make_tensor_value_info(n, elem, [None, 16])  # noqa: E731
        nodes = []
        a, b = "INPUT0", "INPUT1"
        if cast:
            nodes += [helper.make_node("Cast", ["INPUT0"], ["A"], to=TensorProto.INT32),
                      helper.make_node("Cast", ["INPUT1"], ["B"], to=TensorProto.INT32)]
            a, b = "A", "B"
        sums = ("S", "D") if cast else ("OUTPUT0", "OUTPUT1")
        nodes += [helper.make_node("Add", [a, b], [sums[0]]), helper.make_node("Sub", [a, b], [sums[1]])]
        if cast:
            nodes += [helper.make_node("Cast", ["S"], ["OUTPUT0"], to=TensorProto.STRING),
                      helper.make_node("Cast", ["D"], ["OUTPUT1"], to=TensorProto.STRING)]
        g = helper.make_graph(nodes, name, [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

    for name, typ, elem, cast in [("simple", "TYPE_INT32", TensorProto.INT32, False),
                                  ("simple_int8", "TYPE_INT8", TensorProto.INT8, False),
                                  ("simple_string", "TYPE_STRING", TensorProto.STRING, True)]:
        (root / name / "1").mkdir(parents=True)
        config = SIMPLE_CONFIG.replace('"simple"', f'"{name}"').replace("TYPE_INT32", typ)
        config = config.replace("instance_group [ { kind: KIND_CPU count: 1 } ]\n", "")
        (root / name / "config.pbtxt").write_text(config)
        onnx.save(graph(name, elem, cast), root / name / "1" / "model.onnx")
    (root / "simple_identity" / "1").mkdir(parents=True)
    (root / "simple_identity" / "config.pbtxt").write_text(
        'name: "simple_identity"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n')
    (root / "simple_identity" / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0', pb_utils.get_input_tensor_by_name(r, 'INPUT0').as_numpy())])\n"
        "                for r in requests]\n")


def test_tritons_example_repository_checks_and_serves(tmp_path):
    """`wirespeed serve --check` on the example repository: its ONNX,
    Python and sequence models load. Then simple_string_client.py's calls:
    strings of numbers in, their sums and differences as strings out."""
    root = tmp_path / "model_repository"
    example_repository(root)
    checked = run_wirespeed("serve", "--check", "--models", root)
    assert checked.returncode == 0, checked.stderr
    for name in ("simple", "simple_int8", "simple_string", "simple_identity", "simple_sequence"):
        assert f"ok  {name} " in checked.stdout, checked.stdout

    server = RunningServer(root)
    try:
        client = httpclient.InferenceServerClient(server.address)
        in0 = np.arange(16, dtype=np.int32)
        in1 = np.ones(16, dtype=np.int32)
        strings = [np.array([str(x).encode() for x in v], dtype=np.object_).reshape(1, 16) for v in (in0, in1)]
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"), httpclient.InferInput("INPUT1", [1, 16], "BYTES")]
        for inp, data in zip(inputs, strings):
            inp.set_data_from_numpy(data, binary_data=True)
        result = client.infer("simple_string", inputs)
        for i in range(16):
            assert int(result.as_numpy("OUTPUT0")[0][i]) == in0[i] + in1[i]
            assert int(result.as_numpy("OUTPUT1")[0][i]) == in0[i] - in1[i]
        inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        inp.set_data_from_numpy(np.array([[b"a", b"bb", b"ccc"]], dtype=np.object_))
        echoed = client.infer("simple_identity", [inp]).as_numpy("OUTPUT0")
        assert echoed.tolist() == [[b"a", b"bb", b"ccc"]]
    finally:
        server.stop()


def test_a_model_whose_initialize_raises_fails_its_load(tmp_path):
    """As Triton: an exception in initialize fails the load, with its
    traceback, at start (--check) and through the repository API."""
    folder = tmp_path / "raises"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'name: "raises"\nbackend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    (folder / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('no weights here')\n"
        "    def execute(self, requests):\n"
        "        return []\n")
    checked = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert checked.returncode != 0
    assert "initialize raised" in checked.stderr and "no weights here" in checked.stderr, checked.stderr
    server = RunningServer(tmp_path, extra_args=["--model-control-mode", "explicit"])
    try:
        client = httpclient.InferenceServerClient(server.address)
        with pytest.raises(InferenceServerException) as raised:
            client.load_model("raises")
        assert "failed to load 'raises'" in str(raised.value) and "no weights here" in str(raised.value)
        assert not client.is_model_ready("raises")
    finally:
        server.stop()


def test_an_async_execute_is_awaited(tmp_path):
    """Triton's Python backend awaits `async def execute` (python_backend's
    bls_async example's shape, without BLS): the answer is the coroutine's."""
    folder = tmp_path / "async_add"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'name: "async_add"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n')
    (folder / "1" / "model.py").write_text(
        "import asyncio\n"
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    async def initialize(self, args):\n"
        "        await asyncio.sleep(0)\n"
        "        self.offset = 1.0\n\n"
        "    async def execute(self, requests):\n"
        "        await asyncio.sleep(0)\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0',\n"
        "                pb_utils.get_input_tensor_by_name(r, 'INPUT0').as_numpy() + self.offset)])\n"
        "                for r in requests]\n")
    server = RunningServer(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        inp = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
        np.testing.assert_array_equal(client.infer("async_add", [inp]).as_numpy("OUTPUT0"), [[2.0, 3.0]])
    finally:
        server.stop()


# Triton's add_sub folder, three instances.
CUSTOM_METRICS_CONFIG = ADD_SUB_CONFIG.replace('name: "add_sub"', 'name: "custom_metrics"').replace(
    "instance_group [{ kind: KIND_CPU }]", "instance_group [{ count: 3 kind: KIND_CPU }]")

CUSTOM_METRICS_MODEL = '''
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.metric_family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.metric = self.metric_family.Metric(labels={"model": "custom_metrics", "version": "1"})
        # Each family kept while its metrics are used: a Metric whose
        # family is gone refuses, in Triton as here.
        self.families = [
            pb_utils.MetricFamily(
                name="custom_requests", description="Requests seen", kind=pb_utils.MetricFamily.COUNTER),
            pb_utils.MetricFamily(
                name="custom_last_sum", description="The last OUTPUT0 sum", kind=pb_utils.MetricFamily.GAUGE),
            pb_utils.MetricFamily(
                name="custom_sum_sizes", description="OUTPUT0 sums", kind=pb_utils.MetricFamily.HISTOGRAM),
        ]
        self.requests = self.families[0].Metric()
        self.last = self.families[1].Metric(labels={"model": "custom_metrics"})
        self.sizes = self.families[2].Metric(buckets=[1.0, 100.0])
        for wrong in (lambda: self.metric.increment(-1), lambda: self.metric.set(3),
                      lambda: self.sizes.increment(1)):
            try:
                wrong()
            except pb_utils.TritonModelException:  # as Triton raises it
                pass
            else:
                raise AssertionError("a wrong metric call was taken")

    def execute(self, requests):
        responses = []
        start_ns = time.time_ns()
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", in_0 + in_1), pb_utils.Tensor("OUTPUT1", in_0 - in_1)]))
            total = float((in_0 + in_1).sum())
            self.requests.increment(1)
            self.last.set(total)
            self.sizes.observe(total)
        end_ns = time.time_ns()
        self.metric.increment(end_ns - start_ns + 1)
        pb_utils.Logger.log_info("Cumulative requests processing latency: {}".format(self.metric.value()))
        return responses
'''


def test_custom_metrics_as_the_example_client_reads_them(tmp_path):
    """python_backend's custom_metrics example (three instances) and its
    client's checks on /metrics; and a counter, gauge and histogram of our
    own, whose values are what the requests made them, whichever instance
    ran each."""
    import requests as http

    (tmp_path / "custom_metrics" / "1").mkdir(parents=True)
    (tmp_path / "custom_metrics" / "config.pbtxt").write_text(CUSTOM_METRICS_CONFIG)
    (tmp_path / "custom_metrics" / "1" / "model.py").write_text(CUSTOM_METRICS_MODEL)
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)
        sums = []
        for i in range(6):
            a = np.full(4, i, dtype=np.float32)
            b = np.ones(4, dtype=np.float32)
            inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
            response = client.infer("custom_metrics", inputs, request_id=str(1), outputs=outputs)
            assert np.allclose(a + b, response.as_numpy("OUTPUT0"))
            assert np.allclose(a - b, response.as_numpy("OUTPUT1"))
            sums.append(float((a + b).sum()))
        metrics = http.get(f"http://{server.address}/metrics").text
        for pattern in [
            "# HELP requests_process_latency_ns Cumulative time spent processing requests",
            "# TYPE requests_process_latency_ns counter",
            'requests_process_latency_ns{model="custom_metrics",version="1"}',
        ]:
            assert pattern in metrics, metrics
        lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                 for line in metrics.splitlines() if line and not line.startswith("#")}
        assert lines['requests_process_latency_ns{model="custom_metrics",version="1"}'] >= 6
        assert lines["custom_requests"] == 6
        assert lines['custom_last_sum{model="custom_metrics"}'] == sums[-1]
        assert lines["custom_sum_sizes_count"] == 6
        assert lines["custom_sum_sizes_sum"] == sum(sums)
        assert lines['custom_sum_sizes_bucket{le="1"}'] == 0
        assert lines['custom_sum_sizes_bucket{le="100"}'] == 6
    finally:
        server.stop()


def test_triton_errors_answer_with_tritons_status_for_their_code(tmp_path):
    """pb_utils.TritonError's codes, as Triton answers them over HTTP and
    gRPC."""
    import requests as http

    folder = tmp_path / "codes"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'name: "codes"\nbackend: "python"\n'
        'input [ { name: "CODE" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    (folder / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        code = int(pb_utils.get_input_tensor_by_name(requests[0], 'CODE').as_numpy()[0])\n"
        "        return [pb_utils.InferenceResponse(error=pb_utils.TritonError('code %d' % code, code))]\n")
    server = RunningServer(tmp_path)
    try:
        grpc = grpcclient.InferenceServerClient(server.grpc_address)
        for code, status, grpc_status in [(1, 500, "INTERNAL"), (2, 404, "NOT_FOUND"), (3, 400, "INVALID_ARGUMENT"),
                                          (4, 503, "UNAVAILABLE"), (5, 501, "UNIMPLEMENTED")]:
            body = {"inputs": [{"name": "CODE", "datatype": "INT32", "shape": [1], "data": [code]}]}
            r = http.post(f"http://{server.address}/v2/models/codes/infer", json=body)
            assert r.status_code == status, (code, r.status_code, r.text)
            assert f"code {code}" in r.json()["error"]
            inp = grpcclient.InferInput("CODE", [1], "INT32")
            inp.set_data_from_numpy(np.array([code], dtype=np.int32))
            with pytest.raises(InferenceServerException) as raised:
                grpc.infer("codes", [inp])
            assert raised.value.status() == f"StatusCode.{grpc_status}", (code, raised.value)
    finally:
        server.stop()
