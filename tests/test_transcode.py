"""`wirespeed proxy`: a REST/JSON face on a gRPC service, end to end.

The service is `library.proto` (crates/wirespeed-transcode/tests/protos),
compiled here with grpcio-tools' protoc into Python messages and a
descriptor set (`--include_imports`), and served by a grpcio server in
this process. Every route shape is called through the proxy with
`requests`, and each answer must equal what the same call made directly
with grpcio answers, printed by protobuf's own `json_format`.
"""

import json
import subprocess

import grpc
import pytest
import requests
from google.protobuf import json_format

from conftest import wirespeed_binary
from transcode_library import bad_request_status, start_proxy
from transcode_library import library, servicer, upstream  # noqa: F401 (fixtures)


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
