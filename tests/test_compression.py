"""Compression both ways, with tritonclient's own options, unmodified:
http `request_compression_algorithm` / `response_compression_algorithm`
and grpc `compression_algorithm`, gzip and deflate. References: the
identity model's input (what goes in comes back) and Python's zlib/gzip.
And a gzip bomb: a small body that expands past the body limit is a 413,
with the server's memory bounded."""

import gzip
import http.client
import json
import shutil
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import MODELS, RunningServer, proc_status

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(MODELS / "identity_fp32", root / "identity_fp32")
    running = RunningServer(root, extra_args=["--max-body-bytes", str(LIMIT), "--max-grpc-message-bytes", str(LIMIT)])
    yield running
    running.stop()


def sample(rows=64):
    return np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) / 7


@pytest.mark.parametrize("request_algorithm", ["gzip", "deflate", None])
@pytest.mark.parametrize("response_algorithm", ["gzip", "deflate", None])
@pytest.mark.parametrize("binary", [True, False])
def test_http_compression_both_ways(server, request_algorithm, response_algorithm, binary):
    client = httpclient.InferenceServerClient(server.address)
    data = sample()
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer(
        "identity_fp32",
        [inp],
        outputs=[out],
        request_compression_algorithm=request_algorithm,
        response_compression_algorithm=response_algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_the_answer_is_compressed_as_accept_encoding_asks(server, coding):
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [64, 16], "datatype": "FP32", "data": sample().ravel().tolist()}]}
    )
    conn = http.client.HTTPConnection(server.address)
    conn.request("POST", "/v2/models/identity_fp32/infer", body, {"Accept-Encoding": coding})
    response = conn.getresponse()
    raw = response.read()
    assert response.status == 200 and response.getheader("Content-Encoding") == coding
    text = gzip.decompress(raw) if coding == "gzip" else zlib.decompress(raw)
    assert len(raw) < len(text)
    np.testing.assert_array_equal(np.array(json.loads(text)["outputs"][0]["data"], dtype=np.float32), sample().ravel())
    conn.request("POST", "/v2/models/identity_fp32/infer", body, {"Accept-Encoding": "br"})
    response = conn.getresponse()
    assert response.getheader("Content-Encoding") is None and json.loads(response.read())["outputs"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_grpc_compression_both_ways(server, algorithm):
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        data = sample()
        inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        result = client.infer("identity_fp32", [inp], compression_algorithm=algorithm)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def post(server, body, headers):
    conn = http.client.HTTPConnection(server.address)
    conn.request("POST", "/v2/models/identity_fp32/infer", body, headers)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_a_gzip_bomb_is_a_413_with_bounded_memory(server):
    # 1 KB of gzip that expands past the 1 MiB limit.
    small = gzip.compress(b" " * (LIMIT + 4096), 9)
    assert len(small) < 2048
    status, answer = post(server, small, {"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert status == 413 and "limit" in answer["error"], answer
    # A larger one, 512 MiB of JSON whitespace in about 500 KB, held to the
    # same limit: the server's memory does not grow with what the body
    # expands to.
    rss_before = proc_status(server.process.pid, "VmRSS")
    deflater = zlib.compressobj(9)
    mib = b" " * (1 << 20)
    bomb = b"".join(deflater.compress(mib) for _ in range(512)) + deflater.flush()
    assert len(bomb) < LIMIT
    status, answer = post(server, bomb, {"Content-Encoding": "deflate"})
    assert status == 413, answer
    assert proc_status(server.process.pid, "VmRSS") - rss_before < 64 * 1024


def test_corrupt_and_unknown_codings_are_named(server):
    status, answer = post(server, b"\x1f\x8b not gzip at all", {"Content-Encoding": "gzip"})
    assert status == 400 and "gzip" in answer["error"] and "decompressed" in answer["error"], answer
    status, answer = post(server, b"{}", {"Content-Encoding": "br"})
    assert status == 400 and '"br"' in answer["error"], answer


def test_a_grpc_message_that_expands_past_the_limit_is_refused(server):
    # 2 MiB of zeros: a few KB compressed, twice the 1 MiB message limit
    # once decompressed.
    zeros = np.zeros((1, 512 * 1024), dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        inp = grpcclient.InferInput("INPUT0", list(zeros.shape), "FP32")
        inp.set_data_from_numpy(zeros)
        with pytest.raises(Exception) as refused:
            client.infer("identity_fp32", [inp], compression_algorithm="gzip")
        assert "RESOURCE_EXHAUSTED" in str(refused.value) and "1048576" in str(refused.value), str(refused.value)
        # The server is still there for the next request.
        small = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        small.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        np.testing.assert_array_equal(client.infer("identity_fp32", [small]).as_numpy("OUTPUT0"), np.ones((1, 4)))
