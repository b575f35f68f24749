"""wirespeed in front of other inference servers (`backend = "upstream"`).

The upstreams are real: KServe's ModelServer (the `kserve` package) and
MLServer (in `.venv-mlserver`, installed by scripts/test), each serving an
XGBoost model; wirespeed itself over a Unix socket; and a gRPC server that
answers wrongly on purpose (tests/upstream/hostile.py). Clients are the
real ones: tritonclient (HTTP JSON, HTTP binary, gRPC), and TF Serving's and
Clipper's REST shapes with requests. Outputs through wirespeed are compared
with the upstream's own answers, and the XGBoost ones with the xgboost
package's predictions.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost
from tritonclient.utils import InferenceServerException

from conftest import MODELS, ROOT, SAFETY, RunningServer, free_port, http_ok, proc_status, run_wirespeed, wait_until

HERE = Path(__file__).resolve().parent / "upstream"


def write_models(root: Path, models: dict) -> Path:
    """One folder per model with the given config.toml text."""
    root.mkdir(parents=True, exist_ok=True)
    for name, config in models.items():
        (root / name).mkdir(exist_ok=True)
        (root / name / "config.toml").write_text(config)
    return root


def upstream_config(url, model=None, extra="", inputs=(), outputs=()):
    text = f'backend = "upstream"\nurl = "{url}"\n'
    if model:
        text += f'model = "{model}"\n'
    text += extra
    for kind, specs in (("inputs", inputs), ("outputs", outputs)):
        for name, datatype, shape in specs:
            text += f'\n[[{kind}]]\nname = "{name}"\ndatatype = "{datatype}"\nshape = {list(shape)}\n'
    return text


def start_front(tmp_path, models, extra_args=()):
    front = RunningServer(write_models(tmp_path / "front", models), extra_args=extra_args)
    return front


def wait_model_ready(server, model):
    wait_until(f"model {model} ready", lambda: http_ok(f"http://{server.address}/v2/models/{model}/ready"))


@pytest.fixture
def wirespeed_upstream(tmp_path):
    """A wirespeed on the bundled models, its gRPC also on a Unix socket."""
    sock = tmp_path / "upstream.sock"
    http_sock = tmp_path / "upstream-http.sock"
    server = RunningServer(MODELS, extra_args=["--grpc-uds", sock, "--http-uds", http_sock])
    server.socket = sock
    server.http_socket = http_sock
    yield server
    server.stop()


DATATYPES = {
    "FP32": lambda rng: rng.normal(size=(3, 4)).astype(np.float32),
    "INT64": lambda rng: rng.integers(-(2**62), 2**62, size=(3, 4), dtype=np.int64),
    "BOOL": lambda rng: rng.integers(0, 2, size=(3, 4)).astype(bool),
    "BYTES": lambda rng: np.array([[f"s{i}é".encode() for i in range(4)] for _ in range(3)], dtype=np.object_),
}


def infer_every_way(address, grpc_address, model, input_name, output, array, datatype):
    """The output through tritonclient HTTP JSON, HTTP binary and gRPC."""
    answers = {}
    http = httpclient.InferenceServerClient(address)
    for binary in (False, True):
        x = httpclient.InferInput(input_name, list(array.shape), datatype)
        x.set_data_from_numpy(array, binary_data=binary)
        out = httpclient.InferRequestedOutput(output, binary_data=binary)
        answers[f"http binary={binary}"] = http.infer(model, [x], outputs=[out]).as_numpy(output)
    g = grpcclient.InferenceServerClient(grpc_address)
    x = grpcclient.InferInput(input_name, list(array.shape), datatype)
    x.set_data_from_numpy(array)
    answers["grpc"] = g.infer(model, [x]).as_numpy(output)
    return answers


def as_bytes(array):
    """tritonclient gives JSON BYTES as str and binary ones as bytes."""
    if array.dtype != np.object_:
        return array
    return np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(array)


def direct_grpc(grpc_address, model, input_name, output, array, datatype):
    g = grpcclient.InferenceServerClient(grpc_address)
    x = grpcclient.InferInput(input_name, list(array.shape), datatype)
    x.set_data_from_numpy(array)
    return g.infer(model, [x]).as_numpy(output)


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_every_client_gets_what_the_upstream_answers(datatype, kserve, wirespeed_upstream, tmp_path):
    name = f"identity_{datatype.lower()}"
    echo = f"echo_{datatype.lower()}"
    spec = dict(inputs=[("x", datatype, [-1, -1])], outputs=[("y", datatype, [-1, -1])])
    front = start_front(tmp_path, {
        name: upstream_config(f"grpc+unix://{wirespeed_upstream.socket}"),
        echo: upstream_config(f"grpc://127.0.0.1:{kserve['grpc']}", **spec),
    })
    try:
        array = DATATYPES[datatype](np.random.default_rng(1))
        for model, inp, out, upstream in (
            (name, "INPUT0", "OUTPUT0", wirespeed_upstream.grpc_address),
            (echo, "x", "y", f"127.0.0.1:{kserve['grpc']}"),
        ):
            wait_model_ready(front, model)
            remote = name if model == name else echo
            expected = direct_grpc(upstream, remote, inp, out, array, datatype)
            np.testing.assert_array_equal(expected, array)
            for way, got in infer_every_way(front.address, front.grpc_address, model, inp, out, array, datatype).items():
                assert got.dtype == expected.dtype, (model, way)
                np.testing.assert_array_equal(as_bytes(got), expected, err_msg=f"{model} {way}")
            if datatype != "BYTES":
                rows = array.tolist()
                tf = requests.post(f"http://{front.address}/v1/models/{model}:predict", json={"instances": rows})
                assert tf.status_code == 200, tf.text
                np.testing.assert_array_equal(np.array(tf.json()["predictions"], dtype=array.dtype), expected)
                clipper = requests.post(f"http://{front.address}/{model}/predict", json={"input_batch": rows})
                assert clipper.status_code == 200, clipper.text
                answer = clipper.json()
                # Clipper answers a batch of one as one query.
                got = [row["output"] for row in answer["batch_predictions"]] if len(rows) > 1 else [answer["output"]]
                np.testing.assert_array_equal(np.array(got, dtype=array.dtype), expected)
    finally:
        front.stop()


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_rest_upstreams_get_binary_tensors_or_json(datatype, kserve, wirespeed_upstream, tmp_path):
    """A wirespeed over REST lists the binary tensor extension, so it gets
    binary tensors; KServe's REST does not, so it gets JSON."""
    name = f"identity_{datatype.lower()}"
    echo = f"echo_{datatype.lower()}"
    spec = dict(inputs=[("x", datatype, [-1, -1])], outputs=[("y", datatype, [-1, -1])])
    front = start_front(tmp_path, {
        name: upstream_config(f"http+unix://{wirespeed_upstream.http_socket}"),
        echo: upstream_config(f"http://127.0.0.1:{kserve['http']}", **spec),
    })
    try:
        array = DATATYPES[datatype](np.random.default_rng(2))
        for model, inp, out in ((name, "INPUT0", "OUTPUT0"), (echo, "x", "y")):
            wait_model_ready(front, model)
            for way, got in infer_every_way(front.address, front.grpc_address, model, inp, out, array, datatype).items():
                np.testing.assert_array_equal(as_bytes(got), array, err_msg=f"{model} {way}")
    finally:
        front.stop()


