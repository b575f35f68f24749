"""Sequence batching (Triton's sequence batcher), as the client repository's
sequence examples call it: `simple_{grpc,http}_sequence_sync_infer_client.py`
(`infer` with `sequence_id`, `sequence_start`, `sequence_end`),
`simple_grpc_sequence_stream_infer_client.py` (the same on a gRPC stream)
and `simple_grpc_aio_sequence_stream_infer_client.py` (asyncio's stream),
each against `simple_sequence` and, with `-d`, `simple_dyna_sequence` and
`simple_string_dyna_sequence`. The first two are ONNX models made here with
the published graphs of Triton's example repository (`OUTPUT = (INPUT +
START) * READY`, and `+ END * CORRID`) and their published config.pbtxt;
the third, a custom C++ backend upstream, is a Python model that sums its
sequence and adds its string id at the end, kept by its worker (two
instances: a sequence must reach the same one). The clients' expected
values are checked as they check them.

Then implicit state (`state` in the config): 64 sequences interleaved, an
accumulator carried by the server between requests, against a Python
reference; and the errors a client meets (no START, no id, an id on a
model without sequences, too many sequences, a sequence released after
idling)."""

import asyncio
import os
import queue
import threading
import uuid
from functools import partial

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import ROOT, RunningServer, identity_config

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

SIMPLE_SEQUENCE = """
name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

SIMPLE_DYNA_SEQUENCE = """
name: "simple_dyna_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
    max_sequence_idle_microseconds: 10000000
    oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "3" } } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

