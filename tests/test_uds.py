"""Unix domain sockets: REST over curl --unix-socket, gRPC over unix://,
stale socket files, permissions, and clean-up at exit."""

import json
import socket
import stat
import subprocess

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from conftest import MODELS, RunningServer, run_wirespeed


@pytest.fixture(scope="module")
def sockets(tmp_path_factory):
    root = tmp_path_factory.mktemp("uds")
    http_sock, grpc_sock = root / "http.sock", root / "grpc.sock"
    # A stale socket file from a server that died: replaced at start.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(grpc_sock))
    stale.close()
    server = RunningServer(MODELS, ["--http-uds", str(http_sock), "--grpc-uds", str(grpc_sock)])
    yield server, http_sock, grpc_sock
    server.stop()
    assert server.process.returncode == 0, "".join(server.log)
    assert not http_sock.exists() and not grpc_sock.exists(), "socket files are removed at exit"


def curl(sock, *args):
    out = subprocess.run(["curl", "-sS", "--unix-socket", str(sock), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_rest_over_the_socket(sockets):
    _, http_sock, _ = sockets
    assert json.loads(curl(http_sock, "http://localhost/v2/health/ready")) == {"ready": True}
    body = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": [0.5] * 12}]})
    answer = json.loads(curl(http_sock, "-X", "POST", "-d", body, "http://localhost/v2/models/titanic/infer"))
    assert answer["outputs"][0]["name"] == "probability"
    assert 0 < answer["outputs"][0]["data"][0] < 1


# grpcio (C-core >= 1.57) sends the socket path, percent-encoded, as the
# HTTP/2 :authority, and grpc-java the raw path; the h2 crate refuses both
# (hyperium/h2#487). wirespeed makes them valid on its gRPC Unix sockets,
# so these clients run with no channel options.


def test_grpc_over_the_socket(sockets):
    server, _, grpc_sock = sockets
    x = np.random.default_rng(0).uniform(size=(4, 12)).astype(np.float32)
    with grpcclient.InferenceServerClient(url=f"unix://{grpc_sock}") as client, \
            grpcclient.InferenceServerClient(url=server.grpc_address) as tcp:
        assert client.is_server_live()
        assert client.is_model_ready("titanic")
        inp = grpcclient.InferInput("features", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for _ in range(3):  # later requests reuse the HPACK dynamic table
            over_unix = client.infer("titanic", [inp]).as_numpy("probability")
        over_tcp = tcp.infer("titanic", [inp]).as_numpy("probability")
        # A large tensor: many DATA frames through the same connection.
        big = np.random.default_rng(1).uniform(size=(100_000, 12)).astype(np.float32)
        large = grpcclient.InferInput("features", list(big.shape), "FP32")
        large.set_data_from_numpy(big)
        large_unix = client.infer("titanic", [large]).as_numpy("probability")
        large_tcp = tcp.infer("titanic", [large]).as_numpy("probability")
    np.testing.assert_array_equal(over_unix, over_tcp)
    np.testing.assert_array_equal(large_unix, large_tcp)


@pytest.mark.parametrize("authority", [None, "/raw/socket/path.sock"])
def test_plain_grpcio_over_the_socket(sockets, authority):
    """grpcio's own stub, as grpcio writes the authority, and as grpc-java
    and Bazel do (the raw path, set here to stand in for them)."""
    _, _, grpc_sock = sockets
    options = [] if authority is None else [("grpc.default_authority", authority)]
    with grpc.insecure_channel(f"unix:{grpc_sock}", options=options) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerReady(service_pb2.ServerReadyRequest()).ready
        meta = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="titanic"))
        assert meta.inputs[0].name == "features"


def test_tcp_still_refuses_a_malformed_authority(sockets):
    server, _, _ = sockets
    with grpc.insecure_channel(server.grpc_address, options=[("grpc.default_authority", "/not/a/host")]) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ServerReady(service_pb2.ServerReadyRequest())
    assert refused.value.code() == grpc.StatusCode.INTERNAL


def test_grpcurl_over_the_socket(sockets):
    from test_grpc import grpcurl

    _, _, grpc_sock = sockets
    out = subprocess.run([grpcurl(), "-plaintext", "-unix", str(grpc_sock),
                          "inference.GRPCInferenceService/ServerReady"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '"ready": true' in out.stdout


def test_sockets_are_owner_and_group_only(sockets):
    _, http_sock, grpc_sock = sockets
    for path in (http_sock, grpc_sock):
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o660


def test_a_live_socket_is_not_taken_over(sockets):
    _, http_sock, _ = sockets
    out = run_wirespeed("serve", "--models", MODELS, "--http", "off", "--grpc", "off", "--http-uds", http_sock)
    assert out.returncode != 0
    assert "already listening" in out.stderr and "--http-uds" in out.stderr, out.stderr


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("keep me")
    out = run_wirespeed("serve", "--models", MODELS, "--http", "off", "--grpc", "off", "--grpc-uds", path)
    assert out.returncode != 0
    assert "not a socket" in out.stderr, out.stderr
    assert path.read_text() == "keep me"


def test_no_listener_at_all_is_refused():
    out = run_wirespeed("serve", "--models", MODELS, "--http", "off", "--grpc", "off")
    assert out.returncode != 0
    assert "nothing to listen on" in out.stderr, out.stderr