def test_xgboost_on_kserve_and_mlserver_matches_the_xgboost_package(xgb_model, kserve, mlserver, tmp_path):
    _, booster, rows = xgb_model
    spec = dict(inputs=[("x", "FP32", [-1, 10])], outputs=[("predict", "INT64", [-1, 1])])
    front = start_front(tmp_path, {
        "on_kserve": upstream_config(f"grpc://127.0.0.1:{kserve['grpc']}", model="xgb", **spec),
        "on_mlserver": upstream_config(f"grpc://127.0.0.1:{mlserver['grpc']}", model="xgb", **spec),
        "on_kserve_rest": upstream_config(f"http://127.0.0.1:{kserve['http']}", model="xgb", **spec),
        "on_mlserver_rest": upstream_config(f"http://127.0.0.1:{mlserver['http']}", model="xgb", **spec),
    })
    try:
        expected = booster.predict(rows).astype(np.int64).reshape(-1, 1)
        for model in ("on_kserve", "on_mlserver", "on_kserve_rest", "on_mlserver_rest"):
            wait_model_ready(front, model)
            for way, got in infer_every_way(front.address, front.grpc_address, model, "x", "predict", rows, "FP32").items():
                np.testing.assert_array_equal(got, expected, err_msg=f"{model} {way}")
        direct = direct_grpc(f"127.0.0.1:{mlserver['grpc']}", "xgb", "x", "predict", rows, "FP32")
        np.testing.assert_array_equal(direct.reshape(-1, 1), expected)
    finally:
        front.stop()


