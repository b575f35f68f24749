"""`wirespeed proxy` in front of more than one service: a config file of
several upstreams, reflection asked again when an upstream is redeployed,
the service's routes before the proxy's own paths, and
`google.api.HttpBody`'s raw bytes both ways. Each answer is checked as
in test_transcode.py, against the same call made with grpcio."""

import contextlib
import json
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import requests

from transcode_library import PROTOS, start_proxy
from transcode_library import library, servicer, upstream  # noqa: F401 (fixtures)


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
