"""`backend = "python"`: models written in Python, run in worker processes.

Checked against trusted references: the same model code served by MLServer
as a custom runtime (every V2 datatype, through tritonclient), numpy's own
arithmetic, and Triton's `add_sub` example (written here from its published
behaviour: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1), called with
tritonclient over HTTP and gRPC, unchanged. Failures: a worker killed with
SIGKILL mid-request, a model that raises, one whose load raises, one past
its deadline; and 64 concurrent clients over 4 workers.
"""

import concurrent.futures
import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import RunningServer, running_requests, wait_until
from python_folders import ADD_SUB_CONFIG, ADD_SUB_MODEL, python_model

# The model both servers run: each datatype transformed in a way that
# shows every element arrived (and, for integers, that they wrap as numpy's).
TRANSFORM = '''
import numpy as np

def transform(x):
    if x.dtype == np.object_ or x.dtype.kind in "SU":
        # (MLServer's codec gives JSON strings as str, ours bytes.)
        flat = [(v if isinstance(v, str) else bytes(v).decode())[::-1].encode() + b"!"
                for v in x.reshape(-1)]
        return np.array(flat, dtype=np.object_).reshape(x.shape)
    if x.dtype == np.bool_:
        return ~x
    return (x * 3 + 1).astype(x.dtype)
'''

DATATYPES = {
    "BOOL": np.array([True, False, True, True, False]),
    "UINT8": np.array([0, 1, 84, 85, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 21845, 30000, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, 7, 1431655765, 4294967295], dtype=np.uint32),
    "UINT64": np.array([0, 1, 7, 2**53 + 1, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, -1, 0, 42, 127], dtype=np.int8),
    "INT16": np.array([-32768, -1, 0, 10922, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), -1, 0, 715827882, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), -1, 0, 2**53 + 1, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([-20000, -0.5, 0.0, 0.1, 1000], dtype=np.float16),
    "FP32": np.array([-1.1e38, -1.5, 0.0, 0.1, 1e30], dtype=np.float32),
    "FP64": np.array([-5e307, -1.5, 0.0, 0.1, 1e300], dtype=np.float64),
    "BYTES": np.array([b"", b"a", b"wirespeed", "\u00e9t\u00e9".encode(), b"x" * 300], dtype=np.object_),
}

MLSERVER_RUNTIME = '''
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceResponse

from transform import transform


class AllTypes(MLModel):
    async def load(self):
        return True

    async def predict(self, payload):
        x = NumpyCodec.decode_input(payload.inputs[0])
        y = NumpyCodec.encode_output(name="y", payload=transform(x))
        return InferenceResponse(model_name=self.name, outputs=[y])
'''

# A Triton Python model on strings, batching, with errors in responses.
UPPER_CONFIG = """
name: "upper"
backend: "python"
max_batch_size: 16
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "UPPER" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "LENGTH" data_type: TYPE_INT32 dims: [ 1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 1000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

UPPER_MODEL = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batch = config["max_batch_size"]
        assert args["model_name"] == "upper" and args["model_version"] == "1", args

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            words = [t.decode("utf-8") for t in text.reshape(-1)]
            if any(w == "" for w in words):
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("empty text is not allowed", pb_utils.TritonError.INVALID_ARG)))
                continue
            if "boom" in words:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("boom happened")))
                continue
            prefix = json.loads(request.parameters()).get("prefix", "")
            upper = np.array([(prefix + w.upper()).encode() for w in words], dtype=np.object_).reshape(text.shape)
            length = np.array([len(w) for w in words], dtype=np.int32).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("LENGTH", length)]))
        return responses
'''


ROWS_MODEL = """
import os
import time

import numpy as np


