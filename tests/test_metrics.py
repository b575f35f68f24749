"""Prometheus metrics: the scrape checked by Prometheus's own promtool and
parsed by prometheus_client's parser, and the counters compared with what
the tests sent through real clients (requests, tritonclient over HTTP and
gRPC, TF Serving's and Clipper's REST shapes).

Triton's names (`nv_inference_request_success`, `..._duration_us`) break
Prometheus's naming lint (no `_total`, abbreviated units); they are kept
as Triton spells them so that existing dashboards work, and every other
family passes the lint.
"""

import json
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from conftest import MODELS, RunningServer, identity_config, run_wirespeed

# 300 ms a request, one at a time, and one waiting.
SLOW = identity_config("delay_ms = 300\nmax_queue = 1")

ROW = [0.0, 1.0, 3.0, 22.0, 1.0, 0.0, 7.25, 0.0, 0.0, 1.0, 1.0, 0.0]
MAX_BODY = 100_000

# What promtool's naming lint says of Triton's names, which stay as they are.
TRITON_LINT = (
    'counter metrics should have "_total" suffix',
    "metric names should not contain abbreviated units",
    'non-histogram and non-summary metrics should not have "_count" suffix',
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = tmp_path_factory.mktemp("metrics_models")
    shutil.copytree(MODELS / "titanic", models / "titanic")
    (models / "slow").mkdir()
    (models / "slow" / "config.toml").write_text(SLOW)
    running = RunningServer(models, extra_args=["--max-body-bytes", str(MAX_BODY)])
    yield running
    running.stop()


def scrape_text(server, rest_port=False):
    port = server.port if rest_port else server.metrics_port
    answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return answer.text


def scrape(server):
    """Every sample as {(name, sorted labels): value}, by the names on the
    wire (the parser calls every counter's samples `..._total`)."""
    text = scrape_text(server)
    on_wire = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if name not in on_wire and name.removesuffix("_total") in on_wire:
                name = name.removesuffix("_total")
            samples[(name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_for(server, condition, what, timeout=30):
    """Scrapes until `condition(samples)` holds: the counter moving is the
    event waited for; the timeout only catches a counter that never does."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(server)
        if condition(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout} s")
        time.sleep(0.02)


def titanic(**labels):
    return {"model": "titanic", "version": "1", **labels}


@pytest.mark.parametrize("rest_port", [False, True], ids=["metrics-port", "rest-port"])
def test_the_scrape_passes_promtool_but_for_tritons_names(server, rest_port):
    requests.post(f"http://{server.address}/v2/models/titanic/infer", json={
        "inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12], "data": ROW}]}).raise_for_status()
    text = scrape_text(server, rest_port)
    check = subprocess.run(["promtool", "check", "metrics"], input=text,
                           capture_output=True, text=True)
    # 0: no problem; 3: lint problems only (1 is a parse error).
    assert check.returncode in (0, 3), check.stderr + check.stdout
    problems = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    assert problems, "Triton's names should draw promtool's naming lint"
    for line in problems:
        name, _, problem = line.partition(" ")
        assert name.startswith("nv_inference_") and problem in TRITON_LINT, line
    names = {f.name for f in text_string_to_metric_families(text)}
    for family in ["nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                   "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                   "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                   "nv_inference_compute_output_duration_us", "wirespeed_inference_request_duration_seconds",
                   "process_cpu_seconds", "process_resident_memory_bytes"]:
        assert family in names, (family, sorted(names))
    # The exact sample names Triton's dashboards query: no `_total` added.
    assert "\nnv_inference_request_success{" in text
    assert "\nnv_inference_request_failure{" in text


def test_the_counters_equal_what_was_sent(server):
    before = scrape(server)
    v2 = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12], "data": ROW}]}
    bodies = {"v2_rest": [], "tfserving": [], "clipper": []}
    base = f"http://{server.address}"
    for _ in range(5):
        body = json.dumps(v2).encode()
        bodies["v2_rest"].append(body)
        assert requests.post(f"{base}/v2/models/titanic/infer", data=body).status_code == 200
    for _ in range(3):
        body = json.dumps({"instances": [ROW]}).encode()
        bodies["tfserving"].append(body)
        assert requests.post(f"{base}/v1/models/titanic:predict", data=body).status_code == 200
    for _ in range(2):
        body = json.dumps({"input": ROW}).encode()
        bodies["clipper"].append(body)
        assert requests.post(f"{base}/titanic/predict", data=body).status_code == 200
    # Through tritonclient, over HTTP (counted as V2 REST) and gRPC.
    http = httpclient.InferenceServerClient(server.address)
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    x = np.array([ROW], dtype=np.float32)
    for client, module, n in [(http, httpclient, 4), (grpc, grpcclient, 6)]:
        for _ in range(n):
            inp = module.InferInput("features", [1, 12], "FP32")
            inp.set_data_from_numpy(x)
            client.infer("titanic", [inp])
    # Failures the model's statistics count as OTHER: a wrong shape, a
    # wrong datatype.
    bad = [
        {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 11], "data": ROW[:11]}]},
        {"inputs": [{"name": "features", "datatype": "INT64", "shape": [1, 12], "data": [1] * 12}]},
        {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12], "data": ["a"] * 12}]},
    ]
    for body in bad:
        body = json.dumps(body).encode()
        bodies["v2_rest"].append(body)
        assert requests.post(f"{base}/v2/models/titanic/infer", data=body).status_code == 400
    after = scrape(server)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    successes = 5 + 3 + 2 + 4 + 6
    assert delta("nv_inference_request_success", **titanic()) == successes
    assert delta("nv_inference_request_failure", **titanic(reason="OTHER")) == len(bad)
    for reason in ["REJECTED", "CANCELED", "BACKEND"]:
        assert delta("nv_inference_request_failure", **titanic(reason=reason)) == 0, reason
    assert delta("nv_inference_count", **titanic()) == successes
    assert delta("nv_inference_exec_count", **titanic()) == successes
    # The server's own, by protocol; tritonclient's HTTP requests are V2 REST.
    assert delta("wirespeed_infer_requests_total", protocol="v2_rest") == 5 + 4 + len(bad)
    assert delta("wirespeed_infer_requests_total", protocol="v2_grpc") == 6
    assert delta("wirespeed_infer_requests_total", protocol="tfserving") == 3
    assert delta("wirespeed_infer_requests_total", protocol="clipper") == 2
    for protocol in ["tfserving", "clipper"]:
        assert delta("wirespeed_decoded_bytes_total", protocol=protocol) == sum(map(len, bodies[protocol]))
    # V2 REST also had tritonclient's bodies, of unknown length: at least ours.
    assert delta("wirespeed_decoded_bytes_total", protocol="v2_rest") > sum(map(len, bodies["v2_rest"]))
    # The histogram saw every success, once, in order.
    name = "wirespeed_inference_request_duration_seconds"
    assert delta(f"{name}_count", **titanic()) == successes
    buckets = sorted(
        (float(dict(labels)["le"]), v) for (n, labels), v in after.items()
        if n == f"{name}_bucket" and dict(labels)["model"] == "titanic")
    assert buckets[-1] == (float("inf"), value(after, f"{name}_count", **titanic()))
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    assert 0 < delta(f"{name}_sum", **titanic()) < successes * 1.0
    # The durations are the statistics API's, in microseconds.
    stats = http.get_inference_statistics("titanic")["model_stats"][0]["inference_stats"]
    for metric, stage in [("nv_inference_request_duration_us", "success"),
                          ("nv_inference_compute_infer_duration_us", "compute_infer"),
                          ("nv_inference_compute_input_duration_us", "compute_input")]:
        assert value(after, metric, **titanic()) == stats[stage]["ns"] // 1000, metric
    assert value(after, "nv_inference_request_success", **titanic()) == stats["success"]["count"]


def slow_request():
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def test_rejected_and_canceled_requests_are_counted_with_their_reason(server):
    """`slow` computes one request at a time for 300 ms and queues one: of
    six sent at once, those refused are REJECTED; a gRPC client whose
    deadline passes first is CANCELED."""
    before = scrape(server)
    url = f"http://{server.address}/v2/models/slow/infer"
    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda _: requests.post(url, json=slow_request()).status_code, range(6)))
    refused = statuses.count(503)
    assert refused >= 1 and statuses.count(200) + refused == 6, statuses
    labels = {"model": "slow", "version": "1"}
    wait_for(server, lambda s: value(s, "nv_inference_request_failure", **labels, reason="REJECTED")
             - value(before, "nv_inference_request_failure", **labels, reason="REJECTED") == refused,
             f"{refused} REJECTED")

    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        grpc.infer("slow", [inp], client_timeout=0.05)
    assert "Deadline" in str(e.value) or "DEADLINE" in str(e.value), e.value
    wait_for(server, lambda s: value(s, "nv_inference_request_failure", **labels, reason="CANCELED")
             - value(before, "nv_inference_request_failure", **labels, reason="CANCELED") == 1, "1 CANCELED")
    after = scrape(server)
    assert value(after, "nv_inference_request_success", **labels) - value(
        before, "nv_inference_request_success", **labels) == statuses.count(200)
    assert value(after, "nv_inference_pending_request_count", **labels) == 0


def test_limit_refusals_and_open_connections_are_counted(server):
    before = scrape(server)
    base = f"http://{server.address}"
    too_large = requests.post(f"{base}/v2/models/titanic/infer", data=b"x" * (MAX_BODY + 1))
    assert too_large.status_code == 413
    too_many_headers = requests.get(f"{base}/v2/health/ready", headers={"x-big": "y" * (70 << 10)})
    assert too_many_headers.status_code == 431
    after = scrape(server)
    for limit in ["body", "headers"]:
        got = value(after, "wirespeed_refused_requests_total", limit=limit) - value(
            before, "wirespeed_refused_requests_total", limit=limit)
        assert got == 1, (limit, got)

    labels = {"api": "rest", "transport": "tcp"}
    open_now = value(scrape(server), "wirespeed_open_connections", **labels)
    accepted = value(scrape(server), "wirespeed_connections_total", **labels)
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    wait_for(server, lambda s: value(s, "wirespeed_open_connections", **labels) >= open_now + 3,
             "3 more open connections")
    assert value(scrape(server), "wirespeed_connections_total", **labels) >= accepted + 3
    for s in sockets:
        s.close()
    wait_for(server, lambda s: value(s, "wirespeed_open_connections", **labels) <= open_now,
             "the 3 connections closed")


def test_custom_buckets_and_no_histograms(tmp_path):
    server = RunningServer(MODELS, extra_args=["--metrics-buckets", "0.001,0.5"])
    try:
        text = scrape_text(server)
        les = {s.labels["le"] for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "wirespeed_inference_request_duration_seconds_bucket"}
        assert les == {"0.001", "0.5", "+Inf"}, les
    finally:
        server.stop()
    server = RunningServer(MODELS, extra_args=["--metrics-buckets", "off"])
    try:
        text = scrape_text(server)
        assert "wirespeed_inference_request_duration_seconds" not in text
        assert "nv_inference_request_success" in text
    finally:
        server.stop()


def test_metrics_off_and_on_the_rest_port_only():
    server = RunningServer(MODELS, extra_args=["--metrics", "off"])
    try:
        assert server.metrics_port is None
        answer = requests.get(f"http://{server.address}/metrics")
        assert answer.status_code == 404 and "--metrics off" in answer.json()["error"], answer.text
    finally:
        server.stop()
    server = RunningServer(MODELS, extra_args=["--metrics", "rest"])
    try:
        assert server.metrics_port is None
        assert not any("listening on metrics" in line for line in server.log)
        assert "nv_inference_request_success" in scrape_text(server, rest_port=True)
    finally:
        server.stop()


@pytest.mark.parametrize("buckets, needle", [
    ("0.1,0.01", "increasing"),
    ("0.1,x", "'x' is not a number of seconds"),
    ("0", "positive"),
])
def test_bad_buckets_stop_the_server_naming_the_flag(buckets, needle):
    out = run_wirespeed("serve", "--models", MODELS, "--http", "127.0.0.1:0", "--grpc", "off",
                        "--metrics-buckets", buckets)
    assert out.returncode != 0
    assert "--metrics-buckets" in out.stderr and needle in out.stderr, out.stderr


def test_a_taken_metrics_port_stops_the_server_naming_the_flag():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        out = run_wirespeed("serve", "--models", MODELS, "--http", "127.0.0.1:0", "--grpc", "off",
                            "--metrics", f"127.0.0.1:{port}")
        assert out.returncode != 0
        assert "--metrics" in out.stderr and str(port) in out.stderr, out.stderr
    finally:
        taken.close()
