"""`wirespeed.client.http`, the package's tritonclient-compatible client,
against tritonclient itself as the reference: the same answers (arrays and
`get_response()`), the same errors, from wirespeed (over TCP and a Unix
socket), KServe's ModelServer and MLServer, in JSON and in Triton's binary
tensor data; a tritonclient script run with only its imports changed; many
threads and asyncio tasks, each getting its own data back."""

import asyncio
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tritongrpc
import tritonclient.http as tritonhttp
import tritonclient.utils as tritonutils

from conftest import ROOT, RunningServer, free_port

try:
    import wirespeed.client.grpc as wsgrpc
    import wirespeed.client.grpc.aio as wsgrpcaio
    import wirespeed.client.http as wshttp
    import wirespeed.client.http.aio as wsaio
    from wirespeed.client.utils import InferenceServerException
except ImportError:  # pragma: no cover
    pytest.fail("the wirespeed package is not installed: run scripts/build-wheel", pytrace=False)

DTYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BF16": ml_dtypes.bfloat16, "BYTES": np.object_,
}


def sample(datatype, shape=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if datatype == "BYTES":
        return np.array([f"s{i}-ü".encode() * (i % 3) for i in range(n)], dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (rng.random(n) > 0.5).reshape(shape)
    dtype = DTYPES[datatype]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        values[0], values[-1] = info.min, info.max
        return values.reshape(shape)
    return (rng.normal(size=n) * 1000).astype(dtype).reshape(shape)


def identity_models(root):
    for datatype in DTYPES:
        folder = root / f"id_{datatype.lower()}"
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text(
            f'backend = "identity"\n\n[[inputs]]\nname = "x"\ndatatype = "{datatype}"\nshape = [-1, -1]\n\n'
            f'[[outputs]]\nname = "y"\ndatatype = "{datatype}"\nshape = [-1, -1]\n'
        )
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("client")
    socket, grpc_socket = root / "http.sock", root / "grpc.sock"
    running = RunningServer(identity_models(root / "models"),
                            extra_args=["--http-uds", str(socket), "--grpc-uds", str(grpc_socket)])
    running.socket, running.grpc_socket = socket, grpc_socket
    yield running
    running.stop()


def call(module, url, model, arrays, binary_in, binary_out, outputs=("y",), **kwargs):
    client = module.InferenceServerClient(url)
    inputs = []
    for name, (datatype, array) in arrays.items():
        inputs.append(module.InferInput(name, list(array.shape), datatype).set_data_from_numpy(array, binary_data=binary_in))
    requested = [module.InferRequestedOutput(o, binary_data=binary_out) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=requested, **kwargs)


def assert_same_result(ours, theirs, names):
    assert ours.get_response() == theirs.get_response()
    for name in names:
        a, b = ours.as_numpy(name), theirs.as_numpy(name)
        assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
        if a.dtype == np.object_:
            assert a.tolist() == b.tolist()
        else:
            assert a.tobytes() == b.tobytes()


MODES = {"binary": (True, True), "json": (False, False), "binary-in": (True, False), "binary-out": (False, True)}
# tritonclient sends BF16 in binary only (it refuses it in JSON).
CASES = [(d, m) for d in DTYPES for m in MODES if d != "BF16" or m == "binary"]


@pytest.mark.parametrize("datatype,mode", CASES, ids=[f"{d}-{m}" for d, m in CASES])
def test_every_datatype_as_tritonclient_gets_it(server, datatype, mode):
    binary_in, binary_out = MODES[mode]
    array = sample(datatype)
    model = f"id_{datatype.lower()}"
    theirs = call(tritonhttp, server.address, model, {"x": (datatype, array)}, binary_in, binary_out, request_id="7")
    for url in (server.address, f"unix://{server.socket}"):
        ours = call(wshttp, url, model, {"x": (datatype, array)}, binary_in, binary_out, request_id="7")
        assert_same_result(ours, theirs, ["y"])
    if binary_out and datatype != "BYTES":
        assert ours.as_numpy("y").tobytes() == array.tobytes()


def test_no_outputs_named_means_all_in_binary_as_tritonclient(server):
    array = sample("FP32")
    theirs = call(tritonhttp, server.address, "id_fp32", {"x": ("FP32", array)}, True, True, outputs=None)
    ours = call(wshttp, server.address, "id_fp32", {"x": ("FP32", array)}, True, True, outputs=None)
    assert_same_result(ours, theirs, ["y"])
    assert "binary_data_size" in ours.get_output("y")["parameters"]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_from_response_body_reads_a_body_as_tritonclient_does(binary):
    import gzip

    import wirespeed

    outputs = {"f": sample("FP32"), "s": sample("BYTES"), "b": sample("BOOL")}
    body, header_length = wirespeed.encode_response(outputs, model_name="m", binary=binary)
    for encoding, data in ((None, body), ("gzip", gzip.compress(body))):
        ours = wshttp.InferResult.from_response_body(data, header_length=header_length, content_encoding=encoding)
        theirs = tritonhttp.InferResult.from_response_body(data, header_length=header_length,
                                                          content_encoding=encoding)
        assert_same_result(ours, theirs, list(outputs))
    with pytest.raises(InferenceServerException, match="not a V2 infer response"):
        wshttp.InferResult.from_response_body(b'{"outputs": 1}')


def test_a_large_json_answer(server):
    array = sample("FP32", shape=(1000, 1000))
    theirs = call(tritonhttp, server.address, "id_fp32", {"x": ("FP32", array)}, True, False)
    ours = call(wshttp, server.address, "id_fp32", {"x": ("FP32", array)}, True, False)
    np.testing.assert_array_equal(ours.as_numpy("y"), theirs.as_numpy("y"))
    np.testing.assert_array_equal(ours.as_numpy("y"), array)


def test_health_metadata_and_errors_as_tritonclient(server):
    ours, theirs = wshttp.InferenceServerClient(server.address), tritonhttp.InferenceServerClient(server.address)
    for method, args in [
        ("is_server_live", ()), ("is_server_ready", ()), ("is_model_ready", ("id_fp32",)),
        ("is_model_ready", ("nope",)), ("get_server_metadata", ()), ("get_model_metadata", ("id_int8",)),
        ("get_model_config", ("id_int8",)), ("get_model_repository_index", ()),
        ("get_inference_statistics", ("id_int8",)),
    ]:
        assert getattr(ours, method)(*args) == getattr(theirs, method)(*args), method
    for method, args in [("get_model_metadata", ("nope",)), ("get_model_metadata", ("id_int8", "9"))]:
        with pytest.raises(tritonutils.InferenceServerException) as want:
            getattr(theirs, method)(*args)
        with pytest.raises(InferenceServerException) as got:
            getattr(ours, method)(*args)
        assert (got.value.message(), got.value.status()) == (want.value.message(), want.value.status())
        assert str(got.value) == str(want.value)


def test_refused_requests_raise_the_servers_error_as_tritonclient(server):
    good = sample("FP32")
    cases = [
        ("nope", "x", "FP32", good),  # unknown model
        ("id_fp32", "wrong", "FP32", good),  # unknown input
        ("id_fp32", "x", "INT32", good.astype(np.int32)),  # wrong datatype
    ]
    for model, name, datatype, array in cases:
        for binary in (True, False):
            errors = []
            for module, exc in ((tritonhttp, tritonutils.InferenceServerException), (wshttp, InferenceServerException)):
                client = module.InferenceServerClient(server.address)
                with pytest.raises(exc) as raised:
                    client.infer(model, [module.InferInput(name, list(array.shape), datatype).set_data_from_numpy(array, binary_data=binary)])
                errors.append((raised.value.message(), raised.value.status()))
            assert errors[0] == errors[1]
            assert errors[1][1] in ("400", "404")


def test_client_side_mistakes_are_refused_as_tritonclient():
    for module, exc in ((tritonhttp, tritonutils.InferenceServerException), (wshttp, InferenceServerException)):
        inp = module.InferInput("x", [2, 3], "FP32")
        with pytest.raises(exc, match="got unexpected datatype INT32 from numpy array, expected FP32"):
            inp.set_data_from_numpy(np.zeros((2, 3), np.int32))
        with pytest.raises(exc, match=r"got unexpected numpy array shape \[3, 2\], expected \[2, 3\]"):
            inp.set_data_from_numpy(np.zeros((3, 2), np.float32))
        with pytest.raises(exc, match="input_tensor must be a numpy array"):
            inp.set_data_from_numpy([1.0])
        with pytest.raises(exc, match="reserved parameter"):
            module.InferenceServerClient("localhost:1").infer("m", [], parameters={"priority": 1})


def test_timeouts_of_any_value_are_taken(server):
    for value in (float("inf"), float("nan"), 1e300, -1.0, 0.0):
        client = wshttp.InferenceServerClient(server.address, connection_timeout=value, network_timeout=value)
        assert client.is_server_live()
        grpc = wsgrpc.InferenceServerClient(server.grpc_address)
        assert grpc.is_server_live(client_timeout=value)


def test_a_server_that_is_not_there_is_a_clear_error():
    client = wshttp.InferenceServerClient(f"127.0.0.1:{free_port()}")
    with pytest.raises(InferenceServerException, match="failed to connect to 127.0.0.1:.*refused"):
        client.is_server_live()
    with pytest.raises(InferenceServerException, match="invalid url"):
        wshttp.InferenceServerClient("localhost:http")


SCRIPT = '''
import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

client = httpclient.InferenceServerClient(url=URL)
assert client.is_server_live() and client.is_model_ready("id_int64")
data = np.arange(12, dtype=np.int64).reshape(3, 4)
inputs = [httpclient.InferInput("x", list(data.shape), np_to_triton_dtype(data.dtype))]
inputs[0].set_data_from_numpy(data)
outputs = [httpclient.InferRequestedOutput("y", binary_data=False)]
result = client.infer("id_int64", inputs, outputs=outputs, request_id="42")
print(result.get_response()["id"], result.as_numpy("y").sum(), result.get_output("y")["datatype"])
try:
    client.infer("missing", inputs)
except InferenceServerException as e:
    print("error", e.status(), e.message())
client.close()
'''


def test_a_tritonclient_script_runs_with_only_its_imports_changed(server):
    original = SCRIPT.replace("URL", repr(server.address))
    switched = original.replace("import tritonclient.http as", "import wirespeed.client.http as").replace(
        "from tritonclient.utils import", "from wirespeed.client.utils import"
    )
    assert switched.count("wirespeed") == 2
    outputs = [subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, check=True).stdout
               for text in (original, switched)]
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("42 66 INT64\nerror 404")


def test_threads_sharing_a_client_each_get_their_own_data(server):
    client = wshttp.InferenceServerClient(server.address, concurrency=8)

    def one(i):
        array = np.full((1, 64), i, dtype=np.int64)
        inp = wshttp.InferInput("x", [1, 64], "INT64").set_data_from_numpy(array)
        return client.infer("id_int64", [inp], request_id=str(i))

    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(256)))
    for i, result in enumerate(results):
        assert result.get_response()["id"] == str(i)
        assert (result.as_numpy("y") == i).all()
    # async_infer, as tritonclient's.
    pending = [client.async_infer("id_int64", [wshttp.InferInput("x", [1, 1], "INT64").set_data_from_numpy(
        np.array([[i]], dtype=np.int64))]) for i in range(32)]
    assert [p.get_result().as_numpy("y")[0, 0] for p in pending] == list(range(32))
    client.close()