class Model:
    def load(self, config):
        self.pid = os.getpid()
        self.scale = float(config["parameters"].get("scale", 1.0))

    def predict(self, inputs, parameters):
        x = inputs["x"]
        if parameters.get("fail"):
            raise ValueError("asked to fail by the client")
        if parameters.get("say"):
            print(parameters["say"])
        if parameters.get("pidfile"):
            with open(parameters["pidfile"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(float(parameters.get("sleep", 0)))
        return {
            "sum": x.sum(axis=1) * self.scale,
            "pid": np.full(x.shape[0], self.pid, dtype=np.int64),
        }
"""

# A model whose requests queue behind one that waits at a gate (a file
# the test creates): each answers `n` values, so that the answers of one
# message to the worker lie at different offsets, and says whether the
# worker took it with others (`infer_each` on the stack).
QUEUED_MODEL = """
import inspect
import os
import time

import numpy as np


class Model:
    def predict(self, inputs, parameters):
        gate = parameters.get("gate")
        if gate:
            until = time.monotonic() + 60
            while not os.path.exists(gate) and time.monotonic() < until:
                time.sleep(0.005)
        n = int(inputs["x"][0])
        if parameters.get("fail"):
            raise ValueError("request %d asked to fail" % n)
        grouped = any(frame.function == "infer_each" for frame in inspect.stack())
        return {"y": np.arange(n, dtype=np.float32) * n, "grouped": np.array([grouped])}
"""

STUBBORN_MODEL = """
import time


class Model:
    def predict(self, inputs, parameters):
        if parameters.get("stubborn"):
            until = time.monotonic() + 60
            while time.monotonic() < until:
                try:
                    time.sleep(0.01)
                except KeyboardInterrupt:
                    pass
        else:
            time.sleep(float(parameters.get("sleep", 0)))
        return {"y": inputs["x"]}
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    repo = tmp_path_factory.mktemp("python-models")
    for datatype in DATATYPES:
        folder = repo / f"t_{datatype.lower()}"
        python_model(
            folder,
            "from transform import transform\n\nclass Model:\n    def predict(self, inputs, parameters):\n"
            "        return {'y': transform(inputs['x'])}\n",
            [("x", datatype, [-1])],
            [("y", datatype, [-1])],
        )
        (folder / "transform.py").write_text(TRANSFORM)
    python_model(
        repo / "rows",
        ROWS_MODEL,
        [("x", "FP32", [-1, 8])],
        [("sum", "FP32", [-1]), ("pid", "INT64", [-1])],
        keys="instances = 4",
        tables="[parameters]\nscale = 2.0\n",
    )
    python_model(repo / "queued", QUEUED_MODEL, [("x", "INT32", [1])],
                 [("y", "FP32", [-1]), ("grouped", "BOOL", [1])])
    python_model(repo / "stubborn", STUBBORN_MODEL, [("x", "FP32", [-1])], [("y", "FP32", [-1])])
    python_model(
        repo / "garbled",
        """
        import os
        import struct
        import time

        class Model:
            def predict(self, inputs, parameters):
                # Half a message on the worker's socket (fd 3), then silence.
                os.write(3, struct.pack("<I", 100) + b'{"op"')
                time.sleep(120)
        """,
        [("x", "FP32", [-1])],
        [("y", "FP32", [-1])],
    )
    python_model(
        repo / "async_model",
        """
        import asyncio

        class Model:
            async def load(self, config):
                await asyncio.sleep(0)
                self.name = config["name"]

            async def predict(self, inputs, parameters):
                await asyncio.sleep(0.001)
                return {"y": inputs["x"][::-1].copy()}
        """,
        [("x", "INT32", [-1])],
        [("y", "INT32", [-1])],
    )
    python_model(
        repo / "broken",
        """
        class Model:
            def load(self, config):
                raise RuntimeError("the weights file is missing")

            def predict(self, inputs, parameters):
                return {}
        """,
        [("x", "FP32", [-1])],
        [("y", "FP32", [-1])],
    )
    python_model(
        repo / "batched",
        """
        import numpy as np

        class Model:
            def predict(self, inputs, parameters):
                x = inputs["x"]
                return {"y": x * 2, "batch": np.full(x.shape[0], x.shape[0], dtype=np.int32)}
        """,
        [("x", "FP32", [-1, 2])],
        [("y", "FP32", [-1, 2]), ("batch", "INT32", [-1])],
        tables="[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 20000\n",
    )
    (repo / "upper" / "1").mkdir(parents=True)
    (repo / "upper" / "config.pbtxt").write_text(UPPER_CONFIG)
    (repo / "upper" / "1" / "model.py").write_text(UPPER_MODEL)
    (repo / "add_sub" / "1").mkdir(parents=True)
    (repo / "add_sub" / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    (repo / "add_sub" / "1" / "model.py").write_text(ADD_SUB_MODEL)
    return repo


@pytest.fixture(scope="module")
def server(repository):
    shm_before = set(os.listdir("/dev/shm"))
    server = RunningServer(repository)
    server.shm_before = shm_before
    yield server
    workers = [int(p) for p in Path(f"/proc/{server.process.pid}/task").glob("*/children")
               for p in p.read_text().split()]
    assert workers
    server.stop()
    assert server.process.returncode == 0, "".join(server.log[-40:])
    # Every worker and its segments went with the server.
    for pid in workers:
        wait_until(f"worker {pid} to end", lambda: not Path(f"/proc/{pid}").exists()
                   or "zombie" in Path(f"/proc/{pid}/status").read_text())
    assert set(os.listdir("/dev/shm")) - shm_before == set()


@pytest.fixture(scope="module")
def mlserver_custom(mlserver, tmp_path_factory):
    """The session's MLServer, with the same transform as a custom runtime,
    loaded through its repository API."""
    repo = Path(mlserver["repo"])
    folder = repo / "alltypes"
    folder.mkdir(exist_ok=True)
    (folder / "transform.py").write_text(TRANSFORM)
    (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
    (folder / "model-settings.json").write_text(
        json.dumps({"name": "alltypes", "implementation": "runtime.AllTypes"})
    )
    url = f"http://127.0.0.1:{mlserver['http']}"
    r = requests.post(f"{url}/v2/repository/models/alltypes/load", timeout=60)
    assert r.status_code == 200, r.text
    return f"127.0.0.1:{mlserver['http']}"


def infer_http(address, model, array, datatype, binary=False):
    client = httpclient.InferenceServerClient(address)
    x = httpclient.InferInput("x", list(array.shape), datatype)
    x.set_data_from_numpy(array, binary_data=binary)
    result = client.infer(model, [x], outputs=[httpclient.InferRequestedOutput("y", binary_data=binary)])
    return result.as_numpy("y")


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_every_datatype_matches_mlserver_running_the_same_code(server, mlserver_custom, datatype):
    namespace = {}
    exec(TRANSFORM, namespace)
    x = DATATYPES[datatype]
    expected = namespace["transform"](x)
    # MLServer's NumpyCodec answers a 1-D array with shape [5, 1].
    theirs = infer_http(mlserver_custom, "alltypes", x, datatype).reshape(x.shape)
    model = f"t_{datatype.lower()}"
    for binary in (False, True):
        ours = infer_http(server.address, model, x, datatype, binary=binary)
        assert ours.dtype == theirs.dtype or datatype == "BYTES"
        if datatype == "BYTES":
            # tritonclient gives a JSON answer's strings as str.
            def as_bytes(a):
                return [v.encode() if isinstance(v, str) else bytes(v) for v in a]

            assert as_bytes(ours) == as_bytes(expected)
            assert as_bytes(ours) == as_bytes(theirs)
        else:
            np.testing.assert_array_equal(ours, expected)
            np.testing.assert_array_equal(ours, theirs)


def test_bf16_crosses_as_ml_dtypes_bfloat16(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    python_model(
        tmp_path / "repo" / "bf",
        """
        import ml_dtypes
        import numpy as np

        class Model:
            def predict(self, inputs, parameters):
                x = inputs["x"]
                assert x.dtype == ml_dtypes.bfloat16, x.dtype
                return {"y": (x.astype(np.float32) * 2).astype(ml_dtypes.bfloat16)}
        """,
        [("x", "BF16", [-1])],
        [("y", "BF16", [-1])],
    )
    server = RunningServer(tmp_path / "repo")
    try:
        r = requests.post(f"http://{server.address}/v2/models/bf/infer",
                          json={"inputs": [{"name": "x", "datatype": "BF16", "shape": [3], "data": [1.5, -2.0, 3.0]}]})
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [3.0, -4.0, 6.0]
    finally:
        server.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritons_add_sub_example_runs_unchanged(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    address = server.address if protocol == "http" else server.grpc_address
    client = module.InferenceServerClient(address)
    assert client.is_model_ready("add_sub")
    rng = np.random.default_rng(3)
    input0 = rng.random(4, dtype=np.float32)
    input1 = rng.random(4, dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), input0 + input1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), input0 - input1)
    # Its metadata and configuration come from config.pbtxt.
    metadata = client.get_model_metadata("add_sub", as_json=True) if protocol == "grpc" else client.get_model_metadata("add_sub")
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
    assert metadata["platform"] == "python"


def test_a_triton_model_on_strings_with_errors_in_its_responses(server):
    client = grpcclient.InferenceServerClient(server.grpc_address)
    assert client.is_model_ready("upper")

    def ask(words, **kwargs):
        text = grpcclient.InferInput("TEXT", [len(words), 1], "BYTES")
        text.set_data_from_numpy(np.array([[w.encode()] for w in words], dtype=np.object_))
        return client.infer("upper", [text], **kwargs)

    result = ask(["wire", "speed", "\u00e9t\u00e9"], parameters={"prefix": ">"})
    assert [v[0] for v in result.as_numpy("UPPER")] == [b">WIRE", b">SPEED", ">\u00c9T\u00c9".encode()]
    assert result.as_numpy("LENGTH").reshape(-1).tolist() == [4, 5, 3]
    with pytest.raises(InferenceServerException) as raised:
        ask(["ok", ""])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "empty text is not allowed" in raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        ask(["boom"])
    assert raised.value.status() == "StatusCode.INTERNAL"
    # A returned TritonError is its message alone, as Triton answers it
    # (tests/test_triton_peer_python.py compares each code with Triton's).
    assert raised.value.message() == "boom happened"
    # Its configuration, as Triton's clients read it.
    config = client.get_model_config("upper", as_json=True)["config"]
    assert config["max_batch_size"] == 16 and config["input"][0]["data_type"] == "TYPE_STRING"


def test_a_model_that_raises_is_a_500_with_its_message_and_others_go_on(server):
    url = f"http://{server.address}/v2/models/rows/infer"
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": list(range(8))}]}
    r = requests.post(url, json={**body, "parameters": {"fail": True}})
    assert r.status_code == 500
    assert r.json() == {"error": "model 'rows': ValueError: asked to fail by the client"}
    client = grpcclient.InferenceServerClient(server.grpc_address)
    x = grpcclient.InferInput("x", [1, 8], "FP32")
    x.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(1, 8))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("rows", [x], parameters={"fail": True})
    assert raised.value.status() == "StatusCode.INTERNAL"
    assert "asked to fail by the client" in raised.value.message()
    # The same model, and the others, still answer.
    r = requests.post(url, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [56.0]  # (0+...+7) * scale 2
    assert infer_http(server.address, "t_int32", np.array([1, 2], dtype=np.int32), "INT32").tolist() == [4, 7]


def test_a_model_whose_load_raises_is_not_ready_and_says_why(server):
    server.wait_for_log("RuntimeError: the weights file is missing")
    assert requests.get(f"http://{server.address}/v2/models/broken/ready").status_code != 200
    r = requests.post(f"http://{server.address}/v2/models/broken/infer",
                      json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})
    assert r.status_code == 503
    assert "failed to load" in r.json()["error"] and "the weights file is missing" in r.json()["error"]
    # The traceback is in the log, with the line that raised.
    assert any('model.py", line' in line for line in server.log)
    assert requests.get(f"http://{server.address}/v2/health/live").status_code == 200


def memfds(pid):
    """The memfd segments the process holds."""
    fds = Path(f"/proc/{pid}/fd")
    names = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("/memfd:wirespeed-"):
            names.append(target)
    return sorted(names)


def test_a_worker_killed_mid_request_fails_that_request_alone_and_comes_back(server, tmp_path):
    segments = memfds(server.process.pid)
    pidfile = tmp_path / "pid"
    # `stubborn` has one worker: find its pid from a request that waits.
    rows_url = f"http://{server.address}/v2/models/rows/infer"
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [1] * 8}],
            "parameters": {"pidfile": str(pidfile), "sleep": 30}}
    answer = {}
    caller = threading.Thread(target=lambda: answer.update(r=requests.post(rows_url, json=body, timeout=60)))
    caller.start()
    wait_until("the model to write its pid", lambda: pidfile.exists() and pidfile.read_text())
    victim = int(pidfile.read_text())
    os.kill(victim, signal.SIGKILL)
    caller.join(timeout=60)
    r = answer["r"]
    assert r.status_code == 500
    message = r.json()["error"]
    assert f"model 'rows': its Python worker (pid {victim}) was killed by signal 9" in message, message
    server.wait_for_log(f"pid {victim}) was killed by signal 9")
    # The other three workers serve at once; the fourth comes back.
    for _ in range(8):
        r = requests.post(rows_url, json={"inputs": body["inputs"]})
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][1]["data"][0] != victim
    server.wait_for_log("python worker ready model=rows", count=5)
    # Nothing left behind: the dead worker's segments were freed, the new
    # one has its own two, and /dev/shm holds nothing of ours.
    assert len(memfds(server.process.pid)) == len(segments)
    assert set(os.listdir("/dev/shm")) - server.shm_before == set()


