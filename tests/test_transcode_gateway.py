"""`wirespeed proxy` against grpc-gateway itself, on grpc-gateway's own
example services (`echo_service.proto`, `a_bit_of_everything.proto`,
`stream.proto`, ...): both in front of the same example gRPC server, built
from grpc-gateway's Go module (v2.33.0, `examples/internal/cmd`), every
case sent to both, and the answers compared: the HTTP status, the
`google.rpc.Status` code of an error, the JSON of a success. The proxy
runs with the options grpc-gateway's default marshaler has
(`EmitUnpopulated`, `DiscardUnknown`): `--emit-defaults` and
`--ignore-unknown-fields`.

grpc-gateway's example gateway listens on its fixed port 8080; the test
waits for its log line. Where the two differ on purpose, the case says
why (`DIFFERENT`)."""

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from conftest import ROOT
from test_transcode import start_proxy

GATEWAY = "v2.33.0"
MODULE = f"github.com/grpc-ecosystem/grpc-gateway/v2@{GATEWAY}"
PROTOS = [
    "examples/internal/proto/examplepb/echo_service.proto",
    "examples/internal/proto/examplepb/a_bit_of_everything.proto",
    "examples/internal/proto/examplepb/stream.proto",
    "examples/internal/proto/examplepb/flow_combination.proto",
    "examples/internal/proto/examplepb/response_body_service.proto",
    "examples/internal/proto/examplepb/non_standard_names.proto",
    "examples/internal/proto/examplepb/excess_body.proto",
]


def go(*args, **kwargs):
    return subprocess.run(["go", *args], capture_output=True, text=True, timeout=600, **kwargs)


class Logged:
    """A process whose stderr lines are kept, to wait for one."""

    def __init__(self, args, env=None):
        self.lines = []
        self.seen = threading.Condition()
        self.process = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                        env={**os.environ, **(env or {})})
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.process.stderr:
            with self.seen:
                self.lines.append(line)
                self.seen.notify_all()

    def wait_for(self, pattern, timeout=60):
        with self.seen:
            found = self.seen.wait_for(
                lambda: any(re.search(pattern, l) for l in self.lines) or self.process.poll() is not None, timeout)
        assert found and self.process.poll() is None, "".join(self.lines[-20:])

    def stop(self):
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    """grpc-gateway's example gRPC server, its example gateway (port 8080),
    and `wirespeed proxy` in front of the same server."""
    out = tmp_path_factory.mktemp("gateway")
    bin_dir = out / "bin"
    for cmd in ["example-grpc-server", "example-gateway-server"]:
        built = go("install", f"github.com/grpc-ecosystem/grpc-gateway/v2/examples/internal/cmd/{cmd}@{GATEWAY}",
                   env={**os.environ, "GOBIN": str(bin_dir)})
        assert built.returncode == 0, built.stderr
    module = Path(go("env", "GOMODCACHE").stdout.strip()) / "github.com/grpc-ecosystem/grpc-gateway" / f"v2@{GATEWAY}"
    import google.api.httpbody_pb2
    import grpc_tools
    from grpc_tools import protoc

    googleapis = Path(google.api.httpbody_pb2.__file__).parents[2]
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    descriptors = out / "examples.pb"
    assert protoc.main(["protoc", f"-I{module}", f"-I{googleapis}", f"-I{well_known}", "--include_imports",
                        f"--descriptor_set_out={descriptors}", *PROTOS]) == 0
    with_logs = {"GRPC_GO_LOG_SEVERITY_LEVEL": "info"}
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Logged([str(bin_dir / "example-grpc-server"), "--addr", f"127.0.0.1:{port}"], with_logs)
    server.wait_for(r"ListenSocket created")
    gateway = Logged([str(bin_dir / "example-gateway-server"), "--endpoint", f"127.0.0.1:{port}",
                      "--openapi_dir", str(module / "examples/internal/proto/examplepb")], with_logs)
    gateway.wait_for(r"Starting listening at :8080")
    # The services grpc-gateway's example gateway registers.
    services = ",".join(f"grpc.gateway.examples.internal.proto.examplepb.{s}" for s in [
        "EchoService", "FlowCombination", "ExcessBodyService", "NonStandardService", "ABitOfEverythingService",
        "StreamService", "ResponseBodyService"])
    proxy, address = start_proxy("--descriptor-set", str(descriptors), "--upstream", f"grpc://127.0.0.1:{port}",
                                 "--service", services, "--emit-defaults", "--ignore-unknown-fields")
    yield "http://127.0.0.1:8080", address
    proxy.kill()
    proxy.wait()
    gateway.stop()
    server.stop()


