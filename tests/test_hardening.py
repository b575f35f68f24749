"""Hostile input, slow clients, overload and shutdown, against the built
server: after each case the server still answers a normal request, and
every bad request gets a specific 4xx."""

import http.client
import json
import os
import select
import shutil
import signal
import socket
import threading

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from conftest import MODELS, RunningServer, proc_status
from test_binary_http import write_repo

ROW = [1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0]
GOOD = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": ROW}]}).encode()
INFER = "/v2/models/titanic/infer"


def request_bytes(body, path=INFER, extra=b"", length=None):
    length = len(body) if length is None else length
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n" % (path.encode(), length, extra) + body


def exchange(server, raw, shut_write=False, timeout=10):
    """Sends raw bytes on a new connection; returns (status, body) of the
    first response, or (None, b"") if the server closed without one."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    try:
        sock.sendall(raw)
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None, data
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, rest[:length]
    finally:
        sock.close()


def still_serves(server):
    status, body = exchange(server, request_bytes(GOOD))
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["name"] == "probability"


@pytest.fixture(scope="module")
def server():
    running = RunningServer(MODELS, ["--body-timeout", "1", "--header-timeout", "2", "--request-timeout", "4"])
    yield running
    running.stop()


def test_bodies_cut_at_every_offset(server):
    # The client declares the whole length, sends a prefix and closes its side.
    for cut in range(0, len(GOOD), 7):
        status, body = exchange(server, request_bytes(GOOD[:cut], length=len(GOOD)), shut_write=True)
        assert status == 400, (cut, status, body)
    # The body is complete per Content-Length but the JSON is cut short.
    for cut in range(1, len(GOOD), 5):
        status, body = exchange(server, request_bytes(GOOD[:cut]))
        assert status == 400, (cut, body)
        assert "error" in json.loads(body)
    still_serves(server)


def test_content_length_wrong_both_ways(server):
    # Longer than what is sent: the body stalls and times out.
    status, body = exchange(server, request_bytes(GOOD, length=len(GOOD) + 100))
    assert status == 408 and "stalled" in json.loads(body)["error"]
    # Shorter: the JSON the server reads is cut short.
    status, body = exchange(server, request_bytes(GOOD, length=len(GOOD) - 10))
    assert status == 400 and "ends" in json.loads(body)["error"]
    still_serves(server)


@pytest.mark.parametrize("chunked", [b"zz\r\n{}\r\n0\r\n\r\n", b"5\r\n{\"inp\r\nffffffffffffffffff\r\n", b"3\r\n{}\r\n0\r\n\r\n"])
def test_chunked_bodies_with_bad_chunk_sizes(server, chunked):
    raw = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (INFER.encode(), chunked)
    status, body = exchange(server, raw, shut_write=True)
    assert status == 400, body
    still_serves(server)


@pytest.mark.parametrize(
    "body, needle",
    [
        (b'{"inputs": [{"name": "features", "shape": [1000000000000], "datatype": "FP32", "data": [1]}]}', "limit"),
        (b'{"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": ' + b"[" * 10000, "nested deeper"),
        (b'{"extra": ' + b"[" * 10000, "deeper than 64 levels"),
        (b'{"inputs": [{"name": "fea\xff\xfe", "shape": [1], "datatype": "FP32", "data": [1]}]}', "UTF-8"),
        (b'{"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP64", "data": [' + b"1," * 11 + b"1]}]}",
         "FP64"),
    ],
)
def test_absurd_shapes_deep_nesting_and_bad_names(server, body, needle):
    status, answer = exchange(server, request_bytes(body))
    assert status == 400, answer
    assert needle in json.loads(answer)["error"]
    still_serves(server)


def test_binary_sizes_past_the_end(server):
    header = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4800}}]}).encode()
    raw = request_bytes(header + bytes(48), extra=b"Inference-Header-Content-Length: %d\r\n" % len(header))
    status, body = exchange(server, raw)
    assert status == 400 and "add up to 4800 bytes" in json.loads(body)["error"]
    still_serves(server)


def test_header_floods(server):
    many = b"".join(b"X-Flood-%d: y\r\n" % i for i in range(500))
    status, _ = exchange(server, request_bytes(GOOD, extra=many))
    assert status == 431
    huge = b"X-Huge: " + b"a" * (100 << 10) + b"\r\n"
    status, _ = exchange(server, request_bytes(GOOD, extra=huge))
    assert status == 431
    still_serves(server)


def test_ten_thousand_tiny_requests_on_one_connection(server):
    conn = http.client.HTTPConnection(server.address, timeout=30)
    for i in range(10_000):
        conn.request("GET", "/v2/health/live")
        response = conn.getresponse()
        response.read()
        assert response.status == 200, i
    conn.close()
    still_serves(server)


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/v2/models/../../etc/passwd"),
        ("GET", "/v2/models/..%2F..%2Fetc%2Fpasswd/ready"),
        ("POST", "/v2/models/%2e%2e/infer"),
        ("GET", "/v2/models/../ready"),
        ("GET", "/v2/models//etc/passwd"),
        ("POST", "/v1/models/..:predict"),
        ("POST", "/../predict"),
        ("GET", "/v2/models/titanic/../../../etc/passwd"),
    ],
)
def test_path_traversal_attempts(server, method, path):
    raw = b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" % (method.encode(), path.encode())
    status, body = exchange(server, raw)
    assert status in (400, 404), (path, status, body)
    assert b"root:" not in body
    still_serves(server)


def test_slowloris(tmp_path):
    """200 connections trickle a byte every 0.3 s: slow headers are cut by
    the header timeout, slow bodies by the request deadline, every one of
    them by the server rather than by the client running out of bytes, and
    a normal client keeps being served throughout."""
    server = RunningServer(MODELS, ["--header-timeout", "2", "--body-timeout", "1", "--request-timeout", "3"])
    try:
        closed_by_server = {}

        def slow(i):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            payload = request_bytes(GOOD) if i % 2 else b"POST /v2/models/titanic/infer HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 1000
            if i % 2:
                # Headers at once, then the body a byte at a time.
                head, _, _ = payload.partition(b"\r\n\r\n")
                sock.sendall(head + b"\r\n\r\n")
                payload = GOOD
            closed = False
            # A slow client: one byte, then a pause. The payload lasts a
            # minute or more at this pace; the server's timeouts are seconds.
            for b in payload:
                try:
                    sock.sendall(bytes([b]))
                except OSError:
                    closed = True
                    break
                ready, _, _ = select.select([sock], [], [], 0.3)
                if ready:
                    # The server answered (408) or closed.
                    closed = True
                    break
            closed_by_server[i] = closed
            sock.close()

        threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(200)]
        for t in threads:
            t.start()
        ok = 0
        while any(t.is_alive() for t in threads):
            still_serves(server)
            ok += 1
        for t in threads:
            t.join()
        assert ok > 0
        assert len(closed_by_server) == 200
        assert all(closed_by_server.values()), "every slow connection was cut by the server"
        still_serves(server)
    finally:
        server.stop()


def prepend(path, lines):
    """Top-level keys go before the config's [[inputs]] tables."""
    path.write_text(lines + path.read_text())