def test_a_worker_that_stops_mid_message_is_replaced_not_waited_on(server):
    r = requests.post(f"http://{server.address}/v2/models/garbled/infer",
                      json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})
    assert r.status_code == 500
    assert "model 'garbled': its Python worker" in r.json()["error"]
    assert "sent a bad answer" in r.json()["error"] and "was killed" in r.json()["error"], r.text
    server.wait_for_log("python worker ready model=garbled", count=2)


def test_64_concurrent_clients_over_4_workers_each_get_their_own_answer(server):
    def client(seed):
        rng = np.random.default_rng(seed)
        session = requests.Session()
        pids = set()
        for _ in range(10):
            rows = int(rng.integers(1, 5))
            x = rng.integers(-1000, 1000, size=(rows, 8)).astype(np.float32)
            r = session.post(f"http://{server.address}/v2/models/rows/infer", json={
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 8], "data": x.reshape(-1).tolist()}]})
            assert r.status_code == 200, r.text
            out = {o["name"]: o["data"] for o in r.json()["outputs"]}
            assert out["sum"] == (x.sum(axis=1) * 2).tolist()
            pids.update(out["pid"])
        return pids

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        pids = set().union(*pool.map(client, range(64)))
    assert len(pids) == 4, pids


def test_requests_queued_behind_a_busy_worker_go_in_one_message_and_each_gets_its_own_answer(server, tmp_path):
    url = f"http://{server.address}/v2/models/queued/infer"
    gate = tmp_path / "gate"

    def ask(n, **parameters):
        body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [n]}],
                "parameters": parameters}
        return requests.post(url, json=body, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(13) as pool:
        first = pool.submit(ask, 3, gate=str(gate))
        wait_until("the gated request to run", lambda: running_requests(server, "queued") == 1)
        queued = {n: pool.submit(ask, n, **({"fail": True} if n == 5 else {})) for n in range(1, 13)}
        wait_until("12 requests to queue behind it", lambda: running_requests(server, "queued") == 13)
        gate.touch()
        answers = {n: f.result() for n, f in queued.items()}
        assert first.result().status_code == 200, first.result().text
    assert {o["name"]: o["data"] for o in first.result().json()["outputs"]}["grouped"] == [False]
    grouped = 0
    for n, r in answers.items():
        if n == 5:
            assert r.status_code == 500
            assert r.json() == {"error": "model 'queued': ValueError: request 5 asked to fail"}
            continue
        assert r.status_code == 200, r.text
        out = {o["name"]: o for o in r.json()["outputs"]}
        np.testing.assert_array_equal(np.array(out["y"]["data"], dtype=np.float32),
                                      np.arange(n, dtype=np.float32) * n)
        assert out["y"]["shape"] == [n]
        grouped += out["grouped"]["data"] == [True]
    # They queued while the worker was busy: it took them together.
    assert grouped >= 10, grouped


def test_what_a_model_prints_is_in_the_servers_log_naming_it(server):
    r = requests.post(f"http://{server.address}/v2/models/rows/infer", json={
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0] * 8}],
        "parameters": {"say": "hello from the rows model"}})
    assert r.status_code == 200, r.text
    server.wait_for_log("hello from the rows model")
    line = next(line for line in server.log if "hello from the rows model" in line)
    assert "model=rows" in line and "python::output" in line, line