def test_batched_through_kserve_each_request_gets_the_answer_it_gets_alone(xgb_model, kserve, tmp_path):
    """`[batching]` in front of KServe: concurrent requests of 1 to 4 rows
    go upstream as fewer, larger calls, and each gets exactly the rows it
    gets when sent alone, which are the xgboost package's predictions."""
    _, booster, rows = xgb_model
    spec = dict(inputs=[("x", "FP32", [-1, 10])], outputs=[("predict", "INT64", [-1, 1])])
    url = f"grpc://127.0.0.1:{kserve['grpc']}"
    batching = "max_concurrency = 1\n[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 20000\n"
    front = start_front(tmp_path, {
        "batched": upstream_config(url, model="xgb", extra=batching, **spec),
        "alone": upstream_config(url, model="xgb", **spec),
    })
    try:
        for model in ("batched", "alone"):
            wait_model_ready(front, model)
        requests_rows = [rows[i:i + 1 + i % 4] for i in range(0, 48)]

        def infer(model, x, client):
            given = httpclient.InferInput("x", list(x.shape), "FP32")
            given.set_data_from_numpy(x, binary_data=False)
            return client.infer(model, [given]).as_numpy("predict")

        alone_client = httpclient.InferenceServerClient(front.address)
        alone = [infer("alone", x, alone_client) for x in requests_rows]
        clients = threading.local()

        def batched(x):
            if not hasattr(clients, "http"):
                clients.http = httpclient.InferenceServerClient(front.address)
            return infer("batched", x, clients.http)

        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(batched, requests_rows))
        for i, (x, a, b) in enumerate(zip(requests_rows, alone, together)):
            np.testing.assert_array_equal(b, a, err_msg=f"request {i}")
            np.testing.assert_array_equal(a, booster.predict(x).astype(np.int64).reshape(-1, 1), err_msg=f"request {i}")
        stats = requests.get(f"http://{front.address}/v2/models/batched/stats", timeout=10).json()["model_stats"][0]
        assert stats["inference_count"] == len(requests_rows)
        assert stats["execution_count"] < len(requests_rows) / 2, stats
    finally:
        front.stop()


def test_an_upstream_that_is_down_at_start_makes_the_model_ready_when_it_answers(tmp_path):
    sock = tmp_path / "late.sock"
    front = start_front(tmp_path, {"identity_fp32": upstream_config(f"grpc+unix://{sock}")})
    try:
        answer = requests.get(f"http://{front.address}/v2/models/identity_fp32/ready")
        assert answer.status_code == 503
        assert str(sock) in answer.json()["reason"], answer.text
        assert requests.get(f"http://{front.address}/v2/health/ready").status_code == 503
        infer = requests.post(
            f"http://{front.address}/v2/models/identity_fp32/infer",
            json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]},
        )
        assert infer.status_code == 503 and infer.headers["Retry-After"] == "1", infer.text
        assert "is not ready" in infer.json()["error"]
        g = grpcclient.InferenceServerClient(front.grpc_address)
        assert not g.is_model_ready("identity_fp32")

        upstream = RunningServer(MODELS, extra_args=["--grpc-uds", sock])
        try:
            wait_model_ready(front, "identity_fp32")
            assert g.is_server_ready()
            x = np.array([[1.5, -2.0]], dtype=np.float32)
            got = direct_grpc(front.grpc_address, "identity_fp32", "INPUT0", "OUTPUT0", x, "FP32")
            np.testing.assert_array_equal(got, x)
        finally:
            upstream.stop()
    finally:
        front.stop()