def test_the_asyncio_client(server):
    async def main():
        async with wsaio.InferenceServerClient(server.address, conn_limit=16) as client:
            assert await client.is_model_ready("id_fp64")

            async def one(i):
                inp = wsaio.InferInput("x", [2, 2], "FP64").set_data_from_numpy(np.full((2, 2), i / 7))
                return (await client.infer("id_fp64", [inp])).as_numpy("y")

            return await asyncio.gather(*(one(i) for i in range(100)))

    for i, y in enumerate(asyncio.run(main())):
        assert (y == i / 7).all()

    async def over_grpc():
        async with wsgrpcaio.InferenceServerClient(server.grpc_address) as client:
            assert (await client.get_model_metadata("id_fp64", as_json=True))["name"] == "id_fp64"

            async def one(i):
                inp = wsgrpcaio.InferInput("x", [1, 2], "FP64")
                inp.set_data_from_numpy(np.full((1, 2), i / 3))
                return (await client.infer("id_fp64", [inp])).as_numpy("y")

            return await asyncio.gather(*(one(i) for i in range(50)))

    for i, y in enumerate(asyncio.run(over_grpc())):
        assert (y == i / 3).all()


def test_the_connection_is_kept_between_calls(server):
    client = wshttp.InferenceServerClient(server.address)
    inp = wshttp.InferInput("x", [1, 1], "FP32").set_data_from_numpy(np.ones((1, 1), np.float32))
    client.infer("id_fp32", [inp])
    before = server_connections(server)
    for _ in range(50):
        client.infer("id_fp32", [inp])
    assert server_connections(server) == before


