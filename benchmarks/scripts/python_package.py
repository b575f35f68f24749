#!/usr/bin/env python3
"""The `wirespeed` Python package against what Python users run today, side
by side in one run, each measurement interleaved round by round so that all
see the same background load; medians reported.

    scripts/build-wheel --release
    .venv/bin/python benchmarks/scripts/python_package.py decode   # decode_request vs orjson/json + numpy
    .venv/bin/python benchmarks/scripts/python_package.py trees    # trees.predict vs xgboost inplace_predict, 1 thread
    .venv/bin/python benchmarks/scripts/python_package.py client   # one Titanic row: wirespeed.client vs tritonclient

decode: the refbench bodies (../shared/refbench/gen_bodies.py, written to
a temporary folder), wall time per call (a body of 256 KiB or more is
decoded on every core; `--threads 1` keeps it on the calling thread); MB/s
of JSON text.

trees: 300-tree depth-8 binary models trained as trees_batch.py's (hist,
64 bins) and with xgboost's default tree method, and the bundled Titanic
model; xgboost with nthread=1, wirespeed with WIRESPEED_THREADS=1;
batches of 1, 64, 1024 and 10,000 rows with 10 % NaN (`--nan`).

client: one release `wirespeed serve` on models/ and KServe's ModelServer
serving the Titanic model (tests/upstream/kserve_models.py); each client
sends one row at a time (the answer awaited before the next), and the p50
and p99 of each are compared: wirespeed.client (HTTP binary, HTTP JSON, a
Unix socket) and tritonclient (HTTP binary, HTTP JSON, gRPC).
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REFBENCH = ROOT.parent / "shared" / "refbench"


def interleaved(methods, rounds, min_ns, clock=time.thread_time_ns):
    """Per-call time of each method: a warm-up, a calibration, then
    `rounds` rounds of one sample each, rotating the start. Median ns."""
    names = list(methods)
    iters, samples = {}, {k: [] for k in names}
    for k in names:
        methods[k]()
        t = clock()
        methods[k]()
        iters[k] = max(1, min(100_000, -(-int(min_ns) // max(1, clock() - t))))
    for r in range(rounds):
        for j in range(len(names)):
            k = names[(r + j) % len(names)]
            f, n = methods[k], iters[k]
            t = clock()
            for _ in range(n):
                f()
            samples[k].append((clock() - t) / n)
    return {k: statistics.median(v) for k, v in samples.items()}


def decode(args):
    if args.threads:
        os.environ["WIRESPEED_THREADS"] = str(args.threads)
    import orjson

    import wirespeed

    bodies = Path(tempfile.mkdtemp(prefix="wirespeed-bodies-"))
    subprocess.run([sys.executable, str(REFBENCH / "gen_bodies.py"), "--out", str(bodies),
                    "--n", "784", "16384", "262144", "--b", "1", "32"], check=True, stdout=subprocess.DEVNULL)
    print("| body | bytes | wirespeed MB/s | orjson+numpy MB/s | json+numpy MB/s | vs orjson | vs json |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    # The 42.5 MB request of kserve_raw.py and no_regression.sh: float32
    # values as json.dumps writes numpy's tolist(), 8 rows of 262144.
    x = np.random.default_rng(0).random((8, 262144), dtype=np.float32)
    (bodies / "request_b8_n262144.json").write_bytes(json.dumps(
        {"inputs": [{"name": "x", "shape": [8, 262144], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}).encode())
    cases = [(style, b, n) for style in ("long", "short")
             for b, n in ((1, 784), (1, 16384), (32, 16384), (1, 262144), (32, 262144))]
    for style, b, n in cases + [("request", 8, 262144)]:
        body = (bodies / f"{style}_b{b}_n{n}.json").read_bytes()
        want = np.asarray(json.loads(body)["inputs"][0]["data"], dtype=np.float32).reshape(b, n)
        got = wirespeed.decode_request(body).inputs["x"]
        # json.loads + numpy rounds twice (text to double, double to float32):
        # only the short bodies and the request's exact float32 values agree.
        assert got.tobytes() == want.tobytes() or style == "long", "decoded values differ"
        # Wall time: a large body is decoded on the pool's threads too.
        t = interleaved({
            "wirespeed": lambda: wirespeed.decode_request(body).inputs["x"],
            "orjson": lambda: np.asarray(orjson.loads(body)["inputs"][0]["data"], dtype=np.float32).reshape(b, n),
            "json": lambda: np.asarray(json.loads(body)["inputs"][0]["data"], dtype=np.float32).reshape(b, n),
        }, args.rounds, args.min_ms * 1e6, clock=time.perf_counter_ns)
        mbs = {k: len(body) / v * 1e3 for k, v in t.items()}
        print(f"| {style}_b{b}_n{n} | {len(body):,} | {mbs['wirespeed']:.0f} | {mbs['orjson']:.0f} | "
              f"{mbs['json']:.0f} | {t['orjson'] / t['wirespeed']:.1f}x | {t['json'] / t['wirespeed']:.1f}x |")


def trees(args):
    os.environ["WIRESPEED_THREADS"] = "1"
    import xgboost

    import wirespeed

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 20)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) * np.nan_to_num(x[:, 2])
         + rng.normal(scale=0.5, size=len(x)) > 0).astype(np.float32)
    tmp = Path(tempfile.mkdtemp(prefix="wirespeed-trees-"))
    models = {}
    # trees_batch.py's model (hist, 64 bins), and xgboost's defaults.
    for label, params in (("hist, 64 bins", {"tree_method": "hist", "max_bin": 64}), ("defaults", {})):
        booster = xgboost.train({"objective": "binary:logistic", "max_depth": 8, "nthread": 2, "eta": 0.05, **params},
                                xgboost.DMatrix(x, y), num_boost_round=args.trees)
        path = tmp / f"{len(models)}.json"
        booster.save_model(path)
        models[f"{args.trees} trees, depth 8, {label}"] = path
    models["Titanic (models/titanic)"] = ROOT / "models" / "titanic" / "model.json"
    print("| model | rows | wirespeed µs | xgboost µs | ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, path in models.items():
        reference = xgboost.Booster(model_file=str(path))
        reference.set_param({"nthread": 1})
        ours = wirespeed.trees.load(path)
        nf = ours.num_features
        for rows in (1, 64, 1024, 10_000):
            batch = rng.normal(size=(rows, nf)).astype(np.float32)
            batch[rng.random(batch.shape) < args.nan] = np.nan
            assert np.array_equal(ours.predict(batch), reference.inplace_predict(batch))
            t = interleaved({
                "wirespeed": lambda: ours.predict(batch),
                "xgboost": lambda: reference.inplace_predict(batch),
            }, args.rounds, args.min_ms * 1e6)
            print(f"| {label} | {rows:,} | {t['wirespeed'] / 1e3:.1f} | {t['xgboost'] / 1e3:.1f} | "
                  f"{t['xgboost'] / t['wirespeed']:.1f}x |")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, process):
    import requests

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{url}: the server exited")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    sys.exit(f"{url} never became ready")


def raw_socket(port, row):
    """The same binary request as prepared bytes on a plain socket, the
    answer read by its Content-Length: what any client adds is above this."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 48}}],
                       "outputs": [{"name": "probability", "parameters": {"binary_data": True}}]}).encode()
    body = head + row.tobytes()
    request = (f"POST /v2/models/titanic/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
               f"Inference-Header-Content-Length: {len(head)}\r\n\r\n").encode() + body

    def call():
        conn.sendall(request)
        data = conn.recv(65536)
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(rest) < length:
            rest += conn.recv(65536)
        return rest

    return call


