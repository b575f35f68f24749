"""`wirespeed proxy`: a REST/JSON face on a gRPC service, end to end.

The service is `library.proto` (crates/wirespeed-transcode/tests/protos),
compiled here with grpcio-tools' protoc into Python messages and a
descriptor set (`--include_imports`), and served by a grpcio server in
this process. Every route shape is called through the proxy with
`requests`, and each answer must equal what the same call made directly
with grpcio answers, printed by protobuf's own `json_format`.
"""

import contextlib
import json
import re
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import requests
from google.protobuf import json_format

from conftest import ROOT, wirespeed_binary

PROTOS = ROOT / "crates" / "wirespeed-transcode" / "tests" / "protos"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The compiled messages and the descriptor set."""
    import grpc_tools
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("library")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={out}", f"--grpc_python_out={out}",
            "--include_imports", f"--descriptor_set_out={out / 'library.pb'}",
            "library.proto", "google/api/http.proto", "google/api/annotations.proto"]
    assert protoc.main(args) == 0, "protoc failed"
    sys.path.insert(0, str(out))
    import library_pb2
    import library_pb2_grpc
    return library_pb2, library_pb2_grpc, out / "library.pb"


def bad_request_status():
    """A google.rpc.Status with a BadRequest detail, as servers send it."""
    from google.protobuf import any_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field="name", description="ends in invalid")]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="bad name", details=[detail])


class Library:
    """The upstream: answers from the request, so each field's trip shows."""

    def __init__(self, pb):
        self.pb = pb
        # Set by a test once it has read a stream's first book.
        self.first_read = threading.Event()
        # Set when an upload's first book arrives.
        self.received = threading.Event()
        # The sizes of the uploads that ended whole.
        self.uploads = []
        # Set to let a stalled stream end.
        self.unstall = threading.Event()

    def GetBook(self, request, context):
        from grpc_status import rpc_status

        if request.name.endswith("missing"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no book {request.name}")
        if request.name.endswith("invalid"):
            context.abort_with_status(rpc_status.to_status(bad_request_status()))
        metadata = dict(context.invocation_metadata())
        user = metadata.get("x-user", "")
        sent = [("x-book-source", "shelf")]
        if "x-trace" in metadata:
            sent.append(("x-trace-seen", metadata["x-trace"]))
        if user:
            sent.append(("x-user", f"seen {user}"))
        context.send_initial_metadata(sent)
        context.set_trailing_metadata([("x-served-by", "library")])
        return self.pb.Book(name=request.name, title=f"title of {request.name}{user}", pages=300 if request.full else 1)

    def StreamBooks(self, request, context):
        if request.parent.endswith("missing"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no shelf {request.parent}")
        if request.filter.author.startswith("stall"):
            # Goes quiet: after one book, or before any.
            if request.filter.author == "stall-after-one":
                yield self.pb.Book(name=f"{request.parent}/books/0")
            self.unstall.wait(30)
            return
        for i in range(request.page_size):
            if request.filter.author == "fail" and i == 2:
                context.abort(grpc.StatusCode.ABORTED, "the shelf fell over")
            yield self.pb.Book(name=f"{request.parent}/books/{i}", pages=i, tags=["t"] * i)
            if request.filter.author == "wait" and i == 0:
                if not self.first_read.wait(30):
                    context.abort(grpc.StatusCode.INTERNAL, "the first book never reached the client")

    def UploadBooks(self, request_iterator, context):
        books = []
        for book in request_iterator:
            books.append(book)
            self.received.set()
        self.uploads.append(len(books))
        return self.pb.ListBooksResponse(books=books, next_page_token=str(len(books)))

    def EchoBooks(self, request_iterator, context):
        for book in request_iterator:
            book.title = book.title.upper()
            yield book

    def CreateBook(self, request, context):
        book = self.pb.Book()
        book.CopyFrom(request.book)
        book.name = f"{request.parent}/books/{request.request_id}"
        return book

    def UpdateBook(self, request, context):
        book = self.pb.Book()
        book.CopyFrom(request.book)
        book.tags.extend(request.update_mask.paths)
        return book

    def ListBooks(self, request, context):
        books = [self.pb.Book(name=f"{request.parent}/books/{i}", pages=i, genre=g,
                              author=self.pb.Author(name=request.filter.author))
                 for i, g in enumerate(list(request.genres) or [0] * request.page_size)]
        return self.pb.ListBooksResponse(books=books, next_page_token=str(request.min_pages.value))

    def DeleteBook(self, request, context):
        if request.name.endswith("/slow"):
            # Holds the call until its deadline ends it.
            ended = threading.Event()
            context.add_callback(ended.set)
            ended.wait()
        return self.pb.Book(name=request.name)

    def PublishBook(self, request, context):
        return self.pb.Book(name=request.name, title="published" if request.full else "draft")

    def GetFile(self, request, context):
        return self.pb.Book(name=request.path, title=request.version)

    def Unannotated(self, request, context):
        return self.pb.Book(name=request.name)


@pytest.fixture(scope="module")
def servicer(library):
    return Library(library[0])


@pytest.fixture(scope="module")
def upstream(library, servicer):
    from grpc_reflection.v1alpha import reflection

    pb, pb_grpc, _ = library
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_LibraryServicer_to_server(servicer, server)
    # grpcio's reflection serves both v1 and v1alpha.
    reflection.enable_server_reflection(
        (pb.DESCRIPTOR.services_by_name["Library"].full_name, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def start_proxy(*args):
    """`wirespeed proxy ARGS` on a free port; the process and its address."""
    process = subprocess.Popen(
        [str(wirespeed_binary()), "proxy", "--http", "127.0.0.1:0", *args],
        stderr=subprocess.PIPE, text=True)
    found = threading.Event()
    address = []
    log = []
    # Notified at each log line (wait_for_line).
    logged = threading.Condition()

    def drain():
        for line in process.stderr:
            with logged:
                log.append(line)
                logged.notify_all()
            match = re.search(r"listening on http://(127\.0\.0\.1:\d+)", line)
            if match:
                address.append(match.group(1))
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    process.log = log
    process.logged = logged
    if not found.wait(30):
        process.kill()
        raise RuntimeError("wirespeed proxy did not start:\n" + "".join(log))
    return process, f"http://{address[0]}"


@pytest.fixture(scope="module")
def proxy(library, upstream):
    """`wirespeed proxy` in front of the upstream, from its descriptor set."""
    _, _, descriptor_set = library
    process, address = start_proxy("--descriptor-set", str(descriptor_set), "--upstream", f"grpc://{upstream}",
                                   "--forward-header", "x-user")
    yield address
    process.terminate()
    process.wait(timeout=15)


def direct(library, upstream, method, request):
    """The same call made with grpcio, printed by protobuf's json_format."""
    pb, pb_grpc, _ = library
    with grpc.insecure_channel(upstream) as channel:
        answer = getattr(pb_grpc.LibraryStub(channel), method)(request, timeout=30)
    return json.loads(json_format.MessageToJson(answer))


def test_every_route_shape_answers_as_the_service_does(library, upstream, proxy):
    pb = library[0]
    from google.protobuf import field_mask_pb2, wrappers_pb2

    cases = [
        ("GET", "/v1/shelves/s1/books/b%201", None, "GetBook", pb.GetBookRequest(name="shelves/s1/books/b 1")),
        ("GET", "/v1/shelves/s1/books/b1?full=true", None, "GetBook", pb.GetBookRequest(name="shelves/s1/books/b1", full=True)),
        ("POST", "/v1/shelves/s1/books?requestId=r9", {"title": "T", "pages": "12", "genre": "POETRY", "tags": ["a", "b"]},
         "CreateBook", pb.CreateBookRequest(parent="shelves/s1", request_id="r9",
                                            book=pb.Book(title="T", pages=12, genre=pb.POETRY, tags=["a", "b"]))),
        ("PATCH", "/v1/shelves/s1/books/b1?updateMask=title,author.name", {"title": "New", "author": {"name": "A", "born": 1882}},
         "UpdateBook", pb.UpdateBookRequest(book=pb.Book(name="shelves/s1/books/b1", title="New", author=pb.Author(name="A", born=1882)),
                                            update_mask=field_mask_pb2.FieldMask(paths=["title", "author.name"]))),
        ("PUT", "/v1/books/b7", {"book": {"title": "Put"}}, "UpdateBook", pb.UpdateBookRequest(book=pb.Book(name="b7", title="Put"))),
        ("DELETE", "/v1/shelves/s1/books/b1", None, "DeleteBook", pb.GetBookRequest(name="shelves/s1/books/b1")),
        ("POST", "/v1/shelves/s1/books/b1:publish", {"full": True}, "PublishBook", pb.GetBookRequest(name="shelves/s1/books/b1", full=True)),
        ("GET", "/files/v2/x/y.txt", None, "GetFile", pb.FileRequest(version="v2", path="x/y.txt")),
        ("POST", "/wirespeed.library.Library/Unannotated", {"name": "n"}, "Unannotated", pb.GetBookRequest(name="n")),
    ]
    for method, path, body, rpc, request in cases:
        answer = requests.request(method, proxy + path, json=body)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == direct(library, upstream, rpc, request), path
    # response_body: the answer is the `books` field alone.
    answer = requests.get(proxy + "/v1/shelves/s2/books?genres=FICTION&genres=2&filter.author=Woolf&minPages=100")
    assert answer.status_code == 200, answer.text
    want = direct(library, upstream, "ListBooks", pb.ListBooksRequest(
        parent="shelves/s2", genres=[pb.FICTION, pb.POETRY], filter=pb.Filter(author="Woolf"),
        min_pages=wrappers_pb2.Int32Value(value=100)))
    assert answer.json() == want["books"]


def test_headers_become_metadata_and_metadata_comes_back_as_headers(proxy):
    """A configured header (x-user) and any Grpc-Metadata-<key> go on as
    metadata; the answer's metadata comes back under the configured name or
    as Grpc-Metadata-<key>, and its trailers as Grpc-Trailer-<key>
    (grpc-gateway's names)."""
    answer = requests.get(proxy + "/v1/shelves/s/books/b", headers={"X-User": "-ada", "Grpc-Metadata-X-Trace": "t1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["title"] == "title of shelves/s/books/b-ada"
    assert answer.headers["x-user"] == "seen -ada"
    assert answer.headers["grpc-metadata-x-book-source"] == "shelf"
    assert answer.headers["grpc-metadata-x-trace-seen"] == "t1"
    assert answer.headers["grpc-trailer-x-served-by"] == "library"
    assert "grpc-metadata-content-type" not in answer.headers


def test_an_error_status_carries_the_upstreams_details(proxy):
    """grpc-status-details-bin becomes the google.rpc.Status body's
    details, printed as json_format prints the same Status."""
    answer = requests.get(proxy + "/v1/shelves/s1/books/invalid")
    assert answer.status_code == 400, answer.text
    want = json_format.MessageToDict(bad_request_status())
    assert answer.json() == want
    assert answer.json()["details"][0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"


def stream_direct(library, upstream, method, request):
    """A streaming call made with grpcio: each answer by json_format."""
    pb, pb_grpc, _ = library
    with grpc.insecure_channel(upstream) as channel:
        answers = getattr(pb_grpc.LibraryStub(channel), method)(request, timeout=30)
        return [json.loads(json_format.MessageToJson(a)) for a in answers]


def events(text):
    """Server-sent events: (event, data) pairs."""
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((fields.get("event", "message"), json.loads(fields["data"])))
    return out


def test_a_server_stream_arrives_as_an_array_ndjson_or_events(library, upstream, proxy):
    pb = library[0]
    want = stream_direct(library, upstream, "StreamBooks", pb.ListBooksRequest(parent="shelves/s1", page_size=4))
    assert len(want) == 4
    path = proxy + "/v1/shelves/s1/books:stream?pageSize=4"
    array = requests.get(path)
    assert array.status_code == 200, array.text
    assert array.headers["content-type"] == "application/json"
    assert array.json() == want
    lines = requests.get(path, headers={"Accept": "application/x-ndjson"})
    assert lines.headers["content-type"] == "application/x-ndjson"
    assert [json.loads(line) for line in lines.text.splitlines()] == want
    sse = requests.get(path, headers={"Accept": "text/event-stream"})
    assert sse.headers["content-type"] == "text/event-stream"
    assert events(sse.text) == [("message", book) for book in want]
    assert requests.get(proxy + "/v1/shelves/s1/books:stream?pageSize=0").json() == []


def test_a_server_stream_is_passed_on_as_it_comes(proxy, servicer):
    """The upstream holds its second book until the client has read the
    first: a proxy that waited for the stream's end would never pass it."""
    servicer.first_read.clear()
    url = proxy + "/v1/shelves/s1/books:stream?pageSize=3&filter.author=wait"
    with requests.get(url, headers={"Accept": "application/x-ndjson"}, stream=True) as answer:
        lines = answer.iter_lines()
        first = json.loads(next(lines))
        assert first["name"] == "shelves/s1/books/0"
        servicer.first_read.set()
        rest = [json.loads(line) for line in lines if line]
    assert [book.get("name") for book in rest] == ["shelves/s1/books/1", "shelves/s1/books/2"], rest


def test_a_stream_that_fails_midway_says_so_in_its_framing(proxy):
    url = proxy + "/v1/shelves/s1/books:stream?pageSize=5&filter.author=fail"
    error = {"code": 10, "message": "the shelf fell over", "details": []}
    lines = requests.get(url, headers={"Accept": "application/x-ndjson"})
    assert lines.status_code == 200
    lines = [json.loads(line) for line in lines.text.splitlines()]
    assert [line.get("name") for line in lines[:2]] == ["shelves/s1/books/0", "shelves/s1/books/1"]
    assert lines[2:] == [{"error": error}]
    sse = events(requests.get(url, headers={"Accept": "text/event-stream"}).text)
    assert [kind for kind, _ in sse] == ["message", "message", "error"]
    assert sse[-1][1] == error
    # An array cannot carry it: the answer is cut, never taken for whole.
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests.get(url).content
    # An error before the first message gets its own status.
    missing = requests.get(proxy + "/v1/shelves/missing/books:stream?pageSize=2")
    assert missing.status_code == 404, missing.text
    assert missing.json() == {"code": 5, "message": "no shelf shelves/missing", "details": []}


def test_a_stream_that_goes_quiet_ends_with_deadline_exceeded(library, upstream, servicer):
    """A stream may go quiet for the request timeout at most: before its
    first message that is a 504; after it, the stream's last line."""
    _, _, descriptor_set = library
    process, address = start_proxy("--descriptor-set", str(descriptor_set), "--upstream", f"grpc://{upstream}",
                                   "--request-timeout", "1")
    try:
        before = requests.get(address + "/v1/shelves/s1/books:stream?filter.author=stall")
        assert before.status_code == 504, before.text
        assert before.json()["code"] == 4, before.json()
        after = requests.get(address + "/v1/shelves/s1/books:stream?filter.author=stall-after-one",
                             headers={"Accept": "application/x-ndjson"})
        assert after.status_code == 200
        lines = [json.loads(line) for line in after.text.splitlines()]
        assert lines[0] == {"name": "shelves/s1/books/0"}
        assert lines[1]["error"]["code"] == 4, lines
        assert "went quiet" in lines[1]["error"]["message"], lines
    finally:
        servicer.unstall.set()
        process.terminate()
        process.wait(timeout=15)


def test_grpc_timeout_is_gRPCs_format_and_any_valid_one_is_served(proxy):
    """One to eight digits and a unit; the longest (10^8 hours) is a
    deadline like any other, on a unary call and on a stream."""
    for path in ["/v1/shelves/s1/books/b1", "/v1/shelves/s1/books:stream?pageSize=1"]:
        for bad in ["999999999H", "18446744073709551615H", "5", "S", "-5S", "5x", "+5S"]:
            answer = requests.get(proxy + path, headers={"grpc-timeout": bad})
            assert answer.status_code == 400, (bad, answer.text)
            assert "one to eight digits" in answer.json()["message"], answer.json()
        answer = requests.get(proxy + path, headers={"grpc-timeout": "99999999H"})
        assert answer.status_code == 200, answer.text


def test_a_client_deadline_is_never_the_upstreams_fault(proxy):
    """A deadline that passes while the upstream works is DEADLINE_EXCEEDED
    every time, as grpc-gateway answers: the upstream's reset of the
    expired call does not count against it, so it is never ejected and the
    next ordinary call is served."""
    for _ in range(8):
        answer = requests.delete(proxy + "/v1/shelves/s1/books/slow", headers={"Grpc-Timeout": "10m"})
        assert answer.status_code == 504 and answer.json()["code"] == 4, answer.text
    answer = requests.delete(proxy + "/v1/shelves/s1/books/b1")
    assert answer.status_code == 200 and answer.json() == {"name": "shelves/s1/books/b1"}, answer.text


def test_a_client_stream_is_sent_as_it_is_read(library, upstream, proxy, servicer):
    pb = library[0]
    books = [{"title": "A", "pages": "1"}, {"title": "B", "tags": ["x", "y"]}, {"title": "C", "genre": "POETRY"}]
    # The path's {name} is set in every message.
    want = direct(library, upstream, "UploadBooks", iter([
        pb.Book(name="shelves/s1", title="A", pages=1), pb.Book(name="shelves/s1", title="B", tags=["x", "y"]),
        pb.Book(name="shelves/s1", title="C", genre=pb.POETRY)]))
    url = proxy + "/v1/shelves/s1/books:upload"
    for body in [json.dumps(books), "\n".join(json.dumps(b) for b in books) + "\n"]:
        answer = requests.post(url, data=body)
        assert answer.status_code == 200, answer.text
        assert answer.json() == want
    # A body sent in pieces: the first book reaches the upstream before
    # the body's end.
    servicer.received.clear()
    seen = []

    def pieces():
        yield (json.dumps(books[0]) + "\n").encode()
        seen.append(servicer.received.wait(30))
        for book in books[1:]:
            yield (json.dumps(book) + "\n").encode()

    answer = requests.post(url, data=pieces())
    assert answer.status_code == 200, answer.text
    assert answer.json() == want
    assert seen == [True]
    assert requests.post(url, data="[]").json() == {"nextPageToken": "0"}


def test_a_client_stream_that_does_not_encode_is_refused_and_reset(proxy, servicer):
    url = proxy + "/v1/shelves/s1/books:upload"
    for body, needle in [('[{"title": "A"}, {"pages": "many"}]', "not an integer"),
                         ('[{"title": "A"}, 7]', "message 2 of the stream is a number"),
                         ('{"title": "A"} {"title": ', "ends before")]:
        answer = requests.post(url, data=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == 3 and needle in answer.json()["message"], answer.json()
    good = requests.post(url, data='[{"title": "Z"}]')
    assert good.status_code == 200, good.text
    assert good.json()["nextPageToken"] == "1"
    # The good upload ended whole upstream. That the others were reset, not
    # ended, is checked on the wire in crates/wirespeed-upstream/tests/
    # wire.rs: grpcio's request iterator may stop without raising
    # when a reset wins the race with its cancellation, so the servicer
    # here cannot tell the two apart.
    assert servicer.uploads[-1] == 1


def test_a_bidirectional_stream_answers_each_message(library, upstream, proxy):
    pb = library[0]
    want = stream_direct(library, upstream, "EchoBooks", iter([pb.Book(title="a"), pb.Book(title="b", pages=2)]))
    answer = requests.post(proxy + "/v1/books:echo", data='{"title": "a"}\n{"title": "b", "pages": 2}\n',
                           headers={"Accept": "application/x-ndjson"})
    assert answer.status_code == 200, answer.text
    assert [json.loads(line) for line in answer.text.splitlines()] == want


@pytest.mark.parametrize("method, path, body, status, code, needle", [
    ("GET", "/v1/shelves/s1/books/missing", None, 404, 5, "no book shelves/s1/books/missing"),
    ("GET", "/v1/nowhere", None, 404, 5, "no route for GET /v1/nowhere"),
    ("POST", "/v1/shelves/s1/books/b1", {}, 405, 12, "takes DELETE, GET, PATCH"),
    ("POST", "/v1/shelves/s1/books", {"pages": "many"}, 400, 3, "not an integer"),
    ("POST", "/v1/shelves/s1/books", {"nope": 1}, 400, 3, "has no field 'nope'"),
    ("GET", "/v1/shelves/s1/books?nope=1", None, 400, 3, "has no field 'nope'"),
    ("POST", "/v1/shelves/s1/books", "not json", 400, 3, "a number must start with a digit: not"),
])
def test_mistakes_get_google_rpc_status(proxy, method, path, body, status, code, needle):
    data = body if isinstance(body, str) else None
    answer = requests.request(method, proxy + path, json=None if data else body, data=data)
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["code"] == code and error["details"] == [], error
    assert needle in error["message"], error


def test_bodies_are_read_as_grpc_gateway_reads_them(proxy):
    """A body on a rule without one is left, as grpc-gateway and Envoy leave
    it (grpc-gateway's own tests send `{}` there); an empty body on
    `body: "*"` is `{}`; a body of `null` is refused, as protojson and
    json_format refuse it."""
    answer = requests.delete(proxy + "/v1/shelves/s1/books/b1", data="{}")
    assert answer.status_code == 200 and answer.json() == {"name": "shelves/s1/books/b1"}, answer.text
    for empty in ["", "  \n"]:
        answer = requests.post(proxy + "/v1/shelves/s1/books/b1:publish", data=empty)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"name": "shelves/s1/books/b1", "title": "draft"}
    answer = requests.post(proxy + "/v1/shelves/s1/books/b1:publish", data="null")
    assert answer.status_code == 400 and answer.json()["code"] == 3, answer.text
    assert "the body is null" in answer.json()["message"]


def test_path_and_query_values_that_are_not_utf8_are_refused(proxy):
    for path in ["/v1/shelves/s1/books/%FF%FE", "/v1/shelves/s1/books?filter.author=%FF"]:
        answer = requests.get(proxy + path)
        assert answer.status_code == 400 and answer.json()["code"] == 3, answer.text
        assert "not UTF-8" in answer.json()["message"], answer.text


def test_ignore_unknown_fields_is_for_bodies_not_paths_or_queries(library, upstream):
    """`--ignore-unknown-fields` lets a body's unknown field or enum name
    through; an enum name in a query is still checked, as grpc-gateway
    checks it."""
    _, _, descriptor_set = library
    process, address = start_proxy("--descriptor-set", str(descriptor_set), "--upstream", f"grpc://{upstream}",
                                    "--ignore-unknown-fields")
    try:
        answer = requests.get(address + "/v1/shelves/s1/books?genres=XYZ")
        assert answer.status_code == 400 and answer.json()["code"] == 3, answer.text
        answer = requests.post(address + "/v1/shelves/s1/books", json={"title": "t", "nope": 1, "genre": "XYZ"})
        assert answer.status_code == 200, answer.text
    finally:
        process.kill()
        process.wait()


def test_without_a_descriptor_set_the_routes_come_from_reflection(library, upstream):
    """No descriptor set: the proxy asks the upstream's server reflection
    for the service's files, its google.api.http rules included."""
    pb = library[0]
    process, address = start_proxy("--upstream", f"grpc://{upstream}")
    try:
        answer = requests.get(address + "/v1/shelves/s1/books/b1?full=true")
        assert answer.status_code == 200, answer.text
        assert answer.json() == direct(library, upstream, "GetBook", pb.GetBookRequest(name="shelves/s1/books/b1", full=True))
        answer = requests.post(address + "/v1/shelves/s1/books/b1:publish", json={"full": True})
        assert answer.status_code == 200, answer.text
        assert answer.json()["title"] == "published"
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_proxy_without_descriptors_or_reflection_says_why():
    """An upstream with no reflection (here, nothing listening) stops the
    proxy at start with the reason."""
    run = subprocess.run([str(wirespeed_binary()), "proxy", "--http", "127.0.0.1:0",
                          "--upstream", "grpc://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "cannot learn" in run.stderr and "by reflection" in run.stderr, run.stderr


def test_print_options_answer_as_json_format_prints(library, upstream):
    """--emit-defaults, --proto-field-names and --enums-as-ints print as
    json_format's always_print_fields_with_no_presence,
    preserving_proto_field_name and use_integers_for_enums do."""
    pb, pb_grpc, descriptor_set = library
    process, address = start_proxy("--descriptor-set", str(descriptor_set), "--upstream", f"grpc://{upstream}",
                                   "--emit-defaults", "--proto-field-names", "--enums-as-ints")
    try:
        answer = requests.get(address + "/v1/shelves/s1/books?pageSize=2")
        assert answer.status_code == 200, answer.text
        with grpc.insecure_channel(upstream) as channel:
            direct_answer = pb_grpc.LibraryStub(channel).ListBooks(
                pb.ListBooksRequest(parent="shelves/s1", page_size=2), timeout=30)
        want = json.loads(json_format.MessageToJson(
            direct_answer, always_print_fields_with_no_presence=True,
            preserving_proto_field_name=True, use_integers_for_enums=True))
        # response_body is `books`: the list, each book with every field.
        assert answer.json() == want["books"]
        assert answer.json()[0]["genre"] == 0 and answer.json()[0]["tags"] == []
    finally:
        process.terminate()
        process.wait(timeout=15)


ECHO_PROTO = """
syntax = "proto3";
package wirespeed.echo;
import "google/api/annotations.proto";
message SayRequest { string text = 1; int32 times = 2; }
message SayReply { repeated string said = 1; }
service Echo {
  rpc Say(SayRequest) returns (SayReply) { option (google.api.http) = { get: "/v1/echo/{text}" }; }
  rpc Chorus(stream SayRequest) returns (SayReply);
}
"""


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """The Echo service's messages, compiled from ECHO_PROTO, and a
    starter of its grpcio server (with reflection) on a given port."""
    import grpc_tools
    from grpc_tools import protoc
    from grpc_reflection.v1alpha import reflection

    out = tmp_path_factory.mktemp("echo")
    (out / "echo.proto").write_text(ECHO_PROTO)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{out}", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={out}",
                        f"--grpc_python_out={out}", "echo.proto"]) == 0
    sys.path.insert(0, str(out))
    import echo_pb2
    import echo_pb2_grpc

    class Echo(echo_pb2_grpc.EchoServicer):
        def Say(self, request, context):
            return echo_pb2.SayReply(said=[request.text] * max(request.times, 1))

        def Chorus(self, request_iterator, context):
            return echo_pb2.SayReply(said=[r.text for r in request_iterator])

    def serve(port=0, library=None):
        """Echo (and the library's servicer, if given) on `port`."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        echo_pb2_grpc.add_EchoServicer_to_server(Echo(), server)
        names = [echo_pb2.DESCRIPTOR.services_by_name["Echo"].full_name, reflection.SERVICE_NAME]
        if library:
            pb, pb_grpc, servicer = library
            pb_grpc.add_LibraryServicer_to_server(servicer, server)
            names.append(pb.DESCRIPTOR.services_by_name["Library"].full_name)
        reflection.enable_server_reflection(names, server)
        port = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        return server, port

    return serve


def test_a_config_file_serves_several_upstreams(library, upstream, echo, tmp_path):
    """`--config`: the library by its descriptor set, and a second server's
    Echo service by reflection, side by side; its client-streaming method
    by the auto mapping."""
    server, port = echo()
    _, _, descriptor_set = library
    config = tmp_path / "transcode.toml"
    config.write_text(f"""
[[service]]
descriptor_set = "{descriptor_set}"
upstream = ["grpc://{upstream}"]

[[service]]
upstream = ["grpc://127.0.0.1:{port}"]
emit_defaults = true
""")
    process, address = start_proxy("--config", str(config))
    try:
        book = requests.get(address + "/v1/shelves/s1/books/b1")
        assert book.status_code == 200, book.text
        assert book.json()["name"] == "shelves/s1/books/b1"
        said = requests.get(address + "/v1/echo/hi?times=2")
        assert said.status_code == 200, said.text
        assert said.json() == {"said": ["hi", "hi"]}
        stream = requests.post(address + "/wirespeed.echo.Echo/Chorus", data='[{"text": "x"}, {"text": "y"}]')
        assert stream.status_code == 200, stream.text
        assert stream.json() == {"said": ["x", "y"]}
    finally:
        process.terminate()
        process.wait(timeout=15)
        server.stop(None)


def wait_for_line(process, needle, timeout=60):
    """Waits for the proxy's log to show `needle`; its line."""
    def seen():
        return next((line for line in process.log if needle in line), None)

    with process.logged:
        if not process.logged.wait_for(seen, timeout):
            raise AssertionError(f"no '{needle}' in the proxy's log:\n" + "".join(process.log))
        return seen()


def test_reflection_is_asked_again_and_a_redeployed_upstream_is_routed(library, servicer, echo):
    """Without a descriptor set, the upstream's reflection is asked again
    (--reflect-every): when the upstream comes back with another service,
    its routes are served without restarting the proxy."""
    pb, pb_grpc, _ = library
    server, port = echo()
    process, address = start_proxy("--upstream", f"grpc://127.0.0.1:{port}", "--reflect-every", "0.2")
    try:
        assert requests.get(address + "/v1/echo/hi").json() == {"said": ["hi"]}
        missing = requests.get(address + "/v1/shelves/s1/books/b1")
        assert missing.status_code == 404, missing.text
        # Redeployed on the same port, now with the library too. The
        # replica is ejected while nothing listens, and admitted again by
        # gRPC's health check (which this server does not have: it answers).
        server.stop(None).wait()
        server, _ = echo(port, (pb, pb_grpc, servicer))
        line = wait_for_line(process, "routes rebuilt from its reflection")
        assert "routes=" in line, line
        book = requests.get(address + "/v1/shelves/s1/books/b1")
        assert book.status_code == 200, book.text
        assert book.json()["name"] == "shelves/s1/books/b1"
        assert requests.get(address + "/v1/echo/hi").json() == {"said": ["hi"]}
    finally:
        process.terminate()
        process.wait(timeout=15)
        server.stop(None)


@contextlib.contextmanager
def proxied(add_servicer, servicer, descriptor_set):
    """A grpcio server of `servicer`, and `wirespeed proxy` in front of it
    from `descriptor_set`: the proxy's address."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_servicer(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    process, address = start_proxy("--descriptor-set", str(descriptor_set), "--upstream", f"grpc://127.0.0.1:{port}")
    try:
        yield address
    finally:
        process.kill()
        process.wait()
        server.stop(None)


SHADOW_PROTO = '''
syntax = "proto3";
package shadow;
import "google/api/annotations.proto";
message Query { string name = 1; }
message Answer { string said = 1; }
service Paths {
  rpc ListModels(Query) returns (Answer) { option (google.api.http) = { get: "/v1/models" }; }
  rpc Metrics(Query) returns (Answer) { option (google.api.http) = { get: "/metrics" }; }
  rpc Root(Query) returns (Answer) { option (google.api.http) = { post: "/v2" body: "*" }; }
}
'''


def test_the_services_routes_come_before_the_servers_own_paths(tmp_path):
    """A service that declares `/v1/models`, `/metrics` or `/v2` is answered
    there by the proxy, as grpc-gateway answers it; the proxy's own health
    stays where the service leaves the path free."""
    import grpc_tools
    from grpc_tools import protoc

    (tmp_path / "shadow.proto").write_text(SHADOW_PROTO)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={tmp_path}",
                        f"--grpc_python_out={tmp_path}", "--include_imports",
                        f"--descriptor_set_out={tmp_path / 'shadow.pb'}", "shadow.proto"]) == 0
    sys.path.insert(0, str(tmp_path))
    import shadow_pb2
    import shadow_pb2_grpc

    class Paths(shadow_pb2_grpc.PathsServicer):
        def ListModels(self, request, context):
            return shadow_pb2.Answer(said="the service's models")

        def Metrics(self, request, context):
            return shadow_pb2.Answer(said="the service's metrics")

        def Root(self, request, context):
            return shadow_pb2.Answer(said=f"root {request.name}")

    with proxied(shadow_pb2_grpc.add_PathsServicer_to_server, Paths(), tmp_path / "shadow.pb") as address:
        assert requests.get(address + "/v1/models").json() == {"said": "the service's models"}
        assert requests.get(address + "/metrics").json() == {"said": "the service's metrics"}
        assert requests.post(address + "/v2", json={"name": "x"}).json() == {"said": "root x"}
        # A method the route does not take is the service's 405.
        assert requests.delete(address + "/metrics").status_code == 405
        # The proxy's own health, where the service leaves the path free.
        assert requests.get(address + "/v2/health/live").status_code == 200


FILES_PROTO = '''
syntax = "proto3";
package files;
import "google/api/annotations.proto";
import "google/api/httpbody.proto";
message FileRequest { string name = 1; google.api.HttpBody body = 2; }
service Files {
  rpc Get(FileRequest) returns (google.api.HttpBody) { option (google.api.http) = { get: "/files/{name}" }; }
  rpc Put(FileRequest) returns (google.api.HttpBody) {
    option (google.api.http) = { put: "/files/{name}" body: "body" };
  }
  rpc Echo(google.api.HttpBody) returns (google.api.HttpBody) {
    option (google.api.http) = { post: "/echo" body: "*" };
  }
  rpc Download(FileRequest) returns (stream google.api.HttpBody) {
    option (google.api.http) = { get: "/files/{name}:download" };
  }
}
'''


def test_http_body_is_raw_bytes_both_ways(tmp_path):
    """`google.api.HttpBody`, as grpc-gateway serves it: an answer is its
    data with its content type (a stream's, each message's data in turn);
    a request body routed to one is the raw bytes and the request's
    Content-Type."""
    import google.api.httpbody_pb2
    import grpc_tools
    from grpc_tools import protoc

    googleapis = Path(google.api.httpbody_pb2.__file__).parents[2]
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    (tmp_path / "files.proto").write_text(FILES_PROTO)
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{googleapis}", f"-I{well_known}", f"--python_out={tmp_path}",
                        f"--grpc_python_out={tmp_path}", "--include_imports",
                        f"--descriptor_set_out={tmp_path / 'files.pb'}", "files.proto"]) == 0
    sys.path.insert(0, str(tmp_path))
    import files_pb2_grpc
    from google.api import httpbody_pb2

    png = b"\x89PNG\r\n\x1a\n\x00\xff"

    class Files(files_pb2_grpc.FilesServicer):
        def Get(self, request, context):
            return httpbody_pb2.HttpBody(content_type="image/png", data=png + request.name.encode())

        def Put(self, request, context):
            return httpbody_pb2.HttpBody(content_type=request.body.content_type,
                                         data=request.name.encode() + b":" + request.body.data)

        def Echo(self, request, context):
            return request

        def Download(self, request, context):
            for i in range(3):
                yield httpbody_pb2.HttpBody(content_type="text/csv", data=f"{request.name},{i}".encode())
            if request.name == "broken":
                context.abort(grpc.StatusCode.DATA_LOSS, "the disk failed")

    with proxied(files_pb2_grpc.add_FilesServicer_to_server, Files(), tmp_path / "files.pb") as address:
        got = requests.get(address + "/files/logo")
        assert got.status_code == 200 and got.headers["Content-Type"] == "image/png", got.headers
        assert got.content == png + b"logo"
        put = requests.put(address + "/files/notes", data=b"\x00raw \xfe bytes",
                           headers={"Content-Type": "application/octet-stream"})
        assert put.status_code == 200 and put.headers["Content-Type"] == "application/octet-stream"
        assert put.content == b"notes:\x00raw \xfe bytes"
        echo = requests.post(address + "/echo", data="<p>hi</p>", headers={"Content-Type": "text/html"})
        assert echo.status_code == 200 and echo.headers["Content-Type"] == "text/html"
        assert echo.content == b"<p>hi</p>"
        # A server stream of HttpBody: the data of each and a newline, as
        # grpc-gateway writes them; a failure after them, its status as an
        # {"error": ...} line.
        download = requests.get(address + "/files/t:download")
        assert download.status_code == 200 and download.headers["Content-Type"] == "text/csv", download.headers
        assert download.content == b"t,0\nt,1\nt,2\n"
        broken = requests.get(address + "/files/broken:download")
        lines = broken.content.split(b"\n")
        assert lines[:3] == [b"broken,0", b"broken,1", b"broken,2"] and lines[4:] == [b""], broken.content
        assert json.loads(lines[3])["error"]["code"] == 15, broken.content