def call(base, method, path, body, headers):
    data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
    return requests.request(method, base + path, data=data, headers=headers or {}, timeout=30)


# method, path, body, headers
CASES = [
    # No route: grpc-gateway's 404; a verb after an empty one, or with a
    # colon of its own.
    ("GET", "/", None, None),
    ("POST", "/", "{}", None),
    ("GET", "/v2/ABC::check", None, None),
    ("GET", "/v2/ABC:check:", None, None),
    # echo_service.proto
    ("GET", "/v1/example/echo/myid/10", None, None),
    ("GET", "/v1/example/echo/myid/10/en", None, None),
    ("GET", "/v1/example/echo1/myid/7/note", None, None),
    ("GET", "/v1/example/echo2/note", None, None),
    ("GET", "/v1/example/echo/resource/r1", None, None),
    ("GET", "/v1/example/echo/nested/n1", None, None),
    ("POST", "/v1/example/echo/myid", "{}", None),
    ("POST", "/v1/example/echo/myid", "", None),
    ("POST", "/v1/example/echo_body", {"id": "b", "num": "3", "lang": "fr"}, None),
    ("POST", "/v1/example/echo_body", "", None),
    ("PUT", "/v1/example/echo_body/x", {"note": "n"}, None),
    ("DELETE", "/v1/example/echo_delete?id=d&num=4", None, None),
    ("PATCH", "/v1/example/echo_patch", {"a": 1, "b": [True]}, None),
    ("POST", "/v1/example/echo_status", {}, None),
    ("GET", "/v1/example/echo/myid/notanumber", None, None),
    ("GET", "/v1/example/echo/%FF%FE/10", None, None),
    # a_bit_of_everything.proto
    ("GET", "/v1/example/a_bit_of_everything/echo/hello", None, None),
    ("POST", "/v2/example/echo", '"posted"', None),
    ("GET", "/v2/example/echo?value=queried", None, None),
    ("POST", "/v1/example/deep_path/deep", {"singleNested": {"amount": 5}, "stringValue": "s"}, None),
    ("GET", "/v2/example/errorwithdetails", None, None),
    ("POST", "/v2/example/withbody/w1", {"name": "data"}, None),
    ("POST", "/v2/example/postwithemptybody/e1", "{}", None),
    ("POST", "/v2/example/postwithemptybody/e1", "", None),
    ("GET", "/v1/example/a_bit_of_everything/params/get/nested?singleNested.amount=3&int32Value=-4"
            "&repeatedStringValue=a&repeatedStringValue=b&timestampValue=2024-01-02T03:04:05Z", None, None),
    ("GET", "/v1/example/a_bit_of_everything/params/get/nested_enum/TRUE", None, None),
    ("POST", "/v1/example/a_bit_of_everything/params/post/str?int32Value=9", {"name": "n", "amount": 2}, None),
    ("GET", "/v2/ABC:check", None, None),
    ("GET", "/v2/XYZ:check", None, None),
    ("GET", "/v1/example/checkStatus", None, None),
    ("GET", "/v2/example/empty", None, None),
    ("GET", "/v1/example/snake/a/b/c", None, None),
    ("POST", "/v1/example/oneofenum", '"EXAMPLE_ENUM_FOO"', None),
    ("POST", "/v1/example/a_bit_of_everything/nested_body_oneof", '"input"', None),
    ("POST", "/v1/publishers/p1/books", {"name": "ignored", "id": "b1"}, None),
    ("GET", "/v2/example/timeout", None, {"Grpc-Timeout": "10m"}),
    ("GET", "/v1/example/a_bit_of_everything/notauuid", None, None),
    ("POST", "/v1/example/a_bit_of_everything/abc:custom:custom", "{}", None),
    ("POST", "/v1/example/a_bit_of_everything/abc:custom", "{}", None),
    ("POST", "/v1/example/a_bit_of_everything", {"floatValue": 1.5, "unknownField": 1}, None),
    ("POST", "/v1/example/a_bit_of_everything", "null", None),
    ("POST", "/v1/example/a_bit_of_everything", "not json", None),
    ("GET", "/v1/example/nowhere", None, None),
    # flow_combination.proto and response_body_service.proto
    ("POST", "/rpc/empty/rpc", "{}", None),
    ("POST", "/rpc/body/rpc", {"a": "x", "b": "2", "c": "3"}, None),
    ("POST", "/rpc/path/x/2/rpc", "", None),
    ("GET", "/responsebody/foo", None, None),
    ("GET", "/responsebodies/foo", None, None),
    ("GET", "/responsestrings/foo", None, None),
    # stream.proto: a server stream and a client stream
    ("GET", "/v1/example/a_bit_of_everything", None, None),
    # A server stream of google.api.HttpBody, whole and failing after its
    # messages.
    ("GET", "/v1/example/download", None, None),
    ("GET", "/v1/example/download?error=true", None, None),
    ("POST", "/v1/example/a_bit_of_everything/echo_duration", '"1.5s"', None),
    ("POST", "/v1/example/a_bit_of_everything/echo_duration", '"not a duration"', None),
    ("GET", "/nowhere", None, None),
    ("POST", "/v1/example/a_bit_of_everything/bulk", '{"stringValue": "a"}\n{"stringValue": "b"}\n', None),
]

