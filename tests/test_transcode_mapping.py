"""The proto3 JSON mapping through `wirespeed proxy`, end to end.

The upstream is a grpcio server in this process serving
`everything.proto` (every scalar, enum, list, map, oneof and well-known
type) and `bench.proto` (the shapes of the published transcoding
benchmark: nested messages, Struct, int32/double/string arrays, bytes,
path bindings), each method echoing its request. References:

- random messages, printed by protobuf's `json_format`, sent through the
  proxy: the upstream must receive the same message, and the proxy's
  answer must be what `json_format` prints for it;
- the benchmark's calls, made through the proxy with curl and directly
  with grpcurl (by reflection): the same answers;
- hostile bodies: each a 400 with a clear message, and the proxy still
  serves.
"""

import base64
import json
import math
import random
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import requests
from google.protobuf import json_format

from conftest import ROOT
from transcode_library import PROTOS, start_proxy


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """everything.proto and bench.proto as Python messages, and their
    descriptor set."""
    import grpc_tools
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("mapping")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={out}", f"--grpc_python_out={out}",
            "--include_imports", f"--descriptor_set_out={out / 'mapping.pb'}",
            "everything.proto", "bench.proto", "google/api/http.proto", "google/api/annotations.proto"]
    assert protoc.main(args) == 0, "protoc failed"
    sys.path.insert(0, str(out))
    import bench_pb2
    import bench_pb2_grpc
    import everything_pb2
    import everything_pb2_grpc
    return everything_pb2, everything_pb2_grpc, bench_pb2, bench_pb2_grpc, out / "mapping.pb"


class Echo:
    """Answers each call with its request, and keeps the last one."""

    def __init__(self):
        self.last = None

    def __getattr__(self, name):
        def echo(request, context):
            self.last = request
            return request
        return echo


@pytest.fixture(scope="module")
def upstream(compiled):
    from grpc_reflection.v1alpha import reflection

    everything_pb2, everything_grpc, bench_pb2, bench_grpc, _ = compiled
    echo = Echo()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20)])
    everything_grpc.add_EverythingServiceServicer_to_server(echo, server)
    bench_grpc.add_BenchServicer_to_server(echo, server)
    reflection.enable_server_reflection(
        (everything_pb2.DESCRIPTOR.services_by_name["EverythingService"].full_name,
         bench_pb2.DESCRIPTOR.services_by_name["Bench"].full_name, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", echo
    server.stop(None)


@pytest.fixture(scope="module")
def proxy(compiled, upstream):
    process, address = start_proxy("--descriptor-set", str(compiled[4]), "--upstream", f"grpc://{upstream[0]}")
    yield address
    process.terminate()
    process.wait(timeout=15)


# Random messages of everything.proto.

def random_inner(rng, depth=0):
    inner = {"a": rng.randint(-2**31, 2**31 - 1), "b": random_text(rng)}
    if depth < 2 and rng.random() < 0.3:
        inner["children"] = [random_inner(rng, depth + 1) for _ in range(rng.randint(1, 2))]
    return inner


def random_text(rng):
    alphabet = "abc xyz\"\\/\n\té€😀\u2028\x01"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))


