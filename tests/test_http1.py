"""HTTP/1.1 at the edges, on raw sockets: the plain requests the server
reads in place and the ones it hands to hyper must answer as RFC 9112 says,
and no byte stream may make the server see a request the client did not
send (request smuggling). Every answer is read back with Python's own
`http.client` response parser, one response after another on the same
connection, so a stray or missing byte in ours shows as a parse error."""

import http.client
import json
import socket

import pytest

from conftest import MODELS, RunningServer

ROW = [1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0]
GOOD = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": ROW}]}).encode()
INFER = b"/v2/models/titanic/infer"


@pytest.fixture(scope="module")
def server():
    running = RunningServer(MODELS, ["--keep-alive-timeout", "2", "--header-timeout", "2", "--body-timeout", "1"])
    yield running
    running.stop()


def connect(server):
    return socket.create_connection(("127.0.0.1", server.port), timeout=20)


def responses(sock, count, methods=None):
    """Reads `count` responses from `sock` with http.client's parser; then
    whether the server closed the connection (b"" on a read) or left it
    open."""
    reader = sock.makefile("rb")
    answers = []
    for i in range(count):
        response = http.client.HTTPResponse(sock, method=(methods or {}).get(i, "GET"))
        response.fp = Unclosed(reader)
        response.begin()
        answers.append((response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()))
    return answers, reader


class Unclosed:
    """The connection's reader, which http.client closes after each body:
    the next response is read from the same buffered bytes."""

    def __init__(self, reader):
        self.reader = reader

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def close(self):
        pass


def closed(sock, reader):
    """True when the server closed the connection (waits for it)."""
    try:
        return reader.read(1) == b""
    except (ConnectionResetError, TimeoutError):
        return False


def post(body, extra=b"", path=INFER):
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (path, len(body), extra, body)


def get(path, extra=b""):
    return b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, extra)


def test_pipelined_requests_are_answered_in_order(server):
    sock = connect(server)
    sock.sendall(get(b"/v2/health/live") + post(GOOD) + get(b"/v2") + get(b"/v2/models/titanic"))
    answers, _ = responses(sock, 4)
    assert [a[0] for a in answers] == [200, 200, 200, 200]
    assert json.loads(answers[1][2])["outputs"][0]["name"] == "probability"
    assert json.loads(answers[2][2])["name"] == "wirespeed"
    assert json.loads(answers[3][2])["name"] == "titanic"
    sock.close()


def test_a_long_pipeline_in_one_write_is_answered_whole(server):
    """2,000 requests in one write (each request's remainder stays a slice
    of what was read, never copied per request)."""
    sock = connect(server)
    sock.sendall(get(b"/v2/health/live") * 1000 + (get(b"/v2/health/ready") + get(b"/v2")) * 500)
    answers, _ = responses(sock, 2000)
    assert all(a[0] == 200 for a in answers)
    assert json.loads(answers[-1][2])["name"] == "wirespeed"
    sock.close()


def test_a_pipeline_that_turns_chunked_midway_is_answered_whole(server):
    # The first request is read in place; the second, chunked, goes to
    # hyper with every byte after the first; the third follows it there.
    chunked = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        INFER, len(GOOD), GOOD)
    sock = connect(server)
    sock.sendall(get(b"/v2") + chunked + get(b"/v2/health/ready"))
    answers, _ = responses(sock, 3)
    assert [a[0] for a in answers] == [200, 200, 200]
    assert json.loads(answers[1][2])["outputs"][0]["name"] == "probability"
    sock.close()


def test_chunk_extensions_are_read_past(server):
    half = len(GOOD) // 2
    body = b"%x;name=value\r\n%s\r\n%x ; x=\"q\"\r\n%s\r\n0\r\n\r\n" % (half, GOOD[:half], len(GOOD) - half, GOOD[half:])
    sock = connect(server)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (INFER, body))
    answers, _ = responses(sock, 1)
    assert answers[0][0] == 200, answers
    sock.close()


SMUGGLED = get(b"/v2/health/live")


@pytest.mark.parametrize(
    "raw",
    [
        # Content-Length and Transfer-Encoding: a front proxy reading one
        # and us the other would disagree on where the next request starts.
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s"
        % (INFER, 5 + len(SMUGGLED), SMUGGLED),
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n%s"
        % (INFER, SMUGGLED),
        # Two different lengths.
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: %d\r\n\r\n{}%s"
        % (INFER, 2 + len(SMUGGLED), SMUGGLED),
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2, %d\r\n\r\n{}%s" % (INFER, 2 + len(SMUGGLED), SMUGGLED),
        # A length that is not a plain number.
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}%s" % (INFER, SMUGGLED),
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}%s" % (INFER, SMUGGLED),
        # Obsolete line folding hides a header in the one before it.
        b"POST %s HTTP/1.1\r\nHost: x\r\nX-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}%s"
        % (INFER, SMUGGLED),
        # A bare CR inside a header line.
        b"POST %s HTTP/1.1\r\nHost: x\r\nX-A: b\rContent-Length: 0\r\nContent-Length: 2\r\n\r\n{}%s"
        % (INFER, SMUGGLED),
        # A transfer coding the server does not know, and chunked not last.
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n%s" % (INFER, SMUGGLED),
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n%s" % (INFER, SMUGGLED),
        # A chunk size past any body, and one with a sign.
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n%s" % (INFER, SMUGGLED),
        b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n%s" % (INFER, SMUGGLED),
        # A space before the colon.
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n{}%s" % (INFER, SMUGGLED),
    ],
    ids=["cl-te", "te-cl", "two-lengths", "length-list", "signed-length", "hex-length", "obs-fold", "bare-cr",
         "te-not-last", "te-unknown", "chunk-size-overflow", "chunk-size-signed", "space-before-colon"],
)
def test_ambiguous_framing_is_refused_and_nothing_is_smuggled(server, raw):
    """Each stream is refused with a 4xx and the connection closed, or, for
    Content-Length with Transfer-Encoding, read by the chunked framing and
    closed: never answered as a second request hidden in the first's body."""
    sock = connect(server)
    sock.sendall(raw)
    sock.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 4"), data[:200]
    # One status line only: the smuggled GET (whose answer would be a 200)
    # was never served.
    assert data.count(b"HTTP/1.1 ") == 1, data


