"""End to end over JSON: tritonclient sends FP32, INT64, BOOL, BYTES and
FP16 inputs (binary_data=False) to an identity model, and gets them back
exactly. Also: a large body (decoded off the async workers) and a chunked
body without Content-Length, fed in small pieces."""

import http.client
import json

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
]


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    (root / "echo").mkdir()
    lines = ['backend = "identity"']
    for name, datatype, shape in TENSORS:
        lines += ["[[inputs]]", f'name = "{name}"', f'datatype = "{datatype}"', f"shape = {shape}"]
    for name, datatype, shape in TENSORS:
        lines += ["[[outputs]]", f'name = "{name}_out"', f'datatype = "{datatype}"', f"shape = {shape}"]
    (root / "echo" / "config.toml").write_text("\n".join(lines) + "\n")
    server = RunningServer(root)
    yield server
    server.stop()


def infer(client, arrays):
    inputs = []
    for (name, datatype, _), array in zip(TENSORS, arrays):
        inp = httpclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array, binary_data=False)
        inputs.append(inp)
    outputs = [httpclient.InferRequestedOutput(f"{name}_out", binary_data=False) for name, _, _ in TENSORS]
    return client.infer("echo", inputs, outputs=outputs, request_id="dt")


def sample(rows):
    rng = np.random.default_rng(rows)
    f32 = rng.normal(size=(rows, 3)).astype(np.float32)
    f32[0, :] = [np.nan, np.inf, -np.inf]
    i64 = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0] + list(rng.integers(-1e9, 1e9, rows)), dtype=np.int64)
    flag = np.array([[True, False], [False, True]])
    text = np.array(["plain", 'quote " and \\ backslash', "é😀", "tab\tnew\nline"], dtype=np.object_)
    half = np.array([0.1, 65504, -0.0, 6e-8], dtype=np.float16)
    return [f32, i64, flag, text, half]


def check(result, arrays):
    assert result.get_response()["id"] == "dt"
    f32, i64, flag, text, half = arrays
    got = result.as_numpy("f32_out")
    assert got.dtype == np.float32 and got.shape == f32.shape
    np.testing.assert_array_equal(got, f32)  # bit-exact, NaN == NaN
    np.testing.assert_array_equal(result.as_numpy("i64_out"), i64)
    np.testing.assert_array_equal(result.as_numpy("flag_out"), flag)
    assert [s.decode() if isinstance(s, bytes) else s for s in result.as_numpy("text_out")] == list(text)
    np.testing.assert_array_equal(result.as_numpy("half_out"), half)


def test_every_json_datatype_round_trips(echo_server):
    client = httpclient.InferenceServerClient(url=echo_server.address)
    arrays = sample(5)
    check(infer(client, arrays), arrays)


def test_a_large_body_decodes_off_the_workers_exactly(echo_server):
    client = httpclient.InferenceServerClient(url=echo_server.address, network_timeout=120)
    arrays = sample(60_000)  # about 3.4 MB of JSON
    check(infer(client, arrays), arrays)


def test_a_chunked_body_without_length_streams_through(echo_server):
    arrays = sample(20_000)
    body = json.dumps(
        {
            "inputs": [
                {"name": name, "datatype": datatype, "shape": list(a.shape), "data": a.tolist()}
                for (name, datatype, _), a in zip(TENSORS, arrays)
            ]
        }
    ).encode()
    assert len(body) > 64 * 1024, "must cross the offload threshold mid-stream"

    def pieces():
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    conn = http.client.HTTPConnection("127.0.0.1", echo_server.port, timeout=60)
    conn.request("POST", "/v2/models/echo/infer", body=pieces(), encode_chunked=True, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    assert response.status == 200, raw
    outputs = {o["name"]: o for o in json.loads(raw)["outputs"]}
    got = np.array(outputs["f32_out"]["data"], dtype=np.float32).reshape(outputs["f32_out"]["shape"])
    np.testing.assert_array_equal(got, arrays[0])
    conn.close()


def test_a_bad_value_deep_in_a_large_body_is_located(echo_server):
    arrays = sample(30_000)
    data = json.dumps(arrays[0].tolist())
    body = (
        '{"inputs":[{"name":"f32","datatype":"FP32","shape":[30000,3],"data":' + data.replace("NaN", "01", 1) + "}]}"
    ).encode()
    conn = http.client.HTTPConnection("127.0.0.1", echo_server.port, timeout=60)
    conn.request("POST", "/v2/models/echo/infer", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    error = json.loads(response.read())["error"]
    assert response.status == 400
    assert f"at byte {body.index(b'01')}" in error and "input 'f32'" in error and "leading zeros" in error, error
    # The whole body was read before the answer, so the same connection
    # carries the next request.
    sock = conn.sock
    conn.request("GET", "/v2/health/ready")
    assert conn.getresponse().status == 200
    assert conn.sock is sock, "the connection was not reused"



def test_non_finite_floats_answer_in_json_every_parser_reads(demo_server):
    """NaN is answered as null (as KServe and MLServer write it, and as
    wirespeed reads it), the infinities as the strings "Infinity" and
    "-Infinity": orjson (kserve's parser), json.loads without its
    extensions, and serde_json-like strict parsers read the answer, and
    tritonclient's as_numpy gives the floats back."""
    import orjson

    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "data": [None, 1, "Infinity", "-Infinity"]}]}
    conn = http.client.HTTPConnection("127.0.0.1", demo_server.port, timeout=30)
    conn.request("POST", "/v2/models/identity_fp32/infer", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    assert response.status == 200, raw

    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    strict = json.loads(raw, parse_constant=refuse)
    assert strict["outputs"][0]["data"] == [None, 1.0, "Infinity", "-Infinity"]
    assert orjson.loads(raw) == strict
    # tritonclient, unmodified, sending NaN and the infinities.
    client = httpclient.InferenceServerClient(url=demo_server.address)
    x = np.array([[np.nan, 1.0, np.inf, -np.inf]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    got = client.infer("identity_fp32", [inp], outputs=[out]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(got, x)


def test_bytes_that_are_not_utf8_are_refused_in_json_and_exact_in_binary(demo_server):
    """A JSON string cannot carry bytes that are not UTF-8: the answer says
    which output and how to ask for it, rather than replace them."""
    client = httpclient.InferenceServerClient(url=demo_server.address)
    x = np.array([b"ok", b"\xff\xfe"], dtype=np.object_).reshape(1, 2)
    inp = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
    inp.set_data_from_numpy(x, binary_data=True)
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as refused:
        client.infer("identity_bytes", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    message = refused.value.message()
    assert "output 'OUTPUT0' element 1" in message and "not UTF-8" in message and "binary_data" in message, message
    assert refused.value.status() == "400"
    got = client.infer("identity_bytes", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    assert list(got.as_numpy("OUTPUT0").reshape(-1)) == [b"ok", b"\xff\xfe"]