def server_connections(server):
    """The TCP sockets to and from the server's port in any state, from
    /proc/net/tcp: a connection opened and closed per call would leave one
    in TIME_WAIT each."""
    count = 0
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            ports = {int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)}
            count += server.port in ports
    return count


def grpc_call(module, url, model, arrays, outputs=("y",), **kwargs):
    client = module.InferenceServerClient(url)
    inputs = []
    for name, (datatype, array) in arrays.items():
        inp = module.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    requested = [module.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=requested, **kwargs)


def assert_same_grpc_result(ours, theirs, names):
    assert ours.get_response(as_json=True) == theirs.get_response(as_json=True)
    for name in names:
        a, b = ours.as_numpy(name), theirs.as_numpy(name)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tolist() == b.tolist() if a.dtype == np.object_ else a.tobytes() == b.tobytes()
        mine, reference = ours.get_output(name), theirs.get_output(name)
        assert (mine.name, mine.datatype, list(mine.shape)) == (reference.name, reference.datatype, list(reference.shape))
        # tritonclient 2.73's get_output(as_json=True) returns None (it drops
        # the value it makes); ours returns the documented dict.
        assert ours.get_output(name, as_json=True) in ours.get_response(as_json=True)["outputs"]


@pytest.mark.parametrize("datatype", DTYPES)
def test_every_datatype_over_grpc_as_tritonclient_gets_it(server, datatype):
    array = sample(datatype, seed=2)
    model = f"id_{datatype.lower()}"
    theirs = grpc_call(tritongrpc, server.grpc_address, model, {"x": (datatype, array)}, request_id="9",
                       parameters={"note": "n", "n": 3})
    for url in (server.grpc_address, f"unix://{server.grpc_socket}"):
        ours = grpc_call(wsgrpc, url, model, {"x": (datatype, array)}, request_id="9", parameters={"note": "n", "n": 3})
        assert_same_grpc_result(ours, theirs, ["y"])


