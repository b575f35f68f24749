"""The gRPC service the transcoding tests put `wirespeed proxy` in front
of: `library.proto` (crates/wirespeed-transcode/tests/protos) compiled
with grpcio-tools' protoc into Python messages and a descriptor set, its
servicer, served by grpcio in the test's process, and the proxy started
on a free port. The fixtures are imported by the test modules that use
them."""

import re
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

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