def post_row(front, timeout=10):
    started = time.monotonic()
    try:
        answer = requests.post(
            f"http://{front.address}/v2/models/identity_fp32/infer",
            json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]},
            timeout=timeout,
        )
        return answer.status_code, time.monotonic() - started, answer.text
    except requests.RequestException as e:
        return None, time.monotonic() - started, str(e)


def test_a_killed_upstream_gives_quick_503s_and_its_return_needs_no_restart(wirespeed_upstream, tmp_path):
    sock = wirespeed_upstream.socket
    front = start_front(tmp_path, {"identity_fp32": upstream_config(f"grpc+unix://{sock}")})
    try:
        wait_model_ready(front, "identity_fp32")
        results, stop = [], threading.Event()

        def load():
            while not stop.is_set():
                results.append(post_row(front))

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        wait_until("requests before the kill", lambda: sum(r[0] == 200 for r in results) >= 20)
        killed_at = len(results)
        wirespeed_upstream.process.send_signal(signal.SIGKILL)
        wirespeed_upstream.process.wait()
        wait_until("refused requests", lambda: sum(r[0] == 503 for r in results[killed_at:]) >= 20)
        stop.set()
        for t in threads:
            t.join()
        after = results[killed_at:]
        assert all(code is not None for code, _, _ in after), "a request hung or lost its connection"
        assert {code for code, _, _ in after} <= {200, 502, 503}, after
        refused = [r for r in after if r[0] == 503]
        assert all(seconds < 2 for _, seconds, _ in refused), max(s for _, s, _ in refused)
        assert "upstream" in refused[-1][2] or "not ready" in refused[-1][2], refused[-1]
        assert front.process.poll() is None

        again = RunningServer(MODELS, extra_args=["--grpc-uds", sock])
        try:
            wait_model_ready(front, "identity_fp32")
            wait_until("a served request", lambda: post_row(front)[0] == 200)
            assert [post_row(front)[0] for _ in range(10)] == [200] * 10
        finally:
            again.stop()
    finally:
        front.stop()


def test_with_two_replicas_one_killed_every_request_succeeds(tmp_path):
    a_sock, b_sock = tmp_path / "a.sock", tmp_path / "b.sock"
    a = RunningServer(MODELS, extra_args=["--grpc-uds", a_sock])
    b = RunningServer(MODELS, extra_args=["--grpc-uds", b_sock])
    config = f'backend = "upstream"\nurls = ["grpc+unix://{a_sock}", "grpc+unix://{b_sock}"]\n'
    front = start_front(tmp_path, {"identity_fp32": config}, extra_args=["--log-level", "info"])
    try:
        wait_model_ready(front, "identity_fp32")
        assert [post_row(front)[0] for _ in range(20)] == [200] * 20
        a.process.send_signal(signal.SIGKILL)
        a.process.wait()
        codes = [post_row(front)[0] for _ in range(60)]
        assert codes == [200] * 60, codes
        front.wait_for_log("ejecting the replica")
        assert [post_row(front)[0] for _ in range(20)] == [200] * 20
    finally:
        front.stop()
        a.stop()
        b.stop()


def test_a_client_deadline_is_the_upstream_deadline_and_cancels_the_call(kserve, tmp_path):
    spec = dict(inputs=[("x", "FP32", [-1])], outputs=[("y", "FP32", [-1])])
    front = start_front(
        tmp_path,
        {"sleepy": upstream_config(f"grpc://127.0.0.1:{kserve['grpc']}", **spec)},
        extra_args=["--request-timeout", "0.3"],
    )
    cancels = kserve["cancels"]
    before = cancels.read_text().count("cancelled")
    try:
        wait_model_ready(front, "sleepy")
        g = grpcclient.InferenceServerClient(front.grpc_address)
        x = grpcclient.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as raised:
            g.infer("sleepy", [x], client_timeout=0.2)
        assert time.monotonic() - started < 1.5
        assert "DEADLINE_EXCEEDED" in str(raised.value.status()) or "Deadline" in str(raised.value), raised.value
        wait_until("KServe to see the gRPC call cancelled", lambda: cancels.read_text().count("cancelled") > before)

        started = time.monotonic()
        answer = requests.post(
            f"http://{front.address}/v2/models/sleepy/infer",
            json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]},
        )
        assert answer.status_code == 504, answer.text
        assert time.monotonic() - started < 1.5
        assert f"127.0.0.1:{kserve['grpc']}" in answer.json()["error"]
        wait_until("KServe to see the REST call cancelled", lambda: cancels.read_text().count("cancelled") > before + 1)
    finally:
        front.stop()


