"""Triton's binary tensor data extension over HTTP, driven by tritonclient's
defaults (binary inputs and outputs), plus hand-made bodies for the raw
layout and for every way the binary framing can be wrong."""

import http.client
import json
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import RunningServer

TENSORS = [
    # name, datatype, config shape
    ("f32", "FP32", "[-1, 3]"),
    ("i64", "INT64", "[-1]"),
    ("flag", "BOOL", "[2, 2]"),
    ("text", "BYTES", "[-1]"),
    ("half", "FP16", "[-1]"),
    ("u8", "UINT8", "[-1]"),
]


def write_repo(root, name, tensors):
    (root / name).mkdir()
    lines = ['backend = "identity"']
    for n, datatype, shape in tensors:
        lines += ["[[inputs]]", f'name = "{n}"', f'datatype = "{datatype}"', f"shape = {shape}"]
    for n, datatype, shape in tensors:
        lines += ["[[outputs]]", f'name = "{n}_out"', f'datatype = "{datatype}"', f"shape = {shape}"]
    (root / name / "config.toml").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    write_repo(root, "echo", TENSORS)
    write_repo(root, "single", [("x", "FP32", "[-1, 4]")])
    write_repo(root, "text", [("t", "BYTES", "[1]")])
    running = RunningServer(root)
    yield running
    running.stop()


def as_bytes(values):
    return [v.encode() if isinstance(v, str) else bytes(v) for v in values]


def sample(rows=7, utf8_only=False):
    rng = np.random.default_rng(rows)
    f32 = rng.normal(size=(rows, 3)).astype(np.float32)
    f32[0, :] = [np.nan, np.inf, -np.inf]
    i64 = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -5], dtype=np.int64)
    flag = np.array([[True, False], [False, True]])
    # JSON carries BYTES as strings, so only binary outputs can carry bytes that are not UTF-8.
    last = "tab\tnew\nline".encode() if utf8_only else bytes([0, 255, 10])
    text = np.array([b"plain", b"", "é😀".encode(), last], dtype=np.object_)
    half = np.array([0.1, 65504, -0.0, 6e-8], dtype=np.float16)
    u8 = np.arange(256, dtype=np.uint8)
    return [f32, i64, flag, text, half, u8]


def make_inputs(arrays, binary):
    inputs = []
    for (name, datatype, _), array in zip(TENSORS, arrays):
        inp = httpclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array, binary_data=binary)
        inputs.append(inp)
    return inputs


def check_outputs(result, arrays):
    for (name, _, _), array in zip(TENSORS, arrays):
        got = result.as_numpy(f"{name}_out")
        assert got.shape == array.shape, name
        if array.dtype == np.object_:
            assert as_bytes(got) == list(array)
        else:
            assert got.dtype == array.dtype, name
            np.testing.assert_array_equal(got, array)  # bit-exact, NaN == NaN


def test_the_server_advertises_the_extension(server):
    client = httpclient.InferenceServerClient(url=server.address)
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]


def test_tritonclient_defaults_are_binary_both_ways(server):
    client = httpclient.InferenceServerClient(url=server.address)
    arrays = sample()
    # No outputs listed: tritonclient asks for every output in binary.
    result = client.infer("echo", make_inputs(arrays, binary=True), request_id="b1")
    response = result.get_response()
    assert response["id"] == "b1"
    for output in response["outputs"]:
        assert "data" not in output and output["parameters"]["binary_data_size"] >= 0
    check_outputs(result, arrays)


def test_binary_inputs_with_json_outputs(server):
    client = httpclient.InferenceServerClient(url=server.address)
    arrays = sample(utf8_only=True)
    outputs = [httpclient.InferRequestedOutput(f"{n}_out", binary_data=False) for n, dt, _ in TENSORS if dt != "FP16"]
    arrays_json = [a for (n, dt, _), a in zip(TENSORS, arrays) if dt != "FP16"]
    result = client.infer("echo", make_inputs(arrays, binary=True), outputs=outputs)
    for output in result.get_response()["outputs"]:
        assert "data" in output
    for (name, dt, _), array in zip([t for t in TENSORS if t[1] != "FP16"], arrays_json):
        got = result.as_numpy(f"{name}_out")
        if array.dtype == np.object_:
            assert as_bytes(got) == list(array)
        else:
            np.testing.assert_array_equal(got, array)


