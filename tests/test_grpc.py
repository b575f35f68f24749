"""The V2 gRPC API, driven by tritonclient.grpc (unary and streaming) and
grpcurl through reflection, plus the errors each bad request gets."""

import os
import queue
import shutil
import struct
import subprocess
import urllib.parse
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import xgboost as xgb
from tritonclient.utils import InferenceServerException

from conftest import MODELS, RunningServer
from test_binary_http import TENSORS, sample, write_repo
from test_binary_http import check_outputs as check


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    write_repo(root, "echo", TENSORS)
    shutil.copytree(MODELS / "titanic", root / "titanic")
    running = RunningServer(root)
    yield running
    running.stop()


@pytest.fixture()
def client(server):
    with grpcclient.InferenceServerClient(url=server.grpc_address) as c:
        yield c


def make_inputs(arrays):
    inputs = []
    for (name, datatype, _), array in zip(TENSORS, arrays):
        inp = grpcclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    return inputs


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("titanic")
    # Not served is not ready, as Triton answers: no exception while a
    # client polls around a load.
    assert client.is_model_ready("nope") is False
    assert client.is_model_ready("titanic", model_version="7") is False
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "wirespeed"
    model = client.get_model_metadata("titanic", as_json=True)
    assert model["inputs"] == [{"name": "features", "datatype": "FP32", "shape": ["-1", "12"]}]
    assert [o["name"] for o in model["outputs"]] == ["probability", "margin"]


def test_every_datatype_round_trips(client):
    arrays = sample()
    result = client.infer("echo", make_inputs(arrays), request_id="g1")
    assert result.get_response().id == "g1"
    check(result, arrays)


def test_a_large_request_round_trips(client):
    arrays = sample()
    arrays[0] = np.random.default_rng(3).normal(size=(262144, 3)).astype(np.float32)
    check(client.infer("echo", make_inputs(arrays)), arrays)


def test_titanic_matches_xgboost(client):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(64, 12)).astype(np.float32)
    booster = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    inp = grpcclient.InferInput("features", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("titanic", [inp], outputs=[grpcclient.InferRequestedOutput("probability")])
    np.testing.assert_allclose(result.as_numpy("probability"), booster.predict(xgb.DMatrix(x)), rtol=1e-6, atol=0)
    assert [o.name for o in result.get_response().outputs] == ["probability"]


def test_the_streaming_api_answers_every_request_in_order(client):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    sent = []
    for i in range(20):
        arrays = sample(i + 1)
        sent.append(arrays)
        client.async_stream_infer("echo", make_inputs(arrays), request_id=str(i))
    # One bad request in the middle: an error for it, and the stream goes on.
    bad = grpcclient.InferInput("f32", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.float32))
    client.async_stream_infer("echo", [bad], request_id="bad")
    client.async_stream_infer("echo", make_inputs(sent[0]), request_id="after")
    for i in range(20):
        result, error = answers.get(timeout=30)
        assert error is None, error
        assert result.get_response().id == str(i)
        check(result, sent[i])
    result, error = answers.get(timeout=30)
    assert result is None and "missing required input(s)" in str(error)
    result, error = answers.get(timeout=30)
    assert error is None and result.get_response().id == "after"
    client.stop_stream()


def infer_error(client, *args, **kwargs):
    with pytest.raises(InferenceServerException) as err:
        client.infer(*args, **kwargs)
    return err.value


def test_errors_carry_the_right_codes(client):
    x = grpcclient.InferInput("features", [1, 12], "FP32")
    x.set_data_from_numpy(np.zeros((1, 12), dtype=np.float32))
    e = infer_error(client, "nope", [x])
    assert e.status() == "StatusCode.NOT_FOUND" and "nope" in e.message()
    wrong = grpcclient.InferInput("features", [1, 11], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 11), dtype=np.float32))
    e = infer_error(client, "titanic", [wrong])
    assert e.status() == "StatusCode.INVALID_ARGUMENT" and "Expected [-1,12], got [1,11]" in e.message()
    e = infer_error(client, "titanic", [x], outputs=[grpcclient.InferRequestedOutput("nope")])
    assert e.status() == "StatusCode.INVALID_ARGUMENT" and "unexpected inference output 'nope'" in e.message()
    assert client.is_server_live()