def test_expect_100_continue(server):
    sock = connect(server)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n" % (INFER, len(GOOD)))
    interim = b""
    while b"\r\n\r\n" not in interim:
        interim += sock.recv(1)
    assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
    sock.sendall(GOOD)
    answers, _ = responses(sock, 1)
    assert answers[0][0] == 200
    sock.close()


def test_connection_close_is_honoured(server):
    sock = connect(server)
    sock.sendall(get(b"/v2", b"Connection: close\r\n"))
    answers, reader = responses(sock, 1)
    assert answers[0][0] == 200 and answers[0][1]["connection"] == "close"
    assert closed(sock, reader)
    sock.close()


def test_http_1_0_closes_unless_kept_alive(server):
    sock = connect(server)
    sock.sendall(b"GET /v2 HTTP/1.0\r\n\r\n")
    answers, reader = responses(sock, 1)
    assert answers[0][0] == 200 and json.loads(answers[0][2])["name"] == "wirespeed"
    assert closed(sock, reader)
    sock.close()
    sock = connect(server)
    sock.sendall(b"GET /v2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
    answers, _ = responses(sock, 2)
    assert [a[0] for a in answers] == [200, 200]
    sock.close()


def test_head_has_the_length_and_no_body(server):
    sock = connect(server)
    sock.sendall(b"HEAD /v2 HTTP/1.1\r\nHost: x\r\n\r\n" + get(b"/v2/health/live"))
    answers, _ = responses(sock, 2, methods={0: "HEAD"})
    status, headers, body = answers[0]
    assert body == b""
    assert int(headers["content-length"]) == len(requests_get(server, "/v2"))
    assert answers[1][0] == 200
    sock.close()


def requests_get(server, path):
    connection = http.client.HTTPConnection(server.address, timeout=10)
    connection.request("GET", path)
    return connection.getresponse().read()


def test_every_answer_is_dated_and_framed(server):
    """The head as hyper wrote it: a Date (RFC 9110, 6.6.1) and a length."""
    sock = connect(server)
    sock.sendall(get(b"/v2") + post(b"{", path=INFER) + get(b"/nope"))
    answers, _ = responses(sock, 3)
    assert [a[0] for a in answers] == [200, 400, 404]
    for _, headers, body in answers:
        assert "date" in headers and headers["date"].endswith("GMT")
        assert int(headers["content-length"]) == len(body)
    assert "error" in json.loads(answers[1][2])
    sock.close()


def test_an_idle_keep_alive_connection_is_closed(server):
    """Past --keep-alive-timeout with nothing sent, the server closes."""
    sock = connect(server)
    sock.sendall(get(b"/v2"))
    _, reader = responses(sock, 1)
    assert closed(sock, reader)
    sock.close()


def test_a_head_cut_short_then_finished_is_served(server):
    """A head split over two writes goes to hyper with what arrived."""
    sock = connect(server)
    raw = post(GOOD)
    sock.sendall(raw[:17])
    sock.sendall(raw[17:60])
    sock.sendall(raw[60:])
    answers, _ = responses(sock, 1)
    assert answers[0][0] == 200
    sock.sendall(get(b"/v2"))
    answers, _ = responses(sock, 1)
    assert answers[0][0] == 200
    sock.close()


def test_bare_lf_line_endings_are_one_request(server):
    """RFC 9112 lets a server take a bare LF as a line end: the request is
    read once, with its body, and the next one after it."""
    sock = connect(server)
    sock.sendall(b"POST %s HTTP/1.1\nHost: x\nContent-Length: %d\n\n%s" % (INFER, len(GOOD), GOOD) + get(b"/v2"))
    answers, _ = responses(sock, 2)
    assert [a[0] for a in answers] == [200, 200]
    assert json.loads(answers[1][2])["name"] == "wirespeed"
    sock.close()


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(tmp_path):
    """A keep-alive timeout of 300 s and a header timeout of 1 s: a client
    that connects and sends nothing is closed by the server (the socket
    sees the end well within its 20 s timeout), as hyper closed it. (A
    connection that has made a request is held to the keep-alive timeout:
    test_an_idle_keep_alive_connection_is_closed.)"""
    running = RunningServer(MODELS, ["--keep-alive-timeout", "300", "--header-timeout", "1"])
    try:
        sock = connect(running)
        assert sock.recv(1) == b""
        sock.close()
    finally:
        running.stop()