# Where wirespeed answers otherwise on purpose, and why.
DIFFERENT = {
    ("GET", "/"):
        "`/` is one of wirespeed's own endpoints, which the proxy serves before the transcoded routes: "
        "KServe's liveness ({\"status\": \"alive\"}); grpc-gateway has no route there (404)",
    ("POST", "/"):
        "`/` is wirespeed's liveness endpoint, which takes GET: 405 with `Allow: GET, HEAD` (RFC 9110); "
        "grpc-gateway has no route there (404)",
    ("GET", "/v1/example/echo/%FF%FE/10"):
        "grpc-gateway sends bytes that are not UTF-8 on, and its Go client's marshalling fails: 500, "
        "INTERNAL; the proxy says it is the request's fault: 400, INVALID_ARGUMENT",
    ("POST", "/v1/example/oneofenum"):
        "grpc-gateway cannot read an enum's name as a whole body ('unmarshaling of symbolic enum not "
        "supported'); protojson reads enum names, and so does the proxy",
    ("GET", "/v1/example/a_bit_of_everything"):
        "a server stream: grpc-gateway writes {\"result\": message} lines, the proxy a JSON array "
        "(NDJSON or server-sent events when the client's Accept asks; docs/transcoding.md)",
    ("POST", "/v1/example/a_bit_of_everything/echo_duration"):
        "a bidirectional stream's answers: grpc-gateway writes {\"result\": message} lines, the proxy a "
        "JSON array, as for every stream (above); and a message that is not a Duration: grpc-gateway "
        "logs the decoding error and answers 200 with an empty body, the proxy 400, INVALID_ARGUMENT, "
        "naming the value",
}


def unset_dropped(value):
    """protojson's `EmitUnpopulated` prints an unset message field as
    `null`, json_format's `always_print_fields_with_no_presence` (which
    `--emit-defaults` follows) leaves it out: both mean unset."""
    if isinstance(value, dict):
        return {k: unset_dropped(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [unset_dropped(v) for v in value]
    return value


def comparable(answer):
    try:
        body = unset_dropped(answer.json())
        # The example server numbers what it creates: each call's own.
        if isinstance(body, dict):
            body.pop("uuid", None)
    except ValueError:
        body = answer.text
    if answer.status_code >= 400 and isinstance(body, dict):
        # Messages are each server's own words; the code is the contract.
        return answer.status_code, {"code": body.get("code")}
    return answer.status_code, body


@pytest.mark.parametrize("method, path, body, headers", CASES, ids=[f"{c[0]} {c[1][:60]}" for c in CASES])
def test_the_proxy_answers_as_grpc_gateway_does(peers, method, path, body, headers):
    gateway, proxy = peers
    theirs = comparable(call(gateway, method, path, body, headers))
    ours = comparable(call(proxy, method, path, body, headers))
    if (method, path) in DIFFERENT:
        pytest.skip(DIFFERENT[(method, path)])
    assert ours == theirs