STRING_DYNA_SEQUENCE = """
name: "simple_string_dyna_sequence"
backend: "python"
max_batch_size: 0
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1, 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1, 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

# Sums its sequence (a START restarts it) and adds the string id, read as
# a number, to the last answer; the sums live in the worker, by id.
STRING_DYNA_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0])
            end = int(pb_utils.get_input_tensor_by_name(request, "END").as_numpy().reshape(-1)[0])
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0]
            key = request.correlation_id()
            assert bool(request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START) == bool(start)
            if start:
                self.sums[key] = 0
            self.sums[key] += value
            out = self.sums[key] + (int(corrid) if end else 0)
            if end:
                del self.sums[key]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", np.array([[out]], dtype=np.int32))]))
        return responses
'''

# An accumulator whose sum is the server's implicit state.
ACCUMULATOR = """
name: "accumulator"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 200 }
  state [ { input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT64 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT64 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
input [ { name: "INPUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

# A sequence model with room for two sequences, released after 200 ms idle.
SMALL = """
name: "small"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 200000
  oldest { max_candidate_sequences: 2 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def batched(name, elem):
    return helper.make_tensor_value_info(name, elem, ["batch", 1])


def simple_sequence_onnx(dyna):
    """Triton's published graphs: (INPUT + START [+ END * CORRID]) * READY."""
    i32 = TensorProto.INT32
    nodes = [helper.make_node("Identity", ["INPUT"], ["_INPUT"]),
             helper.make_node("Add", ["_INPUT", "START"], ["add0"])]
    inputs = [batched(n, i32) for n in ["INPUT", "START"]]
    if dyna:
        inputs += [batched("END", i32), batched("READY", i32), batched("CORRID", TensorProto.UINT64)]
        nodes += [helper.make_node("Cast", ["CORRID"], ["corrid"], to=i32),
                  helper.make_node("Mul", ["END", "corrid"], ["mul0"]),
                  helper.make_node("Add", ["add0", "mul0"], ["sum0"]),
                  helper.make_node("Mul", ["READY", "sum0"], ["CAST"])]
    else:
        inputs += [batched("READY", i32)]
        nodes += [helper.make_node("Mul", ["READY", "add0"], ["CAST"])]
    nodes.append(helper.make_node("Cast", ["CAST"], ["OUTPUT"], to=i32))
    graph = helper.make_graph(nodes, "sequence", inputs, [batched("OUTPUT", i32)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def accumulator_onnx():
    i64 = TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT", "SUM_IN"], ["OUTPUT"]),
         helper.make_node("Identity", ["OUTPUT"], ["SUM_OUT"])],
        "accumulator",
        [batched("INPUT", i64), batched("SUM_IN", i64)],
        [batched("OUTPUT", i64), batched("SUM_OUT", i64)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sequences")
    models = {
        "simple_sequence": (SIMPLE_SEQUENCE, simple_sequence_onnx(False)),
        "simple_dyna_sequence": (SIMPLE_DYNA_SEQUENCE, simple_sequence_onnx(True)),
        "accumulator": (ACCUMULATOR, accumulator_onnx()),
        "small": (SMALL, simple_sequence_onnx(False)),
    }
    for name, (config, model) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        onnx.save(model, root / name / "1" / "model.onnx")
    (root / "plain").mkdir()
    (root / "plain" / "config.toml").write_text(identity_config())
    folder = root / "simple_string_dyna_sequence"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(STRING_DYNA_SEQUENCE)
    (folder / "1" / "model.py").write_text(STRING_DYNA_MODEL)
    running = RunningServer(root, ["--metrics", "off"])
    yield running
    running.stop()


VALUES = [11, 7, 5, 3, 2, 0, 1]


def expected(dyna, int_id0, int_id1, string_id0, string_results):
    """The client examples' checks, as they compute them."""
    rows = []
    for i in range(len(VALUES) + 1):
        seq0 = 1 if i == 0 else VALUES[i - 1]
        seq1 = 101 if i == 0 else VALUES[i - 1] * -1
        if i == 0 and dyna:
            string0 = 20
        elif i == 0:
            string0 = 21
        elif dyna:
            string0 = VALUES[i - 1] * -1 + int(string_results[i - 1][0][0])
        else:
            string0 = VALUES[i - 1] * -1
        if dyna and i != 0 and VALUES[i - 1] == 1:
            seq0 += int_id0
            seq1 += int_id1
            string0 += int(string_id0)
        rows.append((seq0, seq1, string0))
    return rows


def ids(dyna):
    return 1000, 1001, (str(1002) if dyna else str(uuid.uuid4()))


def names(dyna):
    return ("simple_dyna_sequence" if dyna else "simple_sequence",
            "simple_string_dyna_sequence" if dyna else "simple_sequence")


def check(dyna, results):
    int_id0, int_id1, string_id0 = ids(dyna)
    seq0, seq1, string0 = results
    want = expected(dyna, int_id0, int_id1, string_id0, string0)
    got = [(int(a[0][0]), int(b[0][0]), int(c[0][0])) for a, b, c in zip(seq0, seq1, string0)]
    assert got == want


def sync_send(client, module, model, sequence_id, values):
    results = []
    for count, value in enumerate(values, start=1):
        data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
        inputs = [module.InferInput("INPUT", data.shape, "INT32")]
        inputs[0].set_data_from_numpy(data)
        result = client.infer(
            model_name=model, inputs=inputs, outputs=[module.InferRequestedOutput("OUTPUT")],
            sequence_id=sequence_id, sequence_start=(count == 1), sequence_end=(count == len(values)))
        results.append(result.as_numpy("OUTPUT"))
    return results


@pytest.mark.parametrize("dyna", [False, True])
@pytest.mark.parametrize("module", [grpcclient, httpclient], ids=["grpc", "http"])
def test_sequence_sync_infer_clients(server, module, dyna):
    url = server.grpc_address if module is grpcclient else server.address
    client = module.InferenceServerClient(url=url)
    int_model, string_model = names(dyna)
    int_id0, int_id1, string_id0 = ids(dyna)
    results = (
        sync_send(client, module, int_model, int_id0, [0] + VALUES),
        sync_send(client, module, int_model, int_id1, [100] + [-v for v in VALUES]),
        sync_send(client, module, string_model, string_id0, [20] + [-v for v in VALUES]),
    )
    check(dyna, results)


@pytest.mark.parametrize("dyna", [False, True])
def test_sequence_stream_infer_client(server, dyna):
    int_model, string_model = names(dyna)
    int_id0, int_id1, string_id0 = ids(dyna)
    completed = queue.Queue()
    client = grpcclient.InferenceServerClient(url=server.grpc_address)
    client.start_stream(callback=lambda result, error: completed.put(error or result))

    def send(model, sequence_id, values):
        for count, value in enumerate(values, start=1):
            data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
            inputs = [grpcclient.InferInput("INPUT", data.shape, "INT32")]
            inputs[0].set_data_from_numpy(data)
            client.async_stream_infer(
                model_name=model, inputs=inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                request_id="{}_{}".format(sequence_id, count), sequence_id=sequence_id,
                sequence_start=(count == 1), sequence_end=(count == len(values)))

    # The example sends the three sequences' requests interleaved.
    send(int_model, int_id0, [0] + VALUES)
    send(int_model, int_id1, [100] + [-v for v in VALUES])
    send(string_model, string_id0, [20] + [-v for v in VALUES])
    by_id = {}
    for _ in range(3 * (len(VALUES) + 1)):
        item = completed.get(timeout=30)
        if isinstance(item, InferenceServerException):
            raise item
        by_id[item.get_response().id] = item.as_numpy("OUTPUT")
    client.stop_stream()
    results = tuple([by_id["{}_{}".format(s, c)] for c in range(1, len(VALUES) + 2)]
                    for s in (int_id0, int_id1, string_id0))
    check(dyna, results)


@pytest.mark.parametrize("dyna", [False, True])
def test_sequence_aio_stream_infer_client(server, dyna):
    int_model, string_model = names(dyna)
    int_id0, int_id1, string_id0 = ids(dyna)
    plan = [(int_model, int_id0, [0] + VALUES),
            (int_model, int_id1, [100] + [-v for v in VALUES]),
            (string_model, string_id0, [20] + [-v for v in VALUES])]

    async def run():
        async with aiogrpcclient.InferenceServerClient(url=server.grpc_address) as client:
            async def requests():
                for model, sequence_id, values in plan:
                    for count, value in enumerate(values, start=1):
                        data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
                        inputs = [aiogrpcclient.InferInput("INPUT", data.shape, "INT32")]
                        inputs[0].set_data_from_numpy(data)
                        yield {"model_name": model, "inputs": inputs,
                               "outputs": [aiogrpcclient.InferRequestedOutput("OUTPUT")],
                               "request_id": "{}_{}".format(sequence_id, count),
                               "sequence_id": sequence_id, "sequence_start": count == 1,
                               "sequence_end": count == len(values)}

            by_id = {}
            async for result, error in client.stream_infer(requests()):
                if error:
                    raise error
                by_id[result.get_response().id] = result.as_numpy("OUTPUT")
            return by_id

    by_id = asyncio.run(run())
    results = tuple([by_id["{}_{}".format(s, c)] for c in range(1, len(VALUES) + 2)]
                    for _, s, _ in plan)
    check(dyna, results)


def test_sixty_four_sequences_carry_their_own_state(server):
    # Each sequence adds its own numbers; the server carries the running
    # sum between its requests. Python's running sums are the reference.
    rng = np.random.default_rng(7)
    plans = {1 + s: rng.integers(-1000, 1000, size=12).tolist() for s in range(64)}
    answers = {}
    errors = []

    def run(sequence_id, values):
        client = grpcclient.InferenceServerClient(url=server.grpc_address)
        got = []
        try:
            for count, value in enumerate(values, start=1):
                inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT64")]
                inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int64))
                result = client.infer("accumulator", inputs, sequence_id=sequence_id,
                                      sequence_start=count == 1, sequence_end=count == len(values))
                got.append(int(result.as_numpy("OUTPUT")[0][0]))
                assert result.as_numpy("SUM_OUT") is None, "the state is the server's"
        except Exception as e:  # reported below
            errors.append(e)
        answers[sequence_id] = got

    threads = [threading.Thread(target=run, args=item) for item in plans.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for sequence_id, values in plans.items():
        assert answers[sequence_id] == np.cumsum(values).tolist()


def test_control_and_state_tensors_are_the_servers(server):
    http = httpclient.InferenceServerClient(url=server.address)
    metadata = http.get_model_metadata("simple_dyna_sequence")
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT"]
    assert [t["name"] for t in metadata["outputs"]] == ["OUTPUT"]
    config = http.get_model_config("simple_dyna_sequence")
    assert [c["name"] for c in config["sequence_batching"]["control_input"]] == ["START", "END", "READY", "CORRID"]
    assert config["sequence_batching"]["oldest"]["max_candidate_sequences"] == 1024
    state = http.get_model_config("accumulator")["sequence_batching"]["state"]
    assert [(s["input_name"], s["output_name"]) for s in state] == [("SUM_IN", "SUM_OUT")]
    grpc = grpcclient.InferenceServerClient(url=server.grpc_address)
    assert [t.name for t in grpc.get_model_metadata("accumulator").inputs] == ["INPUT"]
    # A client that sends a control input itself is told it is the server's.
    inputs = [httpclient.InferInput("INPUT", [1, 1], "INT32"), httpclient.InferInput("START", [1, 1], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="control or state"):
        http.infer("simple_sequence", inputs, sequence_id=5, sequence_start=True)


def one(client, model, sequence_id, start=False, end=False, value=1):
    inputs = [httpclient.InferInput("INPUT", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return client.infer(model, inputs, sequence_id=sequence_id, sequence_start=start, sequence_end=end)


def test_requests_outside_an_open_sequence_are_refused(server):
    http = httpclient.InferenceServerClient(url=server.address)
    with pytest.raises(InferenceServerException, match="must specify the START flag") as e:
        one(http, "simple_sequence", 4242)
    assert e.value.status() == "400"
    with pytest.raises(InferenceServerException, match="non-zero or non-empty correlation ID"):
        one(http, "simple_sequence", 0)
    one(http, "simple_sequence", 4243, start=True)
    one(http, "simple_sequence", 4243, end=True)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        one(http, "simple_sequence", 4243)
    # A sequence id sent to a model that keeps no state.
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
            "parameters": {"sequence_id": 9, "sequence_start": True}}
    answer = requests.post(f"http://{server.address}/v2/models/plain/infer", json=body, timeout=10)
    assert answer.status_code == 400 and "no sequence batching" in answer.json()["error"]
    # On gRPC: the same words, as INVALID_ARGUMENT.
    grpc = grpcclient.InferenceServerClient(url=server.grpc_address)
    inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="must specify the START flag") as e:
        grpc.infer("simple_sequence", inputs, sequence_id=777)
    assert "INVALID_ARGUMENT" in str(e.value.status())


def test_too_many_sequences_are_refused_and_idle_ones_released(server):
    http = httpclient.InferenceServerClient(url=server.address)
    one(http, "small", 1, start=True)
    one(http, "small", 2, start=True)
    with pytest.raises(InferenceServerException, match="max_sequences") as e:
        one(http, "small", 3, start=True)
    assert e.value.status() == "503"
    # Both open sequences idle past 200 ms: released, which the log says.
    server.wait_for_log("idling past max_sequence_idle_us model=small", count=2)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        one(http, "small", 1)
    assert one(http, "small", 3, start=True).as_numpy("OUTPUT").tolist() == [[2]]