def test_some_outputs_binary_and_others_json(server):
    client = httpclient.InferenceServerClient(url=server.address)
    arrays = sample(utf8_only=True)
    outputs = [
        httpclient.InferRequestedOutput(f"{name}_out", binary_data=(i % 2 == 0)) for i, (name, _, _) in enumerate(TENSORS)
    ]
    # JSON inputs, mixed outputs.
    result = client.infer("echo", make_inputs(arrays, binary=False), outputs=outputs)
    by_name = {o["name"]: o for o in result.get_response()["outputs"]}
    for i, (name, _, _) in enumerate(TENSORS):
        assert ("data" in by_name[f"{name}_out"]) == (i % 2 == 1)
    check_outputs(result, arrays)


def test_mixed_binary_and_json_inputs(server):
    client = httpclient.InferenceServerClient(url=server.address)
    arrays = sample(3, utf8_only=True)
    inputs = []
    for i, ((name, datatype, _), array) in enumerate(zip(TENSORS, arrays)):
        inp = httpclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array, binary_data=(i % 2 == 0 or datatype == "FP16"))
        inputs.append(inp)
    check_outputs(client.infer("echo", inputs), arrays)


def test_a_large_binary_request_round_trips(server):
    client = httpclient.InferenceServerClient(url=server.address, network_timeout=120)
    rng = np.random.default_rng(1)
    rows = 262144
    arrays = sample()
    arrays[0] = rng.normal(size=(rows, 3)).astype(np.float32)
    check_outputs(client.infer("echo", make_inputs(arrays, binary=True)), arrays)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_large_and_small_outputs_in_turn_keep_their_order(server, compression):
    # Large outputs go out as their own buffers and small ones are copied
    # after the header: a large, a small, a large, ... must still arrive
    # in order, plain and compressed whole.
    client = httpclient.InferenceServerClient(url=server.address, network_timeout=120)
    rng = np.random.default_rng(2)
    arrays = sample()
    arrays[1] = rng.integers(-(2**62), 2**62, size=5000, dtype=np.int64)  # 40 KB
    arrays[5] = rng.integers(0, 255, size=70000, dtype=np.uint8)  # 70 KB, last
    arrays[4] = rng.normal(size=16384).astype(np.float16)  # 32 KB after the small BYTES
    result = client.infer("echo", make_inputs(arrays, binary=True), response_compression_algorithm=compression)
    check_outputs(result, arrays)


def post(server, path, body, headers):
    conn = http.client.HTTPConnection(server.address, timeout=30)
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    return conn, response, data


def still_serves(conn):
    """The same keep-alive connection answers a good request afterwards."""
    array = np.arange(8, dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}}],
                         "outputs": [{"name": "x_out", "parameters": {"binary_data": True}}]}).encode()
    conn.request("POST", "/v2/models/single/infer", body=header + array.tobytes(),
                 headers={"Inference-Header-Content-Length": str(len(header))})
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200, data
    n = int(response.getheader("Inference-Header-Content-Length"))
    meta = json.loads(data[:n])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 32
    np.testing.assert_array_equal(np.frombuffer(data[n:], dtype=np.float32), array)


def test_a_raw_body_is_the_single_input(server):
    array = np.arange(12, dtype=np.float32)
    conn, response, data = post(server, "/v2/models/single/infer", array.tobytes(),
                                {"Inference-Header-Content-Length": "0"})
    assert response.status == 200, data
    n = int(response.getheader("Inference-Header-Content-Length"))
    meta = json.loads(data[:n])
    assert meta["outputs"][0]["shape"] == [3, 4]
    np.testing.assert_array_equal(np.frombuffer(data[n:], dtype=np.float32), array)
    still_serves(conn)


def test_a_raw_body_is_the_one_element_of_a_bytes_input(server):
    """Triton's binary extension: a raw body for a BYTES input of shape [1]
    is its one element, whole (no length prefix), any bytes."""
    text = b"\xff\x00 not even UTF-8"
    conn, response, data = post(server, "/v2/models/text/infer", text, {"Inference-Header-Content-Length": "0"})
    assert response.status == 200, data
    n = int(response.getheader("Inference-Header-Content-Length"))
    meta = json.loads(data[:n])
    assert meta["outputs"][0]["shape"] == [1] and meta["outputs"][0]["datatype"] == "BYTES"
    assert data[n:] == struct.pack("<I", len(text)) + text
    # An input of several elements cannot take one raw element.
    conn, response, data = post(server, "/v2/models/echo/infer", b"x", {"Inference-Header-Content-Length": "0"})
    assert response.status == 400, data
    still_serves(conn)