def rss_kib(pid):
    return proc_status(pid, "VmRSS")


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    """An identity model that takes 20 ms per request, one at a time, with
    room for 4 waiting: it takes 50 requests a second."""
    root = tmp_path_factory.mktemp("slow")
    write_repo(root, "slow", [("x", "FP32", "[-1]")])
    prepend(root / "slow" / "config.toml", "max_concurrency = 1\nmax_queue = 4\ndelay_ms = 20\n")
    running = RunningServer(root)
    yield running
    running.stop()


def test_overload_is_shed_not_queued(slow_server):
    body = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]})
    results = []
    lock = threading.Lock()

    def client(n):
        session = requests.Session()
        for _ in range(n):
            try:
                r = session.post(f"http://{slow_server.address}/v2/models/slow/infer", data=body, timeout=10)
                outcome = (r.status_code, r.headers.get("Retry-After"), r.json())
            except requests.RequestException as e:
                outcome = ("error", None, str(e))
            with lock:
                results.append(outcome)

    # 16 clients in a closed loop: far more than 1 computing and 4 waiting.
    threads = [threading.Thread(target=client, args=(25,)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    statuses = [r[0] for r in results]
    assert len(results) == 400 and "error" not in statuses, "every request was answered"
    assert statuses.count(200) > 0 and statuses.count(503) > 0
    shed = [r for r in results if r[0] == 503]
    assert all(r[1] == "1" and "busy" in r[2]["error"] for r in shed)
    assert rss_kib(slow_server.process.pid) < 200 * 1024


def test_grpc_overload_is_resource_exhausted(slow_server):
    codes = []
    lock = threading.Lock()

    def client():
        with grpcclient.InferenceServerClient(url=slow_server.grpc_address) as c:
            x = grpcclient.InferInput("x", [2], "FP32")
            x.set_data_from_numpy(np.ones(2, dtype=np.float32))
            for _ in range(15):
                try:
                    c.infer("slow", [x])
                    code = "OK"
                except Exception as e:  # noqa: BLE001 - the status is what is checked
                    code = e.status()
                with lock:
                    codes.append(code)

    threads = [threading.Thread(target=client) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(codes) == 180
    assert "OK" in codes and "StatusCode.RESOURCE_EXHAUSTED" in codes
    assert set(codes) <= {"OK", "StatusCode.RESOURCE_EXHAUSTED"}


def test_grpc_deadline_is_honoured(slow_server):
    with grpcclient.InferenceServerClient(url=slow_server.grpc_address) as c:
        x = grpcclient.InferInput("x", [2], "FP32")
        x.set_data_from_numpy(np.ones(2, dtype=np.float32))
        with pytest.raises(Exception) as err:
            c.infer("slow", [x], client_timeout=0.005)
        assert "DEADLINE_EXCEEDED" in str(err.value.status())
        assert c.infer("slow", [x], client_timeout=5).as_numpy("x_out").tolist() == [1.0, 1.0]


def drain_repo(tmp_path, delay_ms):
    write_repo(tmp_path, "slow", [("x", "FP32", "[-1]")])
    prepend(tmp_path / "slow" / "config.toml", f"max_concurrency = 8\ndelay_ms = {delay_ms}\n")
    return tmp_path


def test_sigterm_drains_accepted_requests_and_refuses_new_ones(tmp_path):
    server = RunningServer(drain_repo(tmp_path, 500), ["--log-level", "debug"])
    body = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [7]}]})
    answers = []

    def client():
        r = requests.post(f"http://{server.address}/v2/models/slow/infer", data=body, timeout=30)
        answers.append(r.status_code)

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    server.wait_for_log("computing", count=6)
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("stopped accepting")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
    for t in threads:
        t.join(timeout=30)
    assert answers == [200] * 6
    assert server.process.wait(timeout=15) == 0
    log = "".join(server.log)
    assert "shutting down" in log


