"""Bad requests get the right status and a specific `{"error": ...}` message,
and the server answers the next request on the same connection correctly."""

import http.client
import json

import pytest

GOOD = {
    "inputs": [
        {
            "name": "features",
            "shape": [1, 12],
            "datatype": "FP32",
            "data": [1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0],
        }
    ]
}


def with_input(**changes):
    body = json.loads(json.dumps(GOOD))
    body["inputs"][0].update(changes)
    return json.dumps(body).encode()


CASES = [
    # (name, method, path, body, status, words the error must contain)
    ("unknown model", "POST", "/v2/models/nope/infer", json.dumps(GOOD).encode(), 404, ["Request for unknown model: 'nope' is not found"]),
    ("unknown version", "POST", "/v2/models/titanic/versions/9/infer", json.dumps(GOOD).encode(), 404, ["Request for unknown model: 'titanic' version 9 is not found"]),
    ("unknown model metadata", "GET", "/v2/models/nope", None, 404, ["Request for unknown model: 'nope' is not found"]),
    ("wrong input name", "POST", "/v2/models/titanic/infer", with_input(name="x"), 400, ["unexpected inference input 'x' for model 'titanic'"]),
    ("wrong datatype", "POST", "/v2/models/titanic/infer", with_input(datatype="FP64"), 400, ["inference input 'features' data-type is 'FP64', but model 'titanic' expects 'FP32'"]),
    ("unknown datatype", "POST", "/v2/models/titanic/infer", with_input(datatype="FLOAT"), 400, ["unknown datatype 'FLOAT'"]),
    ("count mismatch", "POST", "/v2/models/titanic/infer", with_input(shape=[2, 12]), 400, ["holds 24 elements", "has 12"]),
    ("shape not fitting", "POST", "/v2/models/titanic/infer", with_input(shape=[1, 11], data=[0] * 11), 400, ["Expected [-1,12], got [1,11]"]),
    ("nested wrong", "POST", "/v2/models/titanic/infer", with_input(data=[[0] * 6, [0] * 6]), 400, ["needs 1"]),
    ("malformed JSON", "POST", "/v2/models/titanic/infer", b'{"inputs": [', 400, ["syntax error at byte 12", "ends before the request does"]),
    ("not an object", "POST", "/v2/models/titanic/infer", b"[1, 2]", 400, ["schema error at byte 0", "must be a JSON object"]),
    ("empty body", "POST", "/v2/models/titanic/infer", b"", 400, ["empty request body"]),
    ("unknown output", "POST", "/v2/models/titanic/infer", json.dumps({**GOOD, "outputs": [{"name": "p"}]}).encode(), 400, ["unexpected inference output 'p' for model 'titanic'"]),
    ("string for a float", "POST", "/v2/models/titanic/infer", with_input(data=["1"] + [0] * 11), 400, ["type error in input 'features'", "got a string"]),
    ("bad number", "POST", "/v2/models/titanic/infer", b'{"inputs":[{"name":"features","shape":[1,1],"datatype":"FP32","data":[01]}]}', 400, ["syntax error in input 'features' at byte 70", "leading zeros"]),
    ("NaN is accepted but the shape is checked", "POST", "/v2/models/titanic/infer", with_input(shape=[1, 13], data=[float("nan")] * 13), 400, ["Expected [-1,12], got [1,13]"]),
    ("no route", "GET", "/v2/models/titanic/explain", None, 404, ["no endpoint"]),
    ("wrong method", "GET", "/v2/models/titanic/infer", None, 405, ["takes POST"]),
]


@pytest.fixture
def connection(demo_server):
    conn = http.client.HTTPConnection("127.0.0.1", demo_server.port, timeout=10)
    yield conn
    conn.close()


def request(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.getheader("Content-Type"), response.read()


@pytest.mark.parametrize("name,method,path,body,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_request_is_refused_precisely_and_the_next_one_works(connection, name, method, path, body, status, words):
    got_status, content_type, raw = request(connection, method, path, body)
    assert got_status == status, raw
    assert content_type == "application/json"
    error = json.loads(raw)
    assert list(error) == ["error"], error
    for word in words:
        assert word in error["error"], error

    got_status, _, raw = request(connection, "POST", "/v2/models/titanic/infer", json.dumps(GOOD).encode())
    assert got_status == 200, raw
    outputs = {o["name"]: o["data"] for o in json.loads(raw)["outputs"]}
    # The README's reference prediction for passenger 904.
    assert abs(outputs["probability"][0] - 0.4540421065) < 1e-6
    assert abs(outputs["margin"][0] - -0.1843519155) < 1e-6


def test_an_oversized_body_is_refused_before_it_is_read(demo_server, tmp_path):
    conn = http.client.HTTPConnection("127.0.0.1", demo_server.port, timeout=10)
    conn.putrequest("POST", "/v2/models/titanic/infer")
    conn.putheader("Content-Length", str(65 * 1024 * 1024))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413
    assert "limit" in json.loads(response.read())["error"]
    conn.close()


def test_a_405_says_which_methods_the_endpoint_takes(demo_server):
    conn = http.client.HTTPConnection("127.0.0.1", demo_server.port, timeout=30)
    for method, path, allow in [("PUT", "/v2/health/live", "GET, HEAD"),
                                ("GET", "/v2/models/titanic/infer", "POST")]:
        conn.request(method, path)
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 405 and response.getheader("Allow") == allow, (path, response.headers)
        assert "error" in body
    conn.close()


def test_an_http11_request_without_host_is_a_400_in_the_protocols_shape(demo_server):
    """RFC 9112, section 3.2: a server responds 400 to an HTTP/1.1 request
    that lacks a Host header."""
    import socket

    with socket.create_connection(("127.0.0.1", demo_server.port), timeout=30) as s:
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\n\r\n")
        raw = b""
        while b"\r\n\r\n" not in raw or not raw.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), raw
    assert "Host" in json.loads(body)["error"]
