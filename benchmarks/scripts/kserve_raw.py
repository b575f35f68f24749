#!/usr/bin/env python3
"""The 42.5 MB request: wirespeed reading it as V2 JSON against KServe
reading the same tensor as raw binary gRPC, side by side in one run.

Issue 55's target: wirespeed's JSON request at most the time KServe's
Python ModelServer takes for the same 8 x 262144 FP32 tensor sent the
cheapest way KServe reads it (gRPC, `raw_input_contents`, tritonclient's
`set_data_from_numpy`). Both servers run a Python row sum on it: KServe a
`kserve.Model` (written here, loopback only, gRPC messages up to
256 MiB), wirespeed a Triton Python model (`triton.py`'s `rowsum`, on the
interpreter of .venv-triton as there). Also measured, as context:
wirespeed given the raw gRPC request too, and KServe given the JSON.
Rounds interleaved, the order alternating; per round each case's median
of `--times` requests, one client, a fresh connection each; the table
gives the medians of the rounds and, for the target, the ratio.

Usage (from the repository root, after `cargo build --release -p
wirespeed` and ./scripts/test's venvs):
    .venv/bin/python benchmarks/scripts/kserve_raw.py [--rounds 5] [--times 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, free_port, kserve_on_loopback, post_json, wait_ready  # noqa: E402

ROWS, COLUMNS = 8, 262144


def serve_kserve(http_port, grpc_port):
    """KServe's ModelServer with the row sum, bound to loopback only."""
    # Its flags, read when `kserve` is imported.
    sys.argv = [sys.argv[0], "--http_port", str(http_port), "--grpc_port", str(grpc_port),
                "--grpc_max_receive_message_length", str(256 << 20),
                "--grpc_max_send_message_length", str(256 << 20), "--enable_latency_logging", "False"]
    kserve_on_loopback()
    import kserve
    from kserve import InferOutput, InferRequest, InferResponse

    class RowSum(kserve.Model):
        def __init__(self):
            super().__init__("rowsum")
            self.ready = True

        def predict(self, payload: InferRequest, headers=None) -> InferResponse:
            s = payload.inputs[0].as_numpy().sum(axis=1).astype(np.float32)
            out = InferOutput(name="s", shape=list(s.shape), datatype="FP32")
            out.set_data_from_numpy(s, binary_data=payload.use_binary_outputs)
            return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id or "0")

    kserve.ModelServer().start([RowSum()])


def json_request(port, body, times):
    took, answer = post_json(port, "/v2/models/rowsum/infer", body, times)
    return took, json.loads(answer)["outputs"][0]["data"]


def raw_grpc_request(port, x, times):
    import tritonclient.grpc as grpcclient

    took = []
    for _ in range(times):
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
        started = time.perf_counter()
        tensor.set_data_from_numpy(x)
        result = client.infer("rowsum", [tensor])
        s = result.as_numpy("s")
        took.append((time.perf_counter() - started) * 1000)
        client.close()
    return statistics.median(took), s.tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--wirespeed", default=str(ROOT / "target" / "release" / "wirespeed"))
    args = parser.parse_args()

    import triton

    scratch = Path(tempfile.mkdtemp(prefix="kserve_raw_"))
    folder = scratch / "models" / "rowsum"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'name: "rowsum"\nbackend: "python"\nmax_batch_size: 0\n'
        f'input [ {triton.tensor("x", "TYPE_FP32", [-1, -1])} ]\n'
        f'output [ {triton.tensor("s", "TYPE_FP32", [-1])} ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n")
    (folder / "1" / "model.py").write_text(triton.ROWSUM)
    x = np.random.default_rng(0).random((ROWS, COLUMNS), dtype=np.float32)
    # As Python's json writes a numpy array's values (`tolist()`): 42.5 MB.
    body = json.dumps({"inputs": [{"name": "x", "shape": [ROWS, COLUMNS], "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode()
    expected = x.sum(axis=1)

    log = open(scratch / "servers.log", "w")
    kserve_http, kserve_grpc = free_port(), free_port()
    kserve = subprocess.Popen([sys.executable, __file__, "--serve-kserve", str(kserve_http), str(kserve_grpc)],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    ws_http, ws_grpc = free_port(), free_port()
    wirespeed = subprocess.Popen(
        [args.wirespeed, "serve", "--models", str(scratch / "models"), "--http", f"127.0.0.1:{ws_http}",
         "--grpc", f"127.0.0.1:{ws_grpc}", "--metrics", "off"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env=dict(os.environ, WIRESPEED_PYTHON=str(ROOT / ".venv-triton" / "bin" / "python")))
    try:
        wait_ready(f"http://127.0.0.1:{kserve_http}/v2/models/rowsum/ready", 120)
        wait_ready(f"http://127.0.0.1:{ws_http}/v2/models/rowsum/ready", 120)
        print(f"{len(body) / 1e6:.1f} MB of JSON, {x.nbytes / 1e6:.1f} MB raw", file=sys.stderr)
        cases = {
            "wirespeed, V2 JSON": lambda: json_request(ws_http, body, args.times),
            "KServe, raw binary gRPC": lambda: raw_grpc_request(kserve_grpc, x, args.times),
            "wirespeed, raw binary gRPC": lambda: raw_grpc_request(ws_grpc, x, args.times),
            "KServe, V2 JSON": lambda: json_request(kserve_http, body, 1),
        }
        figures = {name: [] for name in cases}
        for round in range(args.rounds):
            order = list(cases) if round % 2 == 0 else list(reversed(cases))
            for name in order:
                took, answer = cases[name]()
                np.testing.assert_allclose(np.array(answer, dtype=np.float32), expected, rtol=1e-4)
                figures[name].append(took)
                print(f"round {round + 1} {name:28} {took:9.1f} ms", file=sys.stderr, flush=True)
    finally:
        for process in (kserve, wirespeed):
            try:
                os.killpg(process.pid, 15)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, 9)

    medians = {name: statistics.median(v) for name, v in figures.items()}
    print(f"\n{args.rounds} rounds x {args.times} requests (KServe's JSON: 1 a round); medians of the rounds' medians")
    print("| case | p50 | against KServe's raw binary gRPC |")
    print("|---|---|---|")
    for name, value in medians.items():
        print(f"| {name} | {value:.1f} ms | {value / medians['KServe, raw binary gRPC']:.2f}x the time |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-kserve":
        serve_kserve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