def test_a_raw_body_is_held_to_the_element_limit(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    write_repo(root, "single", [("x", "FP32", "[-1, 4]")])
    small = RunningServer(root, ["--max-elements", "8"], grpc="off")
    try:
        conn, response, data = post(small, "/v2/models/single/infer", bytes(48),
                                    {"Inference-Header-Content-Length": "0"})
        assert response.status == 400
        assert "over the limits of 8 elements" in json.loads(data)["error"]
    finally:
        small.stop()


def header_for(inputs, extra=None):
    body = {"inputs": inputs}
    body.update(extra or {})
    return json.dumps(body).encode()


X = {"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}


@pytest.mark.parametrize(
    "case, header, tail, headers, status, needle",
    [
        ("header longer than body", header_for([X]), bytes(16), {"Inference-Header-Content-Length": "9999"}, 400,
         "larger than the whole body"),
        ("header not a number", header_for([X]), bytes(16), {"Inference-Header-Content-Length": "ten"}, 400,
         "must be a byte count"),
        ("binary_data_size past the body", header_for([dict(X, parameters={"binary_data_size": 64})]), bytes(16), None,
         400, "add up to 64 bytes"),
        ("binary size short of the body", header_for([X]), bytes(20), None, 400, "add up to 16 bytes"),
        ("size disagrees with the shape", header_for([dict(X, parameters={"binary_data_size": 12})]), bytes(12), None,
         400, "take 16 bytes"),
        ("raw body not a whole shape", b"", bytes(20), {"Inference-Header-Content-Length": "0"}, 400,
         "not a multiple of 4"),
        ("raw body not whole elements", b"", bytes(18), {"Inference-Header-Content-Length": "0"}, 400,
         "whole number of 4-byte elements"),
        ("data and binary_data_size", header_for([dict(X, data=[1, 2, 3, 4])]), bytes(16), None, 400,
         "both 'data' and 'binary_data_size'"),
        ("binary_data_size without the header", header_for([X]), b"", {}, 400, "no Inference-Header-Content-Length"),
        ("binary_data_size not an integer", header_for([dict(X, parameters={"binary_data_size": "16"})]), bytes(16),
         None, 400, "non-negative integer"),
        ("unknown fields are skipped", header_for([dict(X, colour="red")], {"extra": {"a": [1]}}), bytes(16), None,
         200, None),
        ("binary_data_output not a bool", header_for([X], {"parameters": {"binary_data_output": 1}}), bytes(16), None,
         400, "must be a bool"),
    ],
)
def test_bad_binary_framing_is_a_specific_400(server, case, header, tail, headers, status, needle):
    if headers is None:
        headers = {"Inference-Header-Content-Length": str(len(header))}
    conn, response, data = post(server, "/v2/models/single/infer", header + tail, headers)
    assert response.status == status, (case, data)
    if needle:
        error = json.loads(data)["error"]
        assert needle in error, (case, error)
    still_serves(conn)


def test_a_bool_byte_other_than_0_or_1_is_refused(server):
    header = header_for([{"name": "flag", "shape": [2, 2], "datatype": "BOOL", "parameters": {"binary_data_size": 4}}])
    conn, response, data = post(server, "/v2/models/echo/infer", header + bytes([0, 1, 2, 1]),
                                {"Inference-Header-Content-Length": str(len(header))})
    assert response.status == 400
    assert "only 0 and 1" in json.loads(data)["error"]


def test_a_body_cut_inside_the_binary_part_is_refused(server):
    header = header_for([X])
    body = header + bytes(8)
    conn = http.client.HTTPConnection(server.address, timeout=30)
    # Chunked, so the server cannot know the length up front.
    conn.putrequest("POST", "/v2/models/single/infer")
    conn.putheader("Inference-Header-Content-Length", str(len(header)))
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    response = conn.getresponse()
    data = response.read()
    assert response.status == 400
    assert "ended 8 bytes into the 16 bytes" in json.loads(data)["error"]
    still_serves(conn)


def test_bytes_elements_with_bad_lengths_are_refused(server):
    raw = struct.pack("<I", 100) + b"abc"
    header = header_for([{"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}])
    conn, response, data = post(server, "/v2/models/echo/infer", header + raw,
                                {"Inference-Header-Content-Length": str(len(header))})
    assert response.status == 400
    assert "past the end" in json.loads(data)["error"]