def test_a_second_signal_exits_at_once(tmp_path):
    server = RunningServer(drain_repo(tmp_path, 5000), ["--log-level", "debug"])
    body = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [7]}]})
    def doomed():
        # Cut off by the second signal: its failure is the point.
        try:
            requests.post(f"http://{server.address}/v2/models/slow/infer", data=body, timeout=30)
        except requests.RequestException:
            pass

    threading.Thread(target=doomed, daemon=True).start()
    server.wait_for_log("computing")
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("stopped accepting")
    assert server.process.poll() is None, "the first signal drains"
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=3) == 130


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed to make the test certificate")
    root = tmp_path_factory.mktemp("tls")
    cert, key, token = root / "cert.pem", root / "key.pem", root / "token"
    out = os.system(
        f"openssl req -x509 -newkey rsa:2048 -nodes -keyout {key} -out {cert} -days 1 -subj /CN=localhost "
        f"-addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' >/dev/null 2>&1"
    )
    assert out == 0
    token.write_text("s3cret-token\n")
    running = RunningServer(MODELS, ["--tls-cert", cert, "--tls-key", key, "--auth-token-file", token])
    yield running, cert
    running.stop()


def test_auth_over_tls(tls_server):
    server, cert = tls_server
    url = f"https://127.0.0.1:{server.port}"
    assert requests.get(f"{url}/v2/health/ready", verify=str(cert)).status_code == 200
    denied = requests.post(f"{url}{INFER}", data=GOOD, verify=str(cert))
    assert denied.status_code == 401 and denied.headers["WWW-Authenticate"] == "Bearer"
    wrong = requests.post(f"{url}{INFER}", data=GOOD, verify=str(cert), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = requests.post(f"{url}{INFER}", data=GOOD, verify=str(cert), headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200, ok.text
    # Plain HTTP on the TLS port gets no answer.
    with pytest.raises(requests.RequestException):
        requests.get(f"http://127.0.0.1:{server.port}/v2/health/live", timeout=3)


def test_tritonclient_over_tls_with_the_token(tls_server):
    import tritonclient.http as httpclient
    import gevent.ssl

    server, cert = tls_server
    x = np.array([ROW], dtype=np.float32)
    client = httpclient.InferenceServerClient(
        url=f"127.0.0.1:{server.port}", ssl=True,
        ssl_context_factory=lambda: gevent.ssl.create_default_context(cafile=str(cert)))
    inp = httpclient.InferInput("features", [1, 12], "FP32")
    inp.set_data_from_numpy(x)
    p = client.infer("titanic", [inp], headers={"Authorization": "Bearer s3cret-token"}).as_numpy("probability")
    assert 0 < p[0] < 1
    with grpcclient.InferenceServerClient(url=f"localhost:{server.grpc_port}", ssl=True,
                                          root_certificates=str(cert)) as c:
        assert c.is_server_live()  # a health check: no token needed
        g = grpcclient.InferInput("features", [1, 12], "FP32")
        g.set_data_from_numpy(x)
        with pytest.raises(Exception) as err:
            c.infer("titanic", [g])
        assert "UNAUTHENTICATED" in str(err.value.status())
        got = c.infer("titanic", [g], headers={"authorization": "Bearer s3cret-token"}).as_numpy("probability")
        np.testing.assert_array_equal(got, p)


def test_a_large_answer_over_tls_arrives_whole_and_the_connection_goes_on(tls_server):
    """1,000 Titanic rows (an 85 KB body, read whole by the HTTP/1 fast
    path) answered over TLS on one kept-alive connection, three times: each
    answer, past one TLS record, arrives whole, flushed, and matches the
    xgboost package's predictions."""
    import xgboost as xgb

    server, cert = tls_server
    data = np.round(np.random.default_rng(3).random((1000, 12)), 4)
    body = json.dumps({"inputs": [{"name": "features", "shape": [1000, 12], "datatype": "FP32",
                                   "data": data.tolist()}]})
    assert len(body) < 256 << 10
    booster = xgb.Booster()
    booster.load_model(str(MODELS / "titanic" / "model.json"))
    expected = booster.predict(xgb.DMatrix(data.astype(np.float32)))
    with requests.Session() as session:
        for _ in range(3):
            answer = session.post(f"https://127.0.0.1:{server.port}{INFER}", data=body, verify=str(cert),
                                  headers={"Authorization": "Bearer s3cret-token"}, timeout=60)
            assert answer.status_code == 200, answer.text[:200]
            assert len(answer.content) > 16 << 10
            got = np.array(answer.json()["outputs"][0]["data"], dtype=np.float32)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