def test_async_load_and_predict(server):
    x = np.array([1, 2, 3], dtype=np.int32)
    assert infer_http(server.address, "async_model", x, "INT32").tolist() == [3, 2, 1]


def test_batching_hands_a_worker_one_concatenated_batch(server):
    url = f"http://{server.address}/v2/models/batched/infer"
    barrier = threading.Barrier(8)

    def one(i):
        barrier.wait()
        r = requests.post(url, json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [i, -i]}]})
        assert r.status_code == 200, r.text
        out = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert out["y"] == [2.0 * i, -2.0 * i]
        return out["batch"][0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(one, range(8)))
    assert max(batches) > 1, batches


def test_a_request_past_its_deadline_interrupts_the_model(server):
    client = grpcclient.InferenceServerClient(server.grpc_address)
    x = grpcclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("stubborn", [x], parameters={"sleep": 30}, client_timeout=0.5)
    assert "DEADLINE" in str(raised.value.status())
    server.wait_for_log("ran past its deadline: interrupting")
    # Interrupted, not replaced: the worker answers the next request.
    assert client.infer("stubborn", [x]).as_numpy("y").tolist() == [1.0]
    restarts = sum("python worker ready model=stubborn" in line for line in server.log)
    # One that ignores the interrupt is killed and replaced.
    with pytest.raises(InferenceServerException):
        client.infer("stubborn", [x], parameters={"stubborn": True}, client_timeout=0.5)
    server.wait_for_log("ran past its deadline: interrupting", count=2)
    server.wait_for_log("did not stop within", count=1)
    server.wait_for_log("python worker ready model=stubborn", count=restarts + 1)
    wait_until("stubborn ready", lambda: client.is_model_ready("stubborn"))
    assert client.infer("stubborn", [x]).as_numpy("y").tolist() == [1.0]