@pytest.fixture(scope="module")
def hostile():
    port = free_port()
    process = subprocess.Popen([sys.executable, str(HERE / "hostile.py"), str(port)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "serving"
    yield port
    process.terminate()
    process.wait(timeout=15)


@pytest.mark.parametrize(
    "model, status, grpc_code, says",
    [
        ("short", 502, "StatusCode.INTERNAL", "take 4 bytes"),
        ("huge", 502, "StatusCode.INTERNAL", "over the limit of 1048576 bytes"),
        ("garbage", 502, "StatusCode.INTERNAL", "does not decode"),
        ("failing", 502, "StatusCode.INTERNAL", "answered INTERNAL: the model raised ValueError: boom"),
        ("missing", 404, "StatusCode.NOT_FOUND", "answered NOT_FOUND"),
    ],
)
def test_a_hostile_upstream_gets_a_clear_error_and_nothing_else(hostile, tmp_path, model, status, grpc_code, says):
    front = start_front(tmp_path, {model: upstream_config(f"grpc://127.0.0.1:{hostile}", extra="max_message_bytes = 1048576\n")})
    try:
        wait_model_ready(front, model)
        for _ in range(3):
            answer = requests.post(
                f"http://{front.address}/v2/models/{model}/infer",
                json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]},
            )
            assert answer.status_code == status, answer.text
            assert says in answer.json()["error"] and f"127.0.0.1:{hostile}" in answer.json()["error"], answer.text
        g = grpcclient.InferenceServerClient(front.grpc_address)
        x = grpcclient.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        with pytest.raises(InferenceServerException) as raised:
            g.infer(model, [x])
        assert raised.value.status() == grpc_code, raised.value
        assert proc_status(front.process.pid, "VmRSS") < 64 * 1024
        assert http_ok(f"http://{front.address}/v2/models/{model}/ready")
    finally:
        front.stop()


def test_mistakes_in_an_upstream_config_stop_the_server_with_their_reason(tmp_path):
    for config, says in (
        ('backend = "upstream"\n', 'needs url = "grpc://host:port"'),
        ('backend = "upstream"\nurl = "tcp://h:1"\n', "unknown upstream scheme 'tcp'"),
        ('backend = "upstream"\nurls = ["grpc://h:1", "http://h:2"]\n', "speak different protocols"),
        ('backend = "upstream"\nurl = "grpc://h:1"\ntoken = "x"\n', "unknown field `token`"),
    ):
        root = write_models(tmp_path / f"bad{abs(hash(config))}", {"m": config})
        result = run_wirespeed("serve", "--models", root, "--http", "127.0.0.1:0", "--grpc", "off")
        assert result.returncode != 0
        assert says in result.stderr, result.stderr


