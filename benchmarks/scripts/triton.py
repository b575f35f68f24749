"""wirespeed against the real Triton 2.51, side by side in one run.

Both servers up at once on the same repository (written here): a Python
model with the contract of Triton's python_backend `add_sub` example, an
ensemble of two `add_sub` steps, a Python identity of 1 MB FP32 tensors,
a decoupled Python model that streams tokens, and a Python row-sum model
for the 42.5 MB V2 JSON request. Triton is the `tritonserver` that the
`nvidia-pytriton` wheel carries (.venv-triton, as scripts/test makes it);
wirespeed is target/release/wirespeed (or `--wirespeed PATH`).

Each round measures every workload on both servers, the order of the
servers alternating round by round; the table gives the medians and the
ratio wirespeed / Triton (throughputs; for times, Triton / wirespeed, so
above 1 is wirespeed ahead everywhere):

  meta      GET /v2, wrk -c64                             req/s
  model     GET /v2/models/add_sub, wrk -c64              req/s
  py16      add_sub, V2 JSON, wrk -c16                    req/s
  py1       add_sub, V2 JSON, wrk -c1                     p50 ms
  ens16     the ensemble, V2 JSON, wrk -c16               req/s
  grpc1     add_sub, gRPC, perf_analyzer concurrency 1    p50 ms
  grpc16    add_sub, gRPC, perf_analyzer concurrency 16   infer/s
  mb4       1 MB tensors in and out, gRPC, concurrency 4  infer/s, and server CPU us/inference
  stream    decoupled, one request -> N tokens (gRPC)     events/s, and server CPU us/event
  big       42.5 MB V2 JSON (8 x 262144 FP32) to the row-sum model, p50 ms

then each server's resident memory (its whole process tree: Triton's
Python stubs, wirespeed's workers) after loading and after the rounds.
`--neighbour` keeps one core busy with a CPU-bound process meanwhile
(both servers under the same neighbour).

Usage (from the repository root, after `cargo build --release -p wirespeed`
and ./scripts/test's venvs and tools):
    .venv/bin/python benchmarks/scripts/triton.py [--rounds 3] [--seconds 8] [--neighbour] [--only py16,ens16] [--wirespeed OLD --wirespeed NEW]
"""

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from harness import ROOT, free_port, post_json, tree_cpu_seconds, tree_rss_mib, wait_ready, wrk

TOKENS = 10000

ADD_SUB = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return answers
'''

IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''

ROWSUM = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("s", pb_utils.get_input_tensor_by_name(r, "x").as_numpy().sum(axis=1))])
            for r in requests]
'''

TOKENS_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TOKEN", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def tensor(name, datatype, dims):
    return f'{{ name: "{name}" data_type: {datatype} dims: [ {", ".join(map(str, dims))} ] }}'


def repository(root: Path):
    """The models both servers serve."""
    def model(name, config, code=None):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
        if code:
            (root / name / "1" / "model.py").write_text(code)

    one = "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    model("add_sub", 'backend: "python"\n'
          f'input [ {tensor("INPUT0", "TYPE_FP32", [4])}, {tensor("INPUT1", "TYPE_FP32", [4])} ]\n'
          f'output [ {tensor("OUTPUT0", "TYPE_FP32", [4])}, {tensor("OUTPUT1", "TYPE_FP32", [4])} ]\n' + one, ADD_SUB)
    model("ens", 'platform: "ensemble"\nmax_batch_size: 0\n'
          f'input [ {tensor("A", "TYPE_FP32", [4])}, {tensor("B", "TYPE_FP32", [4])} ]\n'
          f'output [ {tensor("S", "TYPE_FP32", [4])} ]\n'
          'ensemble_scheduling { step [\n'
          '  { model_name: "add_sub" model_version: -1 input_map { key: "INPUT0" value: "A" }\n'
          '    input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "s1" }\n'
          '    output_map { key: "OUTPUT1" value: "d1" } },\n'
          '  { model_name: "add_sub" model_version: -1 input_map { key: "INPUT0" value: "s1" }\n'
          '    input_map { key: "INPUT1" value: "d1" } output_map { key: "OUTPUT0" value: "S" } } ] }\n')
    model("identity_1mb", 'backend: "python"\n'
          f'input [ {tensor("IN", "TYPE_FP32", [262144])} ]\noutput [ {tensor("OUT", "TYPE_FP32", [262144])} ]\n' + one,
          IDENTITY)
    model("rowsum", 'backend: "python"\nmax_batch_size: 0\n'
          f'input [ {tensor("x", "TYPE_FP32", [-1, -1])} ]\noutput [ {tensor("s", "TYPE_FP32", [-1])} ]\n' + one,
          ROWSUM)
    model("tokens", 'backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
          f'input [ {tensor("N", "TYPE_INT32", [1])} ]\noutput [ {tensor("TOKEN", "TYPE_INT32", [1])} ]\n' + one,
          TOKENS_MODEL)


