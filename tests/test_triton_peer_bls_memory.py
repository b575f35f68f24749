"""Large tensors through BLS, against the real Triton: a Python model
sends a 1 GiB tensor to an identity model and then four of 200 MB, with
`exec`, `async_exec`, `exec(decoupled=True)` to a decoupled identity, and
from a decoupled model, as Triton's own BLS memory test
(`L0_backend_python/bls`, `test_bls_out_of_memory`) does. Both servers
serve the same repository; each call's tensor must come back byte for
byte, or fail with Triton's "Failed to increase the shared memory pool
size" text, and the worker that made the calls must live on (the same
pid answers afterwards, and wirespeed's log says no worker was lost).
"""

import os
import queue
import sys
import textwrap

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

GIB = 1 << 30
SIZES = [GIB] + [200 << 20] * 4
POOL_FULL = "Failed to increase the shared memory pool size"

IDENTITY = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
'''

# The identity's inputs and outputs, and its folder: the model the callers
# here, `test_triton_peer_bls_answers.py`, `test_bls.py` and
# `benchmarks/scripts/bls_large.py` call.
IDENTITY_IO = textwrap.dedent("""\
    input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
    instance_group [ { kind: KIND_CPU count: 1 } ]
    """)


def identity_model(root, name="identity", code=IDENTITY, extra=""):
    """Writes a Python identity of UINT8 vectors as the model `name` of `root`."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + IDENTITY_IO + extra)
    (root / name / "1" / "model.py").write_text(code)


IDENTITY_DECOUPLED = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            r.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

# What every caller shares: one call per size asked for, its tensor
# filled with a value of its own, checked on its way back.
CALLER_COMMON = '''
import os
import numpy as np
import triton_python_backend_utils as pb_utils

POOL_FULL = "Failed to increase the shared memory pool size"


def request(callee, size, i):
    data = np.full(size, (i * 37 + 11) % 256, dtype=np.uint8)
    call = pb_utils.InferenceRequest(
        model_name=callee, inputs=[pb_utils.Tensor("INPUT0", data)],
        requested_output_names=["OUTPUT0"])
    return call, data


def verdict(response, data):
    if response.has_error():
        message = response.error().message()
        return "pool full" if POOL_FULL in message else "error: " + message
    out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
    if out is None:
        return "no output"
    got = out.as_numpy()
    return "ok" if got.shape == data.shape and np.array_equal(got, data) else "wrong"


def answer(verdicts):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("RESULT", np.array([v.encode() for v in verdicts], dtype=np.object_)),
        pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))])


def sizes(r):
    return pb_utils.get_input_tensor_by_name(r, "SIZES").as_numpy().tolist()


def calls(r, callee):
    """A call of `callee` and its tensor for each size request `r` asks."""
    for i, size in enumerate(sizes(r)):
        yield request(callee, size, i)
'''

CALLERS = {
    "bls_sync": ("", '''
class TritonPythonModel:
    def execute(self, requests):
        return [answer([verdict(call.exec(), data) for call, data in calls(r, "identity")])
                for r in requests]
'''),
    "bls_async": ("", '''
class TritonPythonModel:
    async def execute(self, requests):
        return [answer([verdict(await call.async_exec(), data) for call, data in calls(r, "identity")])
                for r in requests]
'''),
    "bls_to_decoupled": ("", '''
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            verdicts = []
            for call, data in calls(r, "identity_decoupled"):
                responses = call.exec(decoupled=True)
                verdicts.append(verdict(next(responses), data))
                verdicts.append("more" if next(responses, None) is not None else "end")
            out.append(answer(verdicts))
        return out
'''),
    "bls_from_decoupled": ("model_transaction_policy { decoupled: true }", '''
class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            verdicts = [verdict(call.exec(), data) for call, data in calls(r, "identity")]
            r.get_response_sender().send(
                answer(verdicts), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    repo = tmp_path_factory.mktemp("bls_memory_repo")
    identity_model(repo)
    identity_model(repo, "identity_decoupled", IDENTITY_DECOUPLED, "model_transaction_policy { decoupled: true }")
    for name, (extra, code) in CALLERS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(f"""\
            name: "{name}"
            backend: "python"
            input [ {{ name: "SIZES" data_type: TYPE_INT64 dims: [ -1 ] }} ]
            output [ {{ name: "RESULT" data_type: TYPE_STRING dims: [ -1 ] }} ]
            output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
            instance_group [ {{ kind: KIND_CPU count: 1 }} ]
            {extra}
            """))
        (repo / name / "1" / "model.py").write_text(CALLER_COMMON + code)
    with side_by_side(repo, tmp_path_factory.mktemp("triton_log") / "triton.log") as servers:
        yield servers


def ask(server, model, sizes):
    """The caller's verdicts on calls of `sizes` bytes, and its pid: over
    REST, or for a decoupled caller over a gRPC stream (Triton's REST
    front refuses decoupled models)."""
    if CALLERS[model][0]:
        return ask_stream(server, model, sizes)
    client = httpclient.InferenceServerClient(server.address)
    try:
        x = httpclient.InferInput("SIZES", [len(sizes)], "INT64")
        x.set_data_from_numpy(np.array(sizes, dtype=np.int64))
        return read(client.infer(model, [x]))
    finally:
        client.close()


def ask_stream(server, model, sizes):
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        x = grpcclient.InferInput("SIZES", [len(sizes)], "INT64")
        x.set_data_from_numpy(np.array(sizes, dtype=np.int64))
        client.async_stream_infer(model, [x])
        result, error = answers.get(timeout=600)
        assert error is None, error
        return read(result)
    finally:
        client.stop_stream()
        client.close()


def read(result):
    verdicts = [v.decode() for v in result.as_numpy("RESULT").tolist()]
    return verdicts, int(result.as_numpy("PID")[0])


@pytest.mark.parametrize("model", list(CALLERS))
def test_large_tensors_pass_through_bls_and_the_worker_lives(servers, model):
    answers = {}
    for name, server in servers.items():
        _, pid = ask(server, model, [16])
        verdicts, pid_during = ask(server, model, SIZES)
        small, pid_after = ask(server, model, [3, 0])
        answers[name] = (verdicts, small)
        # The worker that made the calls answers afterwards.
        assert pid == pid_during == pid_after, (name, pid, pid_during, pid_after)
    triton, ours = answers["triton"], answers["wirespeed"]
    # Triton either serves each call or says its pool is full; on this
    # machine it serves them, and so does wirespeed, byte for byte.
    assert all(v in ("ok", "end", "pool full") for v in triton[0]), triton
    assert ours == triton
    assert not [line for line in servers["wirespeed"].log if "worker" in line and "restart" in line]
