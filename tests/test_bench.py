"""`wirespeed bench`: each scenario, in its short mode, against a real
server; the output files exist and parse, and the figures are consistent
with each other and with what was asked. Also the `Server-Timing` header the
bench reads, and the refusals of targets it must not load."""

import csv
import json
import xml.etree.ElementTree as ET

import pytest
import requests

from conftest import MODELS, RunningServer, identity_config, run_wirespeed

TITANIC_ROW = [3.0, 1.0, 0.0, 0.43125, 1 / 6, 0.0, -0.421708, 0.0, 0.0, 0.0, 1.0, 0.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    http_sock, grpc_sock = root / "http.sock", root / "grpc.sock"
    running = RunningServer(MODELS, ["--http-uds", str(http_sock), "--grpc-uds", str(grpc_sock)])
    running.http_sock, running.grpc_sock = http_sock, grpc_sock
    yield running
    running.stop()


def bench(*args, timeout=300):
    out = run_wirespeed("bench", *args, timeout=timeout)
    return out


def scenario(server, name, tmp_path, *extra):
    return scenario_with(
        name, tmp_path,
        "--http", f"http://{server.address}",
        "--grpc", f"grpc://{server.grpc_address}",
        "--http-uds", server.http_sock,
        "--grpc-uds", server.grpc_sock,
        "--models", MODELS,
        *extra,
    )


def scenario_with(name, tmp_path, *args):
    files = {k: tmp_path / f"{name}.{k}" for k in ("json", "csv", "svg")}
    out = bench(
        "scenario", name, "--short", *args,
        "--json", files["json"], "--csv", files["csv"], "--plot", files["svg"],
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(files["json"].read_text())
    rows = list(csv.DictReader(files["csv"].open()))
    svg = ET.parse(files["svg"]).getroot()
    assert svg.tag.endswith("svg")
    return out.stdout, report, rows, svg


def check_dist(d):
    assert d["count"] > 0
    assert 0 < d["min"] <= d["p50"] <= d["p90"] <= d["p95"] <= d["p99"] <= d["p99_9"] <= d["p99_99"] <= d["max"], d
    assert d["min"] <= d["mean"] <= d["max"] and d["stdev"] >= 0


def check_measurement(m, allow_failures=False):
    s = m["summary"]
    assert s["requests"] == s["answered"] + s["failed"]
    assert s["failed"] == sum(s["errors"].values())
    if not allow_failures:
        assert s["failed"] == 0, s["errors"]
        assert s["answered"] > 0
        check_dist(s["latency"])
        check_dist(s["uncorrected"])
        assert s["latency"]["count"] == s["answered"]
        # Throughput is what was answered over the time measured.
        assert s["throughput"] == pytest.approx(s["answered"] / s["seconds"], rel=1e-6)
        # One window per round; each window's figures are in the total.
        assert len(m["windows"]) >= 1
        assert sum(1 for _ in m["windows"]) <= 10
        for stage, d in s["server"].items():
            check_dist(d)
            assert d["count"] == s["answered"], stage
        if s["server"]:
            # The server's decode is part of what the client waited for.
            assert s["server"]["decode"]["p50"] <= s["latency"]["p50"]
            assert s["server"]["total"]["p50"] <= s["latency"]["p50"]


def check_csv(rows, report):
    measurements = [m for c in report["cells"] for m in c["measurements"]]
    assert len(rows) == len(measurements)
    for row, m in zip(rows, measurements):
        assert row["target"] == m["target"]
        assert int(row["answered"]) == m["summary"]["answered"]
        if m["summary"]["answered"]:
            assert float(row["p50_ms"]) == pytest.approx(m["summary"]["latency"]["p50"])
            assert float(row["p50_ms"]) <= float(row["p99_ms"]) <= float(row["max_ms"])


def test_server_timing_adds_up(server):
    r = requests.post(
        f"http://{server.address}/v2/models/titanic/infer",
        json={"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": TITANIC_ROW}]},
    )
    assert r.status_code == 200
    stages = {}
    for metric in r.headers["Server-Timing"].split(","):
        name, dur = metric.strip().split(";")
        assert dur.startswith("dur=")
        stages[name] = float(dur[4:])
    assert list(stages) == ["read", "decode", "queue", "compute", "encode", "total"]
    assert all(v >= 0 for v in stages.values())
    assert stages["decode"] <= stages["read"] <= stages["total"]
    assert stages["read"] + stages["queue"] + stages["compute"] + stages["encode"] <= stages["total"] + 0.004
    # TF Serving and Clipper answers carry it too; errors do not.
    r = requests.post(f"http://{server.address}/v1/models/titanic:predict", json={"instances": [TITANIC_ROW]})
    assert "decode;dur=" in r.headers["Server-Timing"]
    r = requests.post(f"http://{server.address}/v2/models/titanic/infer", data=b"{")
    assert r.status_code == 400 and "Server-Timing" not in r.headers


