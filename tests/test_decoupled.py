"""Decoupled models (`model_transaction_policy { decoupled: true }`): one
request, many responses. The models are written here in the shape of
python_backend's `examples/decoupled` (`square_int32`: a thread per request
sends IN responses, then the final flag; `repeat_int32`: one response per
element of IN, DELAY ms apart, `execute` returning after WAIT ms while its
thread goes on), and the calls are their clients' and the client
repository's `simple_grpc_custom_repeat.py`: `tritonclient.grpc`'s
`start_stream` / `async_stream_infer`, responses matched by request id,
counts and values checked. Then what a streaming server owes its clients:
Triton's `triton_final_response` flags, `generate_stream` read with
`requests` (stream=True) and `curl -N`, `/infer` and `/generate` on a
decoupled model (one response, or Triton's error), our own API's
generator `predict`, a client that leaves (the model sees
`is_cancelled()`), a slow reader of 100,000 responses (the server's
memory stays bounded), and a worker that dies mid-stream (an error, not a
hang)."""

import json
import os
import queue
import subprocess
import time
from functools import partial

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, RunningServer, proc_status, wait_until

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

SQUARE_CONFIG = """
name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU }]
"""

SQUARE = '''
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("square_int32 must be decoupled")
        self.inflight = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(
                target=self.respond, args=(request.get_response_sender(), value), daemon=True)
            with self.lock:
                self.inflight += 1
            thread.start()
        return None

    def respond(self, sender, value):
        for _ in range(value[0]):
            out = pb_utils.Tensor("OUT", np.array([value[0]], np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self.lock:
            self.inflight -= 1
'''

REPEAT_CONFIG = """
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

REPEAT = '''
import threading
import time

import numpy
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if len(requests) != 1:
            raise pb_utils.TritonModelException("unsupported batch size %d" % len(requests))
        values = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
        delays = pb_utils.get_input_tensor_by_name(requests[0], "DELAY").as_numpy()
        if values.shape != delays.shape:
            raise pb_utils.TritonModelException(
                f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}.")
        thread = threading.Thread(
            target=self.respond, args=(requests[0].get_response_sender(), values, delays), daemon=True)
        thread.start()
        wait = pb_utils.get_input_tensor_by_name(requests[0], "WAIT").as_numpy()
        time.sleep(wait[0] / 1000)
        return None

    def respond(self, sender, values, delays):
        for idx in range(values.size):
            time.sleep(delays[idx] / 1000)
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("IDX", numpy.array([idx], numpy.uint32)),
                pb_utils.Tensor("OUT", numpy.array([values[idx]], numpy.int32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

# Counts up from START for COUNT responses; stops when its client leaves
# and says so in the log. Request parameters: `die_after` kills its worker
# mid-stream; each response carries a TEXT of `width` characters.
COUNTER_CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "START" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] }
]
output [
  { name: "VALUE" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

COUNTER = '''
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0])
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            parameters = json.loads(request.parameters())
            die_after = parameters.get("die_after")
            text = np.array(["x" * parameters.get("width", 8)], dtype=np.object_)
            for i in range(count):
                if request.is_cancelled():
                    print("cancelled after %d responses" % i, flush=True)
                    break
                if die_after is not None and i == die_after:
                    os._exit(3)
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("VALUE", np.array([start + i], np.int64)),
                    pb_utils.Tensor("TEXT", text),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

# python_backend's examples/bls_decoupled: sum the OUT of every response of
# square_int32's stream (`exec(decoupled=True)`); the async one gathers
# two such calls (`async_exec(decoupled=True)`).
BLS_CONFIG = """
name: "NAME"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU }]
"""

BLS_SYNC = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        count = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        request = pb_utils.InferenceRequest(
            model_name="square_int32", inputs=[count], requested_output_names=["OUT"])
        total = np.array([0])
        for response in request.exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            if len(response.output_tensors()) > 0:
                total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
'''

BLS_ASYNC = '''
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        count = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        calls = [
            pb_utils.InferenceRequest(
                model_name="square_int32", inputs=[count], requested_output_names=["OUT"]
            ).async_exec(decoupled=True)
            for _ in range(2)
        ]
        total = np.array([0])
        for responses in await asyncio.gather(*calls):
            for response in responses:
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if len(response.output_tensors()) > 0:
                    total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
'''

# Sends from a thread until its client leaves; `execute` returns only once
# the cancel has come, so the thread sees it after `execute` returned.
TICKER = '''
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        request = requests[0]
        sender = request.get_response_sender()
        threading.Thread(target=self.tick, args=(sender,), daemon=True).start()
        while not request.is_cancelled():
            time.sleep(0.001)
        return None

    def tick(self, sender):
        i = 0
        while not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("VALUE", np.array([i], np.int64))]))
            i += 1
        print("ticker thread saw the cancel", flush=True)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

TICKER_CONFIG = """
name: "ticker"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "START" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