def client(args):
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp

    import wirespeed.client.http as whttp

    binary = ROOT / "target" / "release" / "wirespeed"
    tmp = Path(tempfile.mkdtemp(prefix="wirespeed-client-"))
    sock = tmp / "http.sock"
    http, grpc = free_port(), free_port()
    servers = [subprocess.Popen(
        [str(binary), "serve", "--models", str(ROOT / "models"), "--http", f"127.0.0.1:{http}",
         "--grpc", f"127.0.0.1:{grpc}", "--http-uds", str(sock), "--metrics", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "WIRESPEED_THREADS": "1"})]
    wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", servers[0])
    kserve_http, kserve_grpc = free_port(), free_port()
    cancels = tmp / "cancels.log"
    servers.append(subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "upstream" / "kserve_models.py"),
         str(ROOT / "models" / "titanic" / "model.json"), str(cancels),
         "--http_port", str(kserve_http), "--grpc_port", str(kserve_grpc)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    wait_ready(f"http://127.0.0.1:{kserve_http}/v2/models/xgb/ready", servers[1])
    try:
        row = np.array([[1.0, 0.0, 1.0, 0.2875, 0.33333334, 0.0, 0.322667, 0.0, 1.0, 0.0, 0.0, 0.0]],
                       dtype=np.float32)

        def caller(module, url, model, input_name, output, binary_data, grpc=False):
            c = module.InferenceServerClient(url)
            inp = module.InferInput(input_name, [1, 12], "FP32")
            if grpc:
                inp.set_data_from_numpy(row)
                outs = [module.InferRequestedOutput(output)]
            else:
                inp.set_data_from_numpy(row, binary_data=binary_data)
                outs = [module.InferRequestedOutput(output, binary_data=binary_data)]
            return lambda: c.infer(model, [inp], outputs=outs).as_numpy(output)

        targets = {
            "raw socket (the floor: bytes out, the answer read, nothing decoded)": raw_socket(http, row),
            "wirespeed.client HTTP binary": caller(whttp, f"127.0.0.1:{http}", "titanic", "features", "probability", True),
            "wirespeed.client HTTP JSON": caller(whttp, f"127.0.0.1:{http}", "titanic", "features", "probability", False),
            "wirespeed.client Unix socket": caller(whttp, f"unix://{sock}", "titanic", "features", "probability", True),
            "tritonclient HTTP binary": caller(thttp, f"127.0.0.1:{http}", "titanic", "features", "probability", True),
            "tritonclient HTTP JSON": caller(thttp, f"127.0.0.1:{http}", "titanic", "features", "probability", False),
            "tritonclient gRPC": caller(tgrpc, f"127.0.0.1:{grpc}", "titanic", "features", "probability", True, grpc=True),
            "KServe: wirespeed.client HTTP binary": caller(whttp, f"127.0.0.1:{kserve_http}", "xgb", "x", "predict", True),
            "KServe: tritonclient HTTP binary": caller(thttp, f"127.0.0.1:{kserve_http}", "xgb", "x", "predict", True),
        }
        for f in targets.values():
            for _ in range(200):
                f()
        latencies = {k: [] for k in targets}
        names = list(targets)
        for r in range(args.rounds):
            for j in range(len(names)):
                k = names[(r + j) % len(names)]
                f, lat = targets[k], latencies[k]
                for _ in range(args.calls):
                    t = time.perf_counter_ns()
                    f()
                    lat.append(time.perf_counter_ns() - t)
        print("| client | p50 ms | p99 ms |")
        print("|---|---:|---:|")
        p50 = {}
        for k, lat in latencies.items():
            lat.sort()
            p50[k] = lat[len(lat) // 2] / 1e6
            print(f"| {k} | {p50[k]:.3f} | {lat[len(lat) * 99 // 100] / 1e6:.3f} |")
        print()
        for kind in ("HTTP binary", "HTTP JSON"):
            print(f"{kind}: tritonclient / wirespeed.client = "
                  f"{p50[f'tritonclient {kind}'] / p50[f'wirespeed.client {kind}']:.1f}x")
        print(f"gRPC tritonclient / wirespeed.client HTTP binary = "
              f"{p50['tritonclient gRPC'] / p50['wirespeed.client HTTP binary']:.1f}x")
        floor = p50[next(iter(p50))]
        print(f"wirespeed.client HTTP binary above the raw socket: {(p50['wirespeed.client HTTP binary'] - floor) * 1e3:.0f} µs")
        print(f"KServe: tritonclient / wirespeed.client = "
              f"{p50['KServe: tritonclient HTTP binary'] / p50['KServe: wirespeed.client HTTP binary']:.2f}x")
    finally:
        for s in servers:
            s.terminate()
            s.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["decode", "trees", "client"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-ms", type=float, default=30, help="decode, trees: length of one sample")
    parser.add_argument("--calls", type=int, default=300, help="client: calls per target per round")
    parser.add_argument("--trees", type=int, default=300, help="trees: the models' trees")
    parser.add_argument("--nan", type=float, default=0.1, help="trees: the share of missing values in the rows")
    parser.add_argument("--threads", type=int, default=0,
                        help="decode: WIRESPEED_THREADS (1: the calling thread alone; default: one per core)")
    args = parser.parse_args()
    {"decode": decode, "trees": trees, "client": client}[args.what](args)


if __name__ == "__main__":
    main()