def test_clipper_grid(server, tmp_path):
    stdout, report, rows, svg = scenario(server, "clipper-grid", tmp_path)
    labels = [c["label"] for c in report["cells"]]
    assert labels == ["784 x 1", "784 x 4", "4096 x 1", "4096 x 4"]
    for cell in report["cells"]:
        (m,) = cell["measurements"]
        check_measurement(m)
        assert m["protocol"] == "v2-json" and m["load"] == {"mode": "closed", "connections": 1}
        # Request bytes grow with the batch: ~20 bytes per long float.
        size, batch = map(int, cell["label"].split(" x "))
        body = m["summary"]["mb_out_per_s"] * 1e6 / m["summary"]["throughput"]
        assert 15 * size * batch < body < 25 * size * batch + 500
        assert "decode" in m["summary"]["server"]
    check_csv(rows, report)
    assert "1.41 ms parse" not in stdout  # the 262144 cells are not in the short grid
    assert "decode mean" in stdout and "published (RapidJSON)" in stdout


def test_go_ml_ladder(server, tmp_path):
    stdout, report, rows, _ = scenario(server, "go-ml-ladder", tmp_path)
    rungs = {c["label"]: c for c in report["cells"]}
    assert set(rungs) == {
        "uds v2-raw", "uds v2-binary", "uds v2-json", "uds grpc", "tcp grpc",
        "tcp v2-raw", "tcp v2-binary", "tcp v2-json", "tcp tf-serving", "tcp clipper",
    }
    for label, cell in rungs.items():
        assert "not_available" not in cell, label
        (m,) = cell["measurements"]
        check_measurement(m)
        assert m["transport"] == label.split()[0]
        # Every rung's server reports its stages, gRPC's in its metadata.
        assert {"decode", "compute", "total"} <= set(m["summary"]["server"]), label
    # The in-process rungs were measured (how they compare is the
    # benchmark's to report, not a test's to bound).
    extra = dict(report["extra"])
    assert set(extra) == {"in-process: trees", "in-process: model"}
    assert all(0 < ns < float("inf") for ns in extra.values()), extra
    assert "243 µs" in stdout and "367 µs" in stdout and "491 ns" in stdout
    check_csv(rows, report)


def test_go_ml_ladder_reports_missing_transports(server, tmp_path):
    out = bench("scenario", "go-ml-ladder", "--short", "--http", f"http://{server.address}", "--grpc", "off", "--models", MODELS)
    assert out.returncode == 0, out.stderr
    assert "not available: give the server --http-uds PATH" in out.stdout
    assert "not available: --grpc off" in out.stdout


def test_small_json(server, tmp_path):
    stdout, report, rows, _ = scenario(server, "small-json", tmp_path)
    assert [c["label"] for c in report["cells"]] == ["16 connections", "64 connections"]
    for cell in report["cells"]:
        (m,) = cell["measurements"]
        check_measurement(m)
        assert m["protocol"] == "get"
        assert m["summary"]["send"] is not None and m["summary"]["wait"] is not None
    check_csv(rows, report)