def test_grpc_metadata_and_errors_as_tritonclient(server):
    ours, theirs = wsgrpc.InferenceServerClient(server.grpc_address), tritongrpc.InferenceServerClient(server.grpc_address)
    assert ours.is_server_live() and ours.is_server_ready() and ours.is_model_ready("id_fp32")
    # A model that is not served is not ready (as Triton answers), for both.
    assert theirs.is_model_ready("nope") is False
    assert ours.is_model_ready("nope") is False
    for method, args in [("get_server_metadata", ()), ("get_model_metadata", ("id_int8",)),
                         ("get_model_config", ("id_int8",))]:
        want = getattr(theirs, method)(*args, as_json=True)
        assert getattr(ours, method)(*args, as_json=True) == want, method
        # Without as_json: the message's fields as attributes.
        message, reference = getattr(ours, method)(*args), getattr(theirs, method)(*args)
        if method == "get_model_metadata":
            assert message.name == reference.name and message.platform == reference.platform
            assert [(t.name, t.datatype, list(t.shape)) for t in message.inputs] == \
                [(t.name, t.datatype, list(t.shape)) for t in reference.inputs]
        if method == "get_server_metadata":
            assert (message.name, message.version, list(message.extensions)) == \
                (reference.name, reference.version, list(reference.extensions))
    for call in (lambda c: c.get_model_metadata("nope"),
                 lambda c: c.infer("nope", [c_input(c)]),
                 lambda c: c.infer("id_fp32", [c_input(c, "INT32")])):
        with pytest.raises(tritonutils.InferenceServerException) as want:
            call(theirs)
        with pytest.raises(InferenceServerException) as got:
            call(ours)
        assert (str(got.value), got.value.status()) == (str(want.value), want.value.status())