def raw_stub(server):
    """The generated stub of tritonclient, for requests its helpers cannot build."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    channel = grpc.insecure_channel(server.grpc_address)
    return service_pb2, service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize(
    "case, build, code, needle",
    [
        ("raw size disagrees with the shape", lambda pb, r: r.raw_input_contents.append(bytes(44)),
         grpc.StatusCode.INVALID_ARGUMENT, "take 48 bytes"),
        ("no data at all", lambda pb, r: None, grpc.StatusCode.INVALID_ARGUMENT, "has no data"),
        ("values in the wrong field", lambda pb, r: r.inputs[0].contents.int64_contents.extend([1] * 12),
         grpc.StatusCode.INVALID_ARGUMENT, "int64_contents holds values"),
        ("too few values", lambda pb, r: r.inputs[0].contents.fp32_contents.extend([1.0] * 11),
         grpc.StatusCode.INVALID_ARGUMENT, "holds 11"),
        ("raw entries for some inputs only",
         lambda pb, r: (r.raw_input_contents.append(bytes(48)), r.raw_input_contents.append(bytes(48))),
         grpc.StatusCode.INVALID_ARGUMENT, "2 entries for 1 inputs"),
    ],
)
def test_bad_requests_get_invalid_argument(server, case, build, code, needle):
    pb, stub = raw_stub(server)
    request = pb.ModelInferRequest(model_name="titanic")
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "features", "FP32"
    tensor.shape.extend([1, 12])
    build(pb, request)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == code, case
    assert needle in err.value.details(), (case, err.value.details())
    # And the server keeps serving.
    assert stub.ServerLive(pb.ServerLiveRequest()).live


def curl_model_infer(server, data: bytes):
    """A `ModelInfer` call whose HTTP/2 data is `data` as it is, sent by
    curl: the (grpc-status, grpc-message) it ends with."""
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null",
         "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", "@-",
         f"http://{server.grpc_address}/inference.GRPCInferenceService/ModelInfer"],
        input=data, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    fields = dict(line.split(": ", 1) for line in out.stdout.decode().splitlines() if ": " in line)
    return fields.get("grpc-status"), urllib.parse.unquote(fields.get("grpc-message", ""))


def framed(message: bytes, flag=0, length=None):
    """gRPC's length-prefixed message."""
    return bytes([flag]) + struct.pack(">I", len(message) if length is None else length) + message


@pytest.mark.parametrize("case, data, needle", [
    # gRPC's compression spec: a compressed flag with no grpc-encoding
    # MUST fail with INTERNAL.
    ("compressed flag, no encoding", framed(b"\x0a\x04echo", flag=1), "compressed-flag"),
    # gRPC's status-code table: a request proto that does not parse is
    # INTERNAL.
    ("cut short", framed(b"\x0a\x04echo", length=100), "Unexpected EOF"),
    ("no message", b"", "Missing request message"),
    ("not protobuf", framed(b"\x0a\xff\xff"), "failed to decode Protobuf message"),
    # A raw_input_contents entry (field 7) longer than the message.
    ("raw entry past the end", framed(b"\x0a\x04echo\x3a\x40abcd"), "failed to decode Protobuf message"),
])
def test_a_malformed_message_is_internal_and_the_server_goes_on(server, client, case, data, needle):
    status, message = curl_model_infer(server, data)
    assert status == "13" and needle in message, (case, status, message)
    check(client.infer("echo", make_inputs(sample())), sample())


def test_a_message_read_from_its_frames_answers_as_prost_encodes(server):
    # The same request through grpcio's generated stub, its answer decoded
    # by protobuf: every field where tritonclient's own message puts it.
    pb, stub = raw_stub(server)
    request = pb.ModelInferRequest(model_name="echo", id="frames")
    arrays = sample(rows=40000)
    for (name, datatype, _), array in zip(TENSORS, arrays):
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.extend(array.shape)
        if array.dtype == np.object_:
            request.raw_input_contents.append(b"".join(struct.pack("<I", len(e)) + e for e in array))
        else:
            request.raw_input_contents.append(array.tobytes())
    response = stub.ModelInfer(request)
    assert response.id == "frames" and response.model_name == "echo"
    assert [o.name for o in response.outputs] == [f"{n}_out" for n, _, _ in TENSORS]
    assert list(response.raw_output_contents) == list(request.raw_input_contents)


def test_a_message_over_the_limit_is_refused(tmp_path):
    small = RunningServer(MODELS, ["--max-grpc-message-bytes", "1000"], http="off")
    try:
        with grpcclient.InferenceServerClient(url=small.grpc_address) as client:
            x = grpcclient.InferInput("features", [100, 12], "FP32")
            x.set_data_from_numpy(np.zeros((100, 12), dtype=np.float32))
            e = infer_error(client, "titanic", [x])
            assert e.status() == "StatusCode.RESOURCE_EXHAUSTED" and "limit is: 1000 bytes" in e.message()
            assert client.is_server_live()
    finally:
        small.stop()


def grpcurl():
    found = shutil.which("grpcurl") or str(Path.home() / "go" / "bin" / "grpcurl")
    if not os.access(found, os.X_OK):
        pytest.fail("grpcurl is not installed: `go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3`")
    return found


def test_grpcurl_lists_the_services_through_reflection(server):
    out = subprocess.run([grpcurl(), "-plaintext", server.grpc_address, "list"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    services = out.stdout.split()
    assert "inference.GRPCInferenceService" in services
    assert "grpc.health.v1.Health" in services


def test_grpcurl_calls_server_live_and_health(server):
    out = subprocess.run([grpcurl(), "-plaintext", server.grpc_address, "inference.GRPCInferenceService/ServerLive"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '"live": true' in out.stdout
    out = subprocess.run([grpcurl(), "-plaintext", server.grpc_address, "grpc.health.v1.Health/Check"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '"status": "SERVING"' in out.stdout