def test_streaming_body(server, tmp_path):
    stdout, report, rows, _ = scenario(server, "streaming-body", tmp_path)
    (cell,) = report["cells"]
    (m,) = cell["measurements"]
    check_measurement(m)
    s = m["summary"]
    # 1 MB at 100 MB/s: the body took ~9.4 ms to send (its last 64 KiB piece
    # leaves at 0.93 MB / 100 MB/s), as paced.
    assert s["send"]["min"] >= 8.0, s["send"]
    assert s["answered"] == 2
    baseline = dict(report["extra"])["1 MB: serde_json buffered parse ms"]
    assert baseline > 0
    check_csv(rows, report)


def test_transcoding(server, tmp_path):
    stdout, report, rows, _ = scenario(server, "transcoding", tmp_path)
    cells = {c["label"]: c for c in report["cells"]}
    for label, cell in cells.items():
        if "not_available" in cell:
            assert cell["not_available"].startswith("not available: "), label
            continue
        (m,) = cell["measurements"]
        check_measurement(m)
        assert m["protocol"] == ("grpc" if label.endswith("(grpc)") else "v2-json")
    assert "not_available" in cells["nested layers 31"]
    assert "not_available" in cells["message segments 16 (16384 floats) (grpc)"]
    assert cells["value type BOOL (1024) (grpc)"]["measurements"][0]["summary"]["answered"] > 0
    check_csv(rows, report)


def test_a_run_counts_every_request_it_sends(server, tmp_path):
    out_json = tmp_path / "run.json"
    out = bench(
        f"http://{server.address}", "--compare", f"unix:{server.http_sock}",
        "--protocol", "v2-binary", "-c", "2", "--requests", "300",
        "--warmup", "0", "--window", "5", "--max-windows", "1", "--min-windows", "1",
        "--json", out_json,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out_json.read_text())
    first, second = report["measurements"]
    for m in (first, second):
        check_measurement(m)
        assert m["summary"]["answered"] == 300
    assert second["transport"] == "uds"
    assert "ratios to" in out.stdout


def test_an_open_loop_sweep_stops_at_saturation(server, tmp_path):
    out_json = tmp_path / "sweep.json"
    out = bench(
        f"http://{server.address}", "--sweep-rates", "200,400,1000000",
        "-c", "4", "--warmup", "0", "--window", "0.3", "--max-windows", "1", "--min-windows", "1",
        "--json", out_json,
    )
    assert out.returncode == 0, out.stderr
    sweep = json.loads(out_json.read_text())["sweep"]
    assert [p["offered"] for p in sweep] == [200, 400, 1000000]
    assert sweep[0]["saturated"] is None
    assert sweep[-1]["saturated"].startswith("achieved")
    assert "saturated at 1000000" in out.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["http://10.9.8.7:8000"], "--allow-remote"),
        (["grpc://127.0.0.1:1", "--protocol", "v2-json"], "needs an http:// or unix: one"),
        (["http://127.0.0.1:1", "--protocol", "grpc"], "needs a grpc:// one"),
        (["127.0.0.1:8000"], "unknown scheme"),
        (["http://127.0.0.1:1", "--requests", "5"], "cannot connect to http://127.0.0.1:1"),
        (["http://127.0.0.1:1", "--body", "fp32:3"], "is not BATCHxWIDTH"),
        (["http://127.0.0.1:1", "--body", "fp32:100000x100000"], "values a generated body may hold"),
        (["http://127.0.0.1:1", "--body", "fp32:18446744073709551615x2"], "values a generated body may hold"),
        (["http://127.0.0.1:1", "--rate", "inf"], "--rate must be a positive, finite number"),
        (["http://127.0.0.1:1", "--sweep-rates", "100,0"], "--sweep-rates must be positive"),
    ],
)
def test_bad_targets_and_arguments_are_refused(args, says):
    out = bench(*args, timeout=30)
    assert out.returncode != 0
    assert says in out.stderr, out.stderr