def random_json_value(rng, depth=0):
    kind = rng.randint(0, 5 if depth < 3 else 3)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, 1.5, -2e10, rng.uniform(-1e6, 1e6)])
    if kind == 3:
        return random_text(rng)
    if kind == 4:
        return [random_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {random_text(rng): random_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def random_float32(rng):
    import struct
    return struct.unpack("f", struct.pack("f", rng.uniform(-1e30, 1e30) * rng.choice([1, 1e-35])))[0]


def random_everything(pb, rng):
    """A random Everything message, built field by field."""
    from google.protobuf import any_pb2, struct_pb2

    m = pb.Everything()
    pick = lambda: rng.random() < 0.5  # noqa: E731
    if pick(): m.f_double = rng.choice([rng.uniform(-1e300, 1e300), 1e-310, -0.0, math.inf, -math.inf, 0.1])
    if pick(): m.f_float = random_float32(rng)
    if pick(): m.f_int32 = rng.randint(-2**31, 2**31 - 1)
    if pick(): m.f_int64 = rng.randint(-2**63, 2**63 - 1)
    if pick(): m.f_uint32 = rng.randint(0, 2**32 - 1)
    if pick(): m.f_uint64 = rng.randint(0, 2**64 - 1)
    if pick(): m.f_sint32 = rng.randint(-2**31, 2**31 - 1)
    if pick(): m.f_sint64 = rng.randint(-2**63, 2**63 - 1)
    if pick(): m.f_fixed32 = rng.randint(0, 2**32 - 1)
    if pick(): m.f_fixed64 = rng.randint(0, 2**64 - 1)
    if pick(): m.f_sfixed32 = rng.randint(-2**31, 2**31 - 1)
    if pick(): m.f_sfixed64 = rng.randint(-2**63, 2**63 - 1)
    if pick(): m.f_bool = True
    if pick(): m.f_string = random_text(rng)
    if pick(): m.f_bytes = rng.randbytes(rng.randint(0, 40))
    if pick(): m.color = rng.choice([1, 2])
    if pick(): json_format.ParseDict(random_inner(rng), m.inner)
    if pick(): m.r_int32.extend(rng.randint(-2**31, 2**31 - 1) for _ in range(rng.randint(0, 300)))
    if pick(): m.r_double.extend(rng.uniform(-1e9, 1e9) for _ in range(rng.randint(0, 300)))
    if pick(): m.r_string.extend(random_text(rng) for _ in range(rng.randint(0, 20)))
    if pick():
        for _ in range(rng.randint(1, 3)):
            json_format.ParseDict(random_inner(rng), m.r_inner.add())
    if pick(): m.r_color.extend(rng.choice([0, 1, 2]) for _ in range(rng.randint(0, 5)))
    if pick(): m.r_bytes.extend(rng.randbytes(rng.randint(0, 9)) for _ in range(rng.randint(0, 4)))
    if pick(): m.r_sint64.extend(rng.randint(-2**63, 2**63 - 1) for _ in range(rng.randint(0, 20)))
    if pick(): m.r_float.extend(random_float32(rng) for _ in range(rng.randint(0, 50)))
    if pick(): m.r_bool.extend(rng.random() < 0.5 for _ in range(rng.randint(0, 9)))
    if pick(): m.r_fixed64.extend(rng.randint(0, 2**64 - 1) for _ in range(rng.randint(0, 9)))
    if pick():
        for _ in range(rng.randint(1, 4)):
            m.m_str_int[random_text(rng)] = rng.randint(-2**31, 2**31 - 1)
    if pick():
        for _ in range(rng.randint(1, 3)):
            json_format.ParseDict(random_inner(rng), m.m_int_inner[rng.randint(-2**63, 2**63 - 1)])
    if pick(): m.m_bool[rng.random() < 0.5] = random_text(rng)
    if pick(): m.m_enum[rng.randint(0, 2**32 - 1)] = rng.choice([0, 1, 2])
    if pick():
        for _ in range(rng.randint(1, 3)):
            m.m_value[random_text(rng)].CopyFrom(json_format.ParseDict(random_json_value(rng), struct_pb2.Value()))
    choice = rng.randint(0, 3)
    if choice == 1: m.o_string = random_text(rng)
    if choice == 2: json_format.ParseDict(random_inner(rng), m.o_inner)
    if choice == 3: m.o_int = rng.randint(-2**31, 2**31 - 1)
    if pick(): m.opt_int = rng.choice([0, rng.randint(-2**31, 2**31 - 1)])
    if pick(): m.opt_string = rng.choice(["", random_text(rng)])
    if pick(): m.ts.FromNanoseconds(rng.randint(-62135596800 * 10**9, 253402300799 * 10**9))
    if pick(): m.dur.FromNanoseconds(rng.randint(-315576000000 * 10**9, 315576000000 * 10**9))
    if pick(): m.mask.paths.extend(rng.choice(["a", "b_c", "d.e_f"]) for _ in range(rng.randint(1, 3)))
    if pick(): json_format.ParseDict({random_text(rng): random_json_value(rng) for _ in range(3)}, m.st)
    if pick(): json_format.ParseDict(random_json_value(rng), m.val)
    if pick(): json_format.ParseDict([random_json_value(rng) for _ in range(3)], m.lv)
    if pick(): m.w_int32.value = rng.randint(-2**31, 2**31 - 1)
    if pick(): m.w_string.value = random_text(rng)
    if pick(): m.w_bytes.value = rng.randbytes(5)
    if pick(): m.w_double.value = rng.uniform(-1e9, 1e9)
    if pick(): m.w_int64.value = rng.randint(-2**63, 2**63 - 1)
    if pick(): m.w_bool.value = rng.random() < 0.5
    if pick(): m.w_uint64.value = rng.randint(0, 2**64 - 1)
    if pick(): m.w_float.value = random_float32(rng)
    if pick(): m.w_uint32.value = rng.randint(0, 2**32 - 1)
    if pick(): m.empty.SetInParent()
    if pick():
        inner = pb.Inner()
        json_format.ParseDict(random_inner(rng), inner)
        packed = any_pb2.Any()
        packed.Pack(inner)
        m.any.CopyFrom(packed)
    if pick():
        for _ in range(rng.randint(1, 3)):
            m.r_val.add().CopyFrom(json_format.ParseDict(random_json_value(rng), struct_pb2.Value()))
    if pick():
        for _ in range(rng.randint(1, 3)):
            m.r_ts.add().FromSeconds(rng.randint(0, 2**32))
    if pick(): m.json_named = random_text(rng)
    return m


def test_random_messages_agree_with_json_format(compiled, upstream, proxy):
    """300 random messages: json_format's JSON through the proxy reaches the
    upstream as the same message, and the echoed answer prints as
    json_format prints it."""
    pb = compiled[0]
    _, echo = upstream
    rng = random.Random(20261125)
    session = requests.Session()
    for i in range(300):
        message = random_everything(pb, rng)
        body = json_format.MessageToJson(message)
        answer = session.post(proxy + "/wirespeed.test.EverythingService/Echo", data=body,
                              headers={"Content-Type": "application/json"})
        assert answer.status_code == 200, (i, body, answer.text)
        assert echo.last == message, (i, body)
        want = json.loads(json_format.MessageToJson(message))
        assert answer.json() == want, (i, body)


# The benchmark's shapes, against grpcurl.

def nested(depth):
    node = {"value": depth, "name": "leaf"}
    for d in range(depth):
        node = {"child": node, "value": d, "name": f"n{d}"}
    return node


BENCH_CALLS = [
    ("EchoNested", "POST", "/v1/nested", nested(32)),
    ("EchoDocument", "POST", "/v1/document", {"body": {"a": [1, 2.5, "x", True, None, {"b": {"c": [[], {}]}}]}}),
    ("EchoInt32s", "POST", "/v1/int32s", {"values": [(i * 7919) % 100000 - 50000 for i in range(16384)]}),
    ("EchoDoubles", "POST", "/v1/doubles", {"values": [i / 7 for i in range(1024)] + [1e300, -5e-324]}),
    ("EchoStrings", "POST", "/v1/strings", {"values": [f"value {i} é" for i in range(1024)]}),
    ("EchoPayload", "POST", "/v1/payload", {"data": base64.b64encode(bytes(range(256)) * 4096).decode()}),
    ("Get", "GET", "/v1/shelves/s%201/books/b1", None),
    ("GetDeep", "GET", "/v1/deep/x-y", None),
]


def grpcurl(upstream_address, method, body):
    run = subprocess.run(["grpcurl", "-plaintext", "-d", "@",
                          upstream_address, f"wirespeed.bench.Bench/{method}"],
                         input=json.dumps(body), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("method, http_method, path, body", BENCH_CALLS, ids=[c[0] + c[2] for c in BENCH_CALLS])
def test_the_benchmarks_calls_answer_as_grpcurl_does(upstream, proxy, tmp_path, method, http_method, path, body):
    """Through the proxy with curl; directly with grpcurl (the path's
    bindings given as the fields they bind): the same JSON."""
    address, _ = upstream
    command = ["curl", "-sS", "-X", http_method, "-w", "\n%{http_code}", proxy + path]
    if body is not None:
        (tmp_path / "body.json").write_text(json.dumps(body))
        command += ["-H", "Content-Type: application/json", "--data-binary", f"@{tmp_path / 'body.json'}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    text, status = run.stdout.rsplit("\n", 1)
    assert status == "200", text
    direct = {
        "Get": {"shelf": "s 1", "book": "b1"},
        "GetDeep": {"inner": {"next": {"next": {"next": {"next": {"next": {"next": {"next": {"id": "x-y"}}}}}}}}},
    }.get(method, body)
    assert json.loads(text) == grpcurl(address, method, direct)


# Hostile bodies.

HOSTILE = [
    ("/v1/nested", '{"child":' * 5000 + "{}" + "}" * 5000, 400, "deeper than"),
    ("/v1/payload", '{"data": "not base64!"}', 400, "base64"),
    ("/v1/strings", b'{"values": ["\xff\xfe"]}', 400, "UTF-8"),
    ("/v1/int32s", '{"values": [3000000000]}', 400, "out of range"),
    ("/v1/nested", '{"value": 1, "value": 2}', 400, "given twice"),
    ("/v1/nested", '{"value": 1.5}', 400, "not an integer"),
    ("/v1/document", '{"body": {"a": 1, "a": 2}}', 400, "given twice"),
    ("/v1/strings", '{"values": "x"}', 400, "takes a list"),
    ("/v1/int32s", '{"values": [1, 2', 400, "ends"),
    ("/v1/document", '{"body": {"a": ' + "[" * 100000, 400, "deeper than"),
    ("/v1/int32s", "[1]", 400, "written as an object, not a list"),
]


@pytest.mark.parametrize("path, body, status, needle", HOSTILE, ids=[f"{i}" for i in range(len(HOSTILE))])
def test_hostile_bodies_get_a_clear_400_and_nothing_else_happens(proxy, path, body, status, needle):
    answer = requests.post(proxy + path, data=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["code"] == 3 and needle in error["message"], error
    # The proxy serves on.
    fine = requests.post(proxy + "/v1/int32s", json={"values": [1, 2, 3]})
    assert fine.status_code == 200 and fine.json() == {"values": [1, 2, 3]}


def test_an_enum_number_out_of_range_is_refused(compiled, proxy):
    answer = requests.post(proxy + "/wirespeed.test.EverythingService/Echo", data='{"color": 4294967296}')
    assert answer.status_code == 400, answer.text
    assert "color" in answer.json()["message"], answer.json()