class Server:
    def __init__(self, name, command, env, http, grpc, log, wait=True):
        self.name, self.http, self.grpc = name, http, grpc
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        if not wait:
            return
        wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", 180)
        for model in ("add_sub", "ens", "identity_1mb", "rowsum", "tokens"):
            wait_ready(f"http://127.0.0.1:{http}/v2/models/{model}/ready", 60)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.http}"

    def stop(self):
        try:
            os.killpg(self.process.pid, 15)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, 9)


def start_triton(repo, log, wait=True):
    # The tests' own way to the wheel's tritonserver, made ready to run
    # Python models (tests/triton_peer.py).
    sys.path.insert(0, str(ROOT / "tests"))
    from triton_peer import VENV as venv, triton_home

    home = triton_home()
    http, grpc = free_port(), free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=str(home.parent.parent / "nvidia_pytriton.libs"),
               PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    command = [str(home / "bin" / "tritonserver"), f"--model-repository={repo}",
               f"--backend-directory={home / 'backends'}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
               f"--http-port={http}", f"--grpc-port={grpc}", "--allow-metrics=false", "--log-verbose=0"]
    return Server("triton", command, env, http, grpc, log, wait)


def start_wirespeed(binary, repo, log):
    http, grpc = free_port(), free_port()
    env = dict(os.environ, WIRESPEED_PYTHON=str(ROOT / ".venv-triton" / "bin" / "python"))
    command = [str(binary), "serve", "--models", str(repo), "--http", f"127.0.0.1:{http}",
               "--grpc", f"127.0.0.1:{grpc}", "--metrics", "off"]
    return Server("wirespeed", command, env, http, grpc, log)