def test_the_sink_takes_every_request_the_client_sends(tmp_path):
    # `sink:` answers inside the bench process; with chunked bodies too.
    out_json = tmp_path / "sink.json"
    out = bench(
        "sink:", "--body", "fp32:4x256", "--segments", "16", "-c", "4", "--requests", "400",
        "--warmup", "0", "--window", "5", "--max-windows", "1", "--min-windows", "1", "--json", out_json,
    )
    assert out.returncode == 0, out.stderr
    (m,) = json.loads(out_json.read_text())["measurements"]
    check_measurement(m)
    assert m["summary"]["answered"] == 400
    assert m["target"] == "sink: (the client alone)"




def test_batching(server, tmp_path):
    """The batching scenario against the delay models it names (those of
    benchmarks/scripts/batching.sh), with no upstream: the curve's cells
    are measured, the batch sizes come from Server-Timing, and the cells
    it cannot measure say why."""
    models = tmp_path / "models"
    tables = {
        "none": "",
        "fixed": "[batching]\nmax_batch_size = 16\npreferred_batch_sizes = [16]\nmax_queue_delay_us = 100000\n",
        "dynamic": "[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 2000\n",
        "adaptive": '[batching]\nmax_batch_size = 64\nmode = "adaptive"\nslo_ms = 20\n',
    }
    for mode, table in tables.items():
        (models / f"delay_{mode}").mkdir(parents=True)
        (models / f"delay_{mode}" / "config.toml").write_text(identity_config("delay_ms = 10", table))
    (models / "titanic").mkdir()
    config = (MODELS / "titanic" / "config.toml").read_text()
    (models / "titanic" / "config.toml").write_text(config + "\n[batching]\nmax_batch_size = 64\n")
    (models / "titanic" / "model.json").write_bytes((MODELS / "titanic" / "model.json").read_bytes())
    batching = RunningServer(models, grpc="off")
    try:
        stdout, report, rows, _ = scenario_with(
            "batching", tmp_path, "--http", f"http://{batching.address}", "--grpc", "off",
            "--compare", f"http://{server.address}",
        )
    finally:
        batching.stop()
    cells = {c["label"]: c for c in report["cells"]}
    for mode in tables:
        for rate in (100, 400):
            (m,) = cells[f"delay_{mode} at {rate}/s"]["measurements"]
            assert m["load"] == {"mode": "open", "rate": rate, "arrival": "poisson", "connections": 1024}
            s = m["summary"]
            assert s["answered"] > 0
            check_dist(s["latency"])
            if mode == "none":
                assert "batch" not in s
            else:
                assert s["batch"]["count"] == s["answered"]
                assert 1 <= s["batch"]["p50"] <= s["batch"]["max"] <= 64
    # 4x the capacity: the dynamic batcher's batches hold several requests.
    assert cells["delay_dynamic at 400/s"]["measurements"][0]["summary"]["batch"]["p50"] >= 2
    # No upstream here: those cells fail, and the table says so.
    (m,) = cells["upstream_alone: one xgb row over gRPC upstream, 64 connections"]["measurements"]
    assert m["summary"]["answered"] == 0
    assert "n/a: failed" in stdout and "batching.sh serves upstream_*" in stdout
    plain, batched = cells["titanic, 1 row, 1 connection: without vs with [batching]"]["measurements"]
    assert plain["summary"]["answered"] > 0 and batched["summary"]["answered"] > 0
    assert "titanic with [batching]: adds <= 10 µs p50" in stdout
    assert "dynamic at 4x load: >= 3.5x unbatched throughput" in stdout
    check_csv(rows, report)