def c_input(client, datatype="FP32"):
    module = wsgrpc if isinstance(client, wsgrpc.InferenceServerClient) else tritongrpc
    inp = module.InferInput("x", [1, 2], datatype)
    inp.set_data_from_numpy(np.ones((1, 2), dtype=DTYPES[datatype]))
    return inp


def test_grpc_callbacks_and_threads_each_get_their_own_data(server):
    client = wsgrpc.InferenceServerClient(server.grpc_address)
    done = {}
    finished = threading.Event()

    def callback(result, error):
        assert error is None
        done[int(result.get_response(as_json=True)["id"])] = result.as_numpy("y")
        if len(done) == 64:
            finished.set()

    for i in range(64):
        inp = wsgrpc.InferInput("x", [1, 3], "INT64")
        inp.set_data_from_numpy(np.full((1, 3), i, dtype=np.int64))
        client.async_infer("id_int64", [inp], callback, request_id=str(i))
    assert finished.wait(60)
    assert all((done[i] == i).all() for i in range(64))


# The peers: KServe's ModelServer (echo models and an XGBoost model) and
# MLServer (the XGBoost model), started once for the test run (conftest).

KSERVE_ECHOES = {"echo_fp32": "FP32", "echo_int64": "INT64", "echo_bool": "BOOL", "echo_bytes": "BYTES"}


def both(url, model, arrays, binary, outputs):
    """tritonclient's result (or its error) and ours, for one request."""
    results = []
    for module, exc in ((tritonhttp, tritonutils.InferenceServerException), (wshttp, InferenceServerException)):
        try:
            results.append(call(module, url, model, arrays, binary, binary, outputs=outputs))
        except exc as e:
            results.append((e.status(), e.message()))
    return results


def assert_as_tritonclient(theirs, ours, names, expected):
    """Ours answers as tritonclient's does (ids aside: KServe makes one up
    per request), or refuses as it does; where tritonclient's request is
    refused and ours is not, ours must be right."""
    assert not isinstance(ours, tuple) or isinstance(theirs, tuple), f"only ours failed: {ours}"
    if isinstance(theirs, tuple):
        if isinstance(ours, tuple):
            # Both refused (the peer refuses what both clients send, at
            # different stages of its own parsing): a server error each.
            assert ours[0] is not None and int(ours[0]) >= 400, ours
        else:
            for name, want in zip(names, expected):
                got = ours.as_numpy(name)
                np.testing.assert_array_equal(got.reshape(want.shape), as_answered(got, want))
        return
    a, b = dict(ours.get_response()), dict(theirs.get_response())
    a.pop("id", None), b.pop("id", None)
    assert a == b
    for name, want in zip(names, expected):
        got = ours.as_numpy(name)
        assert got.dtype == theirs.as_numpy(name).dtype
        assert got.tolist() == theirs.as_numpy(name).tolist()
        np.testing.assert_array_equal(got.reshape(want.shape), as_answered(got, want))