def perf_analyzer(server, model, concurrency, seconds):
    """(infer/s, p50 ms) of perf_analyzer over gRPC at `concurrency`."""
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(list(spec.submodule_search_locations)[0]) / "lib"))
    done = subprocess.run(
        [str(ROOT / ".tools" / "perf_analyzer"), "-m", model, "-u", f"127.0.0.1:{server.grpc}", "-i", "grpc",
         "--concurrency-range", str(concurrency), "-p", str(seconds * 1000 // 2), "--max-trials", "4",
         "--stability-percentage", "100"],
        capture_output=True, text=True, env=env, timeout=seconds * 10 + 60)
    out = done.stdout
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", out)
    p50 = re.search(r"p50 latency: (\d+) usec", out)
    if done.returncode != 0 or not throughput or not p50:
        sys.exit(f"perf_analyzer against {server.name}:\n{out}\n{done.stderr}")
    return float(throughput.group(1)), int(p50.group(1)) / 1000


def stream(server, count):
    """(events/s, server CPU us per event) of one decoupled request that
    streams `count` tokens, read through tritonclient's gRPC stream."""
    import tritonclient.grpc as grpcclient

    got, finished = [0], threading.Event()

    def callback(result, error):
        if error is not None:
            print(f"{server.name}: stream error {error}", file=sys.stderr)
            finished.set()
            return
        if result.get_response().parameters["triton_final_response"].bool_param:
            finished.set()
        elif result.get_response().outputs:
            got[0] += 1

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    client.start_stream(callback=callback)
    n = grpcclient.InferInput("N", [1], "INT32")
    n.set_data_from_numpy(np.array([count], np.int32))
    cpu = tree_cpu_seconds(server.process.pid)
    started = time.perf_counter()
    client.async_stream_infer("tokens", [n], enable_empty_final_response=True)
    finished.wait(300)
    wall = time.perf_counter() - started
    cpu = tree_cpu_seconds(server.process.pid) - cpu
    client.stop_stream()
    client.close()
    if got[0] != count:
        sys.exit(f"{server.name}: {got[0]} tokens of {count}")
    return count / wall, cpu / count * 1e6


def inference_count(server, model):
    """How many inferences of `model` the server has answered, from its statistics."""
    with urllib.request.urlopen(f"{server.url}/v2/models/{model}/stats") as answer:
        return json.load(answer)["model_stats"][0]["inference_stats"]["success"]["count"]


def big_request(server, body, times=5):
    """p50 ms of the 42.5 MB V2 JSON request to the row-sum model."""
    return post_json(server.http, "/v2/models/rowsum/infer", body, times)[0]


WORKLOADS = ["meta", "model", "py16", "py1", "ens16", "grpc1", "grpc16", "mb4", "stream", "big"]
# Which are times (lower is better).
TIMES = {"py1", "grpc1", "big"}


def measure(workload, server, files, seconds):
    if workload == "meta":
        return wrk(server.url, "/v2", None, 64, seconds)[0]
    if workload == "model":
        return wrk(server.url, "/v2/models/add_sub", None, 64, seconds)[0]
    if workload == "py16":
        return wrk(server.url, "/v2/models/add_sub/infer", files["add_sub"], 16, seconds)[0]
    if workload == "py1":
        return wrk(server.url, "/v2/models/add_sub/infer", files["add_sub"], 1, seconds)[1]
    if workload == "ens16":
        return wrk(server.url, "/v2/models/ens/infer", files["ens"], 16, seconds)[0]
    if workload == "grpc1":
        return perf_analyzer(server, "add_sub", 1, seconds)[1]
    if workload == "grpc16":
        return perf_analyzer(server, "add_sub", 16, seconds)[0]
    if workload == "mb4":
        # perf_analyzer shares the two cores and takes about half of them
        # here, which caps the rate: the server's own CPU per inference
        # is the figure the server controls.
        done, cpu = inference_count(server, "identity_1mb"), tree_cpu_seconds(server.process.pid)
        rate = perf_analyzer(server, "identity_1mb", 4, seconds)[0]
        done, cpu = inference_count(server, "identity_1mb") - done, tree_cpu_seconds(server.process.pid) - cpu
        return rate, cpu / done * 1e6
    if workload == "stream":
        return stream(server, TOKENS)
    if workload == "big":
        return big_request(server, files["big"].read_bytes())
    raise ValueError(workload)


def bodies(folder: Path):
    files = {}
    files["add_sub"] = folder / "add_sub.json"
    files["add_sub"].write_text(json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [0.5, 0.25, 0.125, 1.0]}]}))
    files["ens"] = folder / "ens.json"
    files["ens"].write_text(json.dumps({"inputs": [
        {"name": "A", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
        {"name": "B", "shape": [4], "datatype": "FP32", "data": [0.5, 0.25, 0.125, 1.0]}]}))
    # 8 x 262144 FP32, as Python's json writes a numpy array's values
    # (`tolist()`, each a double's shortest repr): 42.5 MB.
    x = np.random.default_rng(0).random((8, 262144), dtype=np.float32)
    files["big"] = folder / "big.json"
    files["big"].write_text(json.dumps({"inputs": [{"name": "x", "shape": [8, 262144], "datatype": "FP32",
                                                    "data": x.reshape(-1).tolist()}]}))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--neighbour", action="store_true", help="a CPU-bound process on core 0 meanwhile")
    parser.add_argument("--only", default="", help="comma-separated workloads")
    parser.add_argument("--wirespeed", action="append",
                        help="a wirespeed binary (the release build if none); more than one to compare builds")
    args = parser.parse_args()
    binaries = args.wirespeed or [str(ROOT / "target" / "release" / "wirespeed")]
    workloads = [w for w in args.only.split(",") if w] or WORKLOADS
    scratch = Path(tempfile.mkdtemp(prefix="triton_sbs_"))
    repository(scratch / "repo")
    files = bodies(scratch)
    print(f"bodies: big {files['big'].stat().st_size / 1e6:.1f} MB", flush=True)
    servers = []
    neighbour = None
    try:
        servers.append(start_triton(scratch / "repo", open(scratch / "triton.log", "w")))
        for i, binary in enumerate(binaries):
            server = start_wirespeed(binary, scratch / "repo", open(scratch / f"wirespeed{i}.log", "w"))
            if len(binaries) > 1:
                server.name = f"wirespeed {Path(binary).name}"
            servers.append(server)
        rss = {s.name: [tree_rss_mib(s.process.pid)] for s in servers}
        if args.neighbour:
            neighbour = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
        results = {(w, s.name): [] for w in workloads for s in servers}
        cpu = {(w, s.name): [] for w in ("stream", "mb4") for s in servers}
        for round_ in range(args.rounds):
            order = servers if round_ % 2 == 0 else servers[::-1]
            for workload in workloads:
                for server in order:
                    value = measure(workload, server, files, args.seconds)
                    if workload in ("stream", "mb4"):
                        value, per_event = value
                        cpu[(workload, server.name)].append(per_event)
                    results[(workload, server.name)].append(value)
                    print(f"round {round_ + 1} {workload:7s} {server.name:9s} {value:12.3f}", flush=True)
        for s in servers:
            rss[s.name].append(tree_rss_mib(s.process.pid))
    finally:
        if neighbour is not None:
            neighbour.kill()
        for s in servers:
            s.stop()

    print(f"\n{args.rounds} rounds x {args.seconds} s{', a CPU-bound neighbour on core 0' if args.neighbour else ''}; "
          "medians; ratio = how many times wirespeed is ahead (throughput ratio, or Triton's time / wirespeed's)")
    ours_names = [s.name for s in servers[1:]]
    print("| workload | Triton 2.51 | " + " | ".join(f"{n} | ratio" for n in ours_names) + " |")
    print("|---|---|" + "---|---|" * len(ours_names))
    for workload in workloads:
        triton = statistics.median(results[(workload, "triton")])
        unit = "ms" if workload in TIMES else "/s"
        cells = []
        for name in ours_names:
            ours = statistics.median(results[(workload, name)])
            ratio = triton / ours if workload in TIMES else ours / triton
            cells.append(f"{ours:,.3f} {unit} | {ratio:.2f}x")
        print(f"| {workload} | {triton:,.3f} {unit} | " + " | ".join(cells) + " |")
    for workload, what in (("mb4", "inference"), ("stream", "event")):
        if workload in workloads:
            triton = statistics.median(cpu[(workload, "triton")])
            cells = []
            for name in ours_names:
                ours = statistics.median(cpu[(workload, name)])
                cells.append(f"{ours:.1f} us | {triton / ours:.2f}x")
            print(f"| {workload}, server CPU per {what} | {triton:.1f} us | " + " | ".join(cells) + " |")
    for name, (idle, after) in rss.items():
        print(f"| RSS of {name}'s processes, loaded / after | {idle:.1f} MiB | {after:.1f} MiB | |")


if __name__ == "__main__":
    main()