def test_whole_server_mode_serves_what_the_upstream_lists_or_names(kserve, mlserver, xgb_model, tmp_path):
    _, booster, rows = xgb_model
    expected = booster.predict(rows).astype(np.int64).reshape(-1, 1)
    # MLServer lists its models (its repository index); its XGBoost model
    # declares no tensors, so a local folder of the same name pins them.
    pins = upstream_config(
        f"grpc://127.0.0.1:{mlserver['grpc']}",
        inputs=[("x", "FP32", [-1, 10])], outputs=[("predict", "INT64", [-1, 1])],
    )
    local = write_models(tmp_path / "local", {"xgb": pins})
    listed = RunningServer(local, extra_args=["--upstream", f"grpc://127.0.0.1:{mlserver['grpc']}"])
    # KServe's model server lists nothing: the models are named.
    named = RunningServer(
        tmp_path / "absent",
        extra_args=["--upstream", f"grpc://127.0.0.1:{kserve['grpc']}", "--upstream-models", "echo_fp32,echo_int64"],
    )
    try:
        wait_model_ready(listed, "xgb")
        names = requests.get(f"http://{listed.address}/v1/models").json()["models"]
        assert "xgb" in names
        got = direct_grpc(listed.grpc_address, "xgb", "x", "predict", rows, "FP32")
        np.testing.assert_array_equal(got, expected)

        assert requests.get(f"http://{named.address}/v1/models").json()["models"] == ["echo_fp32", "echo_int64"]
        # KServe's echo models (custom kserve.Model classes) list no tensors
        # either: ready all the same, each request's tensors forwarded as
        # they come, and answered as KServe answers them directly.
        wait_model_ready(named, "echo_fp32")
        assert requests.get(f"http://{named.address}/v2/health/ready").status_code == 200
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        through = direct_grpc(named.grpc_address, "echo_fp32", "x", "y", x, "FP32")
        direct = direct_grpc(f"127.0.0.1:{kserve['grpc']}", "echo_fp32", "x", "y", x, "FP32")
        np.testing.assert_array_equal(through, direct)
        rest = requests.post(f"http://{named.address}/v2/models/echo_fp32/infer", json={
            "inputs": [{"name": "anything", "datatype": "FP32", "shape": [1, 2], "data": [1.5, 2.5]}]})
        assert rest.status_code == 200 and rest.json()["outputs"][0]["data"] == [1.5, 2.5], rest.text
    finally:
        listed.stop()
        named.stop()


def test_tls_upstreams_with_a_token(tmp_path):
    """grpcs:// and https:// to a wirespeed with TLS and a bearer token: the
    CA file and the token header from config.toml; without the token, the
    model is not ready and says why."""
    # A CA, and a server certificate it signs (rustls, like browsers,
    # refuses a CA certificate as a server's own).
    ca, ca_key = tmp_path / "ca.pem", tmp_path / "ca.key"
    cert, key, token = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "token"
    (tmp_path / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for command in (
        f"req -x509 -newkey rsa:2048 -nodes -keyout {ca_key} -out {ca} -days 1 -subj /CN=wirespeed-test-ca",
        f"req -newkey rsa:2048 -nodes -keyout {key} -out {tmp_path / 'leaf.csr'} -subj /CN=localhost",
        f"x509 -req -in {tmp_path / 'leaf.csr'} -CA {ca} -CAkey {ca_key} -CAcreateserial -out {cert} -days 1"
        f" -extfile {tmp_path / 'san.ext'}",
    ):
        made = subprocess.run(["openssl", *command.split()], capture_output=True)
        assert made.returncode == 0, made.stderr
    token.write_text("s3cret-token\n")
    upstream = RunningServer(MODELS, ["--tls-cert", cert, "--tls-key", key, "--auth-token-file", token])
    secure = f'ca_file = "{ca}"\nheaders = {{ authorization = "Bearer s3cret-token" }}\n'
    front = start_front(tmp_path, {
        "over_grpcs": upstream_config(f"grpcs://127.0.0.1:{upstream.grpc_port}", model="identity_fp32", extra=secure),
        "over_https": upstream_config(f"https://127.0.0.1:{upstream.port}", model="identity_fp32", extra=secure),
        "no_token": upstream_config(
            f"grpcs://127.0.0.1:{upstream.grpc_port}", model="identity_fp32", extra=f'ca_file = "{ca}"\n'
        ),
    })
    try:
        x = np.array([[0.25, -3.5]], dtype=np.float32)
        for model in ("over_grpcs", "over_https"):
            wait_model_ready(front, model)
            got = direct_grpc(front.grpc_address, model, "INPUT0", "OUTPUT0", x, "FP32")
            np.testing.assert_array_equal(got, x)
        wait_until(
            "the reason the tokenless model is not ready",
            lambda: "UNAUTHENTICATED" in requests.get(f"http://{front.address}/v2/models/no_token/ready").text,
        )
    finally:
        front.stop()
        upstream.stop()