# Our own API: a `predict` that yields streams its answers.
TOKENS_CONFIG = """
backend = "python"

[[inputs]]
name = "prompt"
datatype = "BYTES"
shape = [1]

[[outputs]]
name = "token"
datatype = "BYTES"
shape = [1]
"""

TOKENS = '''
import asyncio

import numpy as np


class Model:
    async def predict(self, inputs, parameters):
        for word in inputs["prompt"][0].decode().split():
            await asyncio.sleep(0)
            yield {"token": np.array([word.upper()], dtype=np.object_)}
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoupled")
    for name, config, model in [
        ("square_int32", SQUARE_CONFIG, SQUARE),
        ("repeat_int32", REPEAT_CONFIG, REPEAT),
        ("counter", COUNTER_CONFIG, COUNTER),
        ("ticker", TICKER_CONFIG, TICKER),
        ("bls_decoupled_sync", BLS_CONFIG.replace("NAME", "bls_decoupled_sync"), BLS_SYNC),
        ("bls_decoupled_async", BLS_CONFIG.replace("NAME", "bls_decoupled_async"), BLS_ASYNC),
    ]:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.py").write_text(model)
    (root / "tokens").mkdir()
    (root / "tokens" / "config.toml").write_text(TOKENS_CONFIG)
    (root / "tokens" / "model.py").write_text(TOKENS)
    running = RunningServer(root, ["--metrics", "off"])
    yield running
    running.stop()


def stream_client(server):
    """A tritonclient.grpc client with a started stream, and the queue its
    callback fills, as the examples make them."""
    results = queue.Queue()

    def callback(user_data, result, error):
        user_data.put(error if error else result)

    client = grpcclient.InferenceServerClient(url=server.grpc_address)
    client.start_stream(callback=partial(callback, results))
    return client, results


def take(results, count):
    got = []
    for _ in range(count):
        item = results.get(timeout=30)
        if isinstance(item, InferenceServerException):
            raise item
        got.append(item)
    return got


def test_square_int32_as_its_client_calls_it(server):
    in_values = [4, 2, 0, 1]
    client, results = stream_client(server)
    with client:
        inputs = [grpcclient.InferInput("IN", [1], "INT32")]
        outputs = [grpcclient.InferRequestedOutput("OUT")]
        for i, value in enumerate(in_values):
            inputs[0].set_data_from_numpy(np.array([value], dtype=np.int32))
            client.async_stream_infer(
                model_name="square_int32", inputs=inputs, request_id=str(i), outputs=outputs)
        by_id = {}
        for item in take(results, sum(in_values)):
            by_id.setdefault(item.get_response().id, []).append(item.as_numpy("OUT"))
        client.stop_stream()
    assert "2" not in by_id, "no response for IN = 0"
    for i, value in enumerate(in_values):
        if value:
            assert len(by_id[str(i)]) == value
            for out in by_id[str(i)]:
                np.testing.assert_array_equal(out, np.array([value], dtype=np.int32))


def test_repeat_int32_as_its_clients_call_it(server):
    # repeat_client.py: 4 values, 1-4 ms apart, execute returning after 5 ms.
    in_value, delay_value = [4, 2, 0, 1], [1, 2, 3, 4]
    client, results = stream_client(server)
    with client:
        inputs = [
            grpcclient.InferInput("IN", [4], "INT32"),
            grpcclient.InferInput("DELAY", [4], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(np.array(in_value, dtype=np.int32))
        inputs[1].set_data_from_numpy(np.array(delay_value, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([5], dtype=np.uint32))
        outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
        client.async_stream_infer(model_name="repeat_int32", inputs=inputs, request_id="0", outputs=outputs)
        got = take(results, len(in_value))
        assert [r.get_response().id for r in got] == ["0"] * 4
        assert [int(r.as_numpy("OUT")[0]) for r in got] == in_value
        assert [int(r.as_numpy("IDX")[0]) for r in got] == [0, 1, 2, 3]
        # simple_grpc_custom_repeat.py: ten values from 100, OUT only
        # (the example waits a second between them; 10 ms here).
        data = np.arange(100, 110, dtype=np.int32)
        inputs = [
            grpcclient.InferInput("IN", [10], "INT32"),
            grpcclient.InferInput("DELAY", [10], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(data)
        inputs[1].set_data_from_numpy(np.full([10], 10, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([10], dtype=np.uint32))
        client.async_stream_infer(
            model_name="repeat_int32", inputs=inputs, outputs=[grpcclient.InferRequestedOutput("OUT")])
        got = take(results, 10)
        assert [r.as_numpy("OUT").tolist() for r in got] == [[v] for v in data.tolist()]
        assert all(r.as_numpy("IDX") is None for r in got), "only OUT was asked for"
        client.stop_stream()


def test_each_response_says_whether_it_is_the_last(server):
    client, results = stream_client(server)
    with client:
        inputs = [grpcclient.InferInput("IN", [1], "INT32")]
        for value in [3, 0]:
            inputs[0].set_data_from_numpy(np.array([value], dtype=np.int32))
            client.async_stream_infer(
                model_name="square_int32", inputs=inputs, request_id=f"r{value}",
                enable_empty_final_response=True)
        # Three responses flagged not final, then an empty final one; IN = 0
        # sends only the empty final response.
        got = take(results, 5)
        client.stop_stream()
    flags = [(r.get_response().id, r.get_response().parameters["triton_final_response"].bool_param,
              len(r.get_response().outputs)) for r in got]
    assert flags == [("r3", False, 1), ("r3", False, 1), ("r3", False, 1), ("r3", True, 0), ("r0", True, 0)]


def events(lines):
    """The `data:` payloads of a server-sent event stream, parsed."""
    return [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]


def test_generate_stream_sends_an_event_per_response(server):
    url = f"http://{server.address}/v2/models/square_int32/generate_stream"
    with requests.post(url, json={"IN": 3, "id": "q"}, stream=True, timeout=30) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        got = events(answer.iter_lines(decode_unicode=True))
    assert got == [{"id": "q", "model_name": "square_int32", "model_version": "1", "OUT": 3}] * 3
    curl = subprocess.run(
        ["curl", "-sN", "-X", "POST", url, "-d", '{"IN": 2}'], capture_output=True, text=True, timeout=30)
    assert events(curl.stdout.splitlines()) == [{"model_name": "square_int32", "model_version": "1", "OUT": 2}] * 2
    # Our own API's generator predict streams the same way.
    tokens = f"http://{server.address}/v2/models/tokens/generate_stream"
    with requests.post(tokens, json={"prompt": "one small step"}, stream=True, timeout=30) as answer:
        got = events(answer.iter_lines(decode_unicode=True))
    assert [e["token"] for e in got] == ["ONE", "SMALL", "STEP"]


def test_endpoints_that_answer_once_take_exactly_one_response(server):
    http = httpclient.InferenceServerClient(url=server.address)
    inputs = [httpclient.InferInput("IN", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([1], dtype=np.int32))
    assert http.infer("square_int32", inputs).as_numpy("OUT").tolist() == [1]
    for value, what in [(2, "more than one response"), (0, "no response")]:
        inputs[0].set_data_from_numpy(np.array([value], dtype=np.int32))
        with pytest.raises(InferenceServerException, match=what):
            http.infer("square_int32", inputs)
    generate = f"http://{server.address}/v2/models/square_int32/generate"
    assert requests.post(generate, json={"IN": 1}, timeout=30).json()["OUT"] == 1
    refused = requests.post(generate, json={"IN": 3}, timeout=30)
    assert refused.status_code == 500 and "exactly 1" in refused.json()["error"]
    grpc = grpcclient.InferenceServerClient(url=server.grpc_address)
    config = grpc.get_model_config("square_int32", as_json=True)["config"]
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert http.get_model_config("square_int32")["model_transaction_policy"] == {"decoupled": True}


def test_a_client_that_leaves_cancels_the_stream(server):
    url = f"http://{server.address}/v2/models/counter/generate_stream"
    with requests.post(url, json={"START": 0, "COUNT": 10_000_000}, stream=True, timeout=30) as answer:
        lines = answer.iter_lines(decode_unicode=True)
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[len("data: "):])["VALUE"] == 0
    # The connection is closed: the model sees is_cancelled() and stops.
    server.wait_for_log("cancelled after")
    # Through gRPC: a stream stopped with its requests cancelled.
    client, results = stream_client(server)
    inputs = [grpcclient.InferInput("START", [1], "INT64"), grpcclient.InferInput("COUNT", [1], "INT64")]
    inputs[0].set_data_from_numpy(np.array([5], dtype=np.int64))
    inputs[1].set_data_from_numpy(np.array([10_000_000], dtype=np.int64))
    client.async_stream_infer(model_name="counter", inputs=inputs, outputs=[grpcclient.InferRequestedOutput("VALUE")])
    assert [int(r.as_numpy("VALUE")[0]) for r in take(results, 3)] == [5, 6, 7]
    client.stop_stream(cancel_requests=True)
    client.close()
    server.wait_for_log("cancelled after", count=2)


def test_a_slow_reader_keeps_the_server_memory_bounded(server, tmp_path):
    # 100,000 responses of 1 KiB (about 100 MiB of events), read slowly:
    # the model waits for the reader, so the server holds a bounded part.
    pid = server.process.pid
    before = proc_status(pid, "VmHWM")
    body = {"START": 0, "COUNT": 100_000, "parameters": {"width": 1024}}
    url = f"http://{server.address}/v2/models/counter/generate_stream"
    received = 0
    last = -1
    with requests.post(url, json=body, stream=True, timeout=120) as answer:
        for line in answer.iter_lines(decode_unicode=True):
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            assert event["VALUE"] == last + 1 and len(event["TEXT"]) == 1024
            last = event["VALUE"]
            received += 1
            if received % 10_000 == 1:
                # A reader that stops for a while, ten times: a server that
                # buffered would take in tens of MiB meanwhile.
                time.sleep(0.2)
    assert received == 100_000
    grown = proc_status(pid, "VmHWM") - before
    # About 100 MiB went through; the server held a small bounded part
    # (the stream's 32 responses, the socket's and hyper's buffers).
    assert grown < 16 * 1024, f"peak RSS grew {grown} KiB"


def test_a_worker_that_dies_mid_stream_ends_it_with_an_error(server):
    ready_line = "python worker ready model=counter"
    with server.logged:
        started = sum(ready_line in line for line in server.log)
    client, results = stream_client(server)
    with client:
        inputs = [grpcclient.InferInput("START", [1], "INT64"), grpcclient.InferInput("COUNT", [1], "INT64")]
        inputs[0].set_data_from_numpy(np.array([0], dtype=np.int64))
        inputs[1].set_data_from_numpy(np.array([10], dtype=np.int64))
        client.async_stream_infer(model_name="counter", inputs=inputs, parameters={"die_after": 2})
        assert [int(r.as_numpy("VALUE")[0]) for r in take(results, 2)] == [0, 1]
        error = results.get(timeout=30)
        assert isinstance(error, InferenceServerException)
        assert "counter" in str(error) and "restarted" in str(error)
        client.stop_stream()
    # It comes back and streams again. The stream's error can come before
    # the model turns not ready: its readiness is asked once the new
    # worker is up.
    server.wait_for_log(ready_line, count=started + 1)
    wait_until("the counter model is ready again",
               lambda: requests.get(f"http://{server.address}/v2/models/counter/ready", timeout=5).status_code == 200)
    url = f"http://{server.address}/v2/models/counter/generate_stream"
    with requests.post(url, json={"START": 1, "COUNT": 2}, stream=True, timeout=30) as answer:
        assert [e["VALUE"] for e in events(answer.iter_lines(decode_unicode=True))] == [1, 2]


def test_bls_decoupled_sums_the_callee_stream_as_its_clients_check(server):
    with httpclient.InferenceServerClient(server.address) as client:
        for in_value in [4, 2, 0, 1]:
            data = np.array([in_value], dtype=np.int32)
            inputs = [httpclient.InferInput("IN", data.shape, "INT32")]
            inputs[0].set_data_from_numpy(data)
            outputs = [httpclient.InferRequestedOutput("SUM")]
            sync = client.infer("bls_decoupled_sync", inputs, request_id="1", outputs=outputs)
            assert np.allclose(data * data, sync.as_numpy("SUM"))
            both = client.infer("bls_decoupled_async", inputs, request_id="1", outputs=outputs)
            assert np.allclose(2 * data * data, both.as_numpy("SUM"))


def test_a_thread_sees_the_cancel_that_came_while_execute_ran(server):
    url = f"http://{server.address}/v2/models/ticker/generate_stream"
    with requests.post(url, json={"START": 0}, stream=True, timeout=30) as answer:
        first = next(line for line in answer.iter_lines(decode_unicode=True) if line.startswith("data: "))
        assert json.loads(first[len("data: "):])["VALUE"] == 0
    server.wait_for_log("ticker thread saw the cancel")