def as_answered(got, want):
    """`want` as the answer carries it: BYTES a peer answered in JSON are
    text, as tritonclient gives them."""
    if got.dtype == object and got.size and isinstance(got.flat[0], str):
        return np.array([v.decode() for v in want.ravel()], dtype=object).reshape(want.shape)
    return want


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("model", KSERVE_ECHOES)
def test_kserve_answers_as_tritonclient_gets_them(kserve, model, binary):
    datatype = KSERVE_ECHOES[model]
    array = sample(datatype, shape=(3, 4), seed=1)
    theirs, ours = both(f"127.0.0.1:{kserve['http']}", model, {"x": (datatype, array)}, binary, ("y",))
    assert_as_tritonclient(theirs, ours, ["y"], [array])


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_xgboost_on_kserve_and_mlserver_as_tritonclient_gets_it(kserve, mlserver, xgb_model, binary):
    _, model, x = xgb_model
    want = model.predict(x)
    for url, input_name, output in (
        (f"127.0.0.1:{kserve['http']}", "x", "predict"),
        (f"127.0.0.1:{mlserver['http']}", "predict", "predict"),
    ):
        theirs, ours = both(url, "xgb", {input_name: ("FP32", x)}, binary, None)
        if isinstance(ours, tuple):
            assert_as_tritonclient(theirs, ours, [], [])
            continue
        names = [o["name"] for o in ours.get_response()["outputs"]]
        assert_as_tritonclient(theirs, ours, names[:1], [want.reshape(-1, 1) if url.endswith(str(kserve["http"])) else want])


def test_grpc_on_kserve_and_mlserver_as_tritonclient_gets_it(kserve, mlserver, xgb_model):
    _, model, x = xgb_model
    want = model.predict(x)
    for url, input_name in ((f"127.0.0.1:{kserve['grpc']}", "x"), (f"127.0.0.1:{mlserver['grpc']}", "predict")):
        results = []
        for module in (tritongrpc, wsgrpc):
            results.append(grpc_call(module, url, "xgb", {input_name: ("FP32", x)}, outputs=None))
        theirs, ours = results
        a, b = ours.get_response(as_json=True), theirs.get_response(as_json=True)
        a.pop("id", None), b.pop("id", None)
        assert a == b
        name = a["outputs"][0]["name"]
        assert ours.as_numpy(name).tolist() == theirs.as_numpy(name).tolist()
        assert ours.as_numpy(name).ravel().tolist() == want.tolist()
    for module in (tritongrpc, wsgrpc):
        client = module.InferenceServerClient(f"127.0.0.1:{kserve['grpc']}")
        assert client.is_model_ready("xgb")
        assert client.get_model_metadata("xgb", as_json=True)["name"] == "xgb"


@pytest.fixture(scope="module")
def hostile_grpc():
    """tests/upstream/hostile.py: a V2 gRPC server that answers wrongly on purpose."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "upstream" / "hostile.py"), str(port)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "serving"
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=15)


@pytest.mark.parametrize("model, status, says", [
    ("short", None, "the ModelInfer answer: output 'y': 1 FP32 elements take 4 bytes, but 3 were declared"),
    ("garbage", "StatusCode.INTERNAL", "decode"),
    ("failing", "StatusCode.INTERNAL", "the model raised ValueError: boom"),
    ("missing", "StatusCode.NOT_FOUND", "no model missing"),
])
def test_a_hostile_grpc_server_is_a_clear_error(hostile_grpc, model, status, says):
    client = wsgrpc.InferenceServerClient(hostile_grpc)
    inp = wsgrpc.InferInput("x", [1], "FP32")
    inp.set_data_from_numpy(np.ones(1, np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(model, [inp], client_timeout=30)
    assert says in raised.value.message(), raised.value.message()
    assert raised.value.status() == status
    # The client is still good for the next call.
    assert client.is_server_live()


def test_a_large_grpc_answer_from_another_server(hostile_grpc):
    client = wsgrpc.InferenceServerClient(hostile_grpc)
    inp = wsgrpc.InferInput("x", [1], "FP32")
    inp.set_data_from_numpy(np.ones(1, np.float32))
    y = client.infer("huge", [inp]).as_numpy("y")
    assert y.shape == (2 << 18,) and not y.any()
