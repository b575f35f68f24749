"""Large tensors through BLS: a Python model sends a tensor to a Python
identity model with `exec()` and checks it on its way back, on the real
Triton 2.51 and on wirespeed, same repository, rounds interleaved; the
median time of one request carrying one call of 1 GiB, and of one carrying
four of 200 MB (tests/test_triton_peer_bls_memory.py's models).

Usage (from the repository root, after `cargo build --release -p wirespeed`):
    .venv/bin/python benchmarks/scripts/bls_large.py [--rounds 3] [--binary OLD --binary NEW]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from harness import ROOT, free_port, wait_ready  # noqa: E402
from test_triton_peer_bls_memory import CALLER_COMMON, CALLERS, identity_model  # noqa: E402
from triton_peer import TritonServer  # noqa: E402


class Wirespeed:
    """The release binary on `repo`."""

    name = "wirespeed"

    def __init__(self, binary, repo, log, name="wirespeed"):
        self.name = name
        self.http = free_port()
        env = dict(os.environ, WIRESPEED_PYTHON=str(ROOT / ".venv-triton" / "bin" / "python"))
        self.process = subprocess.Popen(
            [binary, "serve", "--models", str(repo), "--http", f"127.0.0.1:{self.http}", "--grpc", "off",
             "--metrics", "off"], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        wait_ready(f"http://127.0.0.1:{self.http}/v2/health/ready", 120)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)


class Triton:
    """The real Triton on `repo` (the tests' way to it)."""

    name = "triton"

    def __init__(self, repo, log):
        self.server = TritonServer(repo, log)
        self.http = self.server.http_port

    def stop(self):
        self.server.stop()

GIB = 1 << 30


def repository(root: Path):
    identity_model(root)
    (root / "bls_sync" / "1").mkdir(parents=True)
    (root / "bls_sync" / "config.pbtxt").write_text(textwrap.dedent("""\
        name: "bls_sync"
        backend: "python"
        input [ { name: "SIZES" data_type: TYPE_INT64 dims: [ -1 ] } ]
        output [ { name: "RESULT" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
        instance_group [ { kind: KIND_CPU count: 1 } ]
        """))
    (root / "bls_sync" / "1" / "model.py").write_text(CALLER_COMMON + CALLERS["bls_sync"][1])


def one(server, sizes):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=600,
                                              connection_timeout=600)
    x = httpclient.InferInput("SIZES", [len(sizes)], "INT64")
    x.set_data_from_numpy(np.array(sizes, dtype=np.int64))
    started = time.perf_counter()
    result = client.infer("bls_sync", [x])
    took = time.perf_counter() - started
    client.close()
    verdicts = [v.decode() for v in result.as_numpy("RESULT").tolist()]
    if any(v != "ok" for v in verdicts):
        sys.exit(f"{server.name}: {verdicts}")
    return took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", action="append",
                        help="a wirespeed binary (target/release/wirespeed by default); give it twice "
                             "to compare two builds, each beside Triton in the same rounds")
    args = parser.parse_args()
    binaries = args.binary or [str(ROOT / "target" / "release" / "wirespeed")]
    names = ["wirespeed"] if len(binaries) == 1 else [f"wirespeed {Path(b).name}" for b in binaries]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repository(root / "models")
        servers = [Triton(root / "models", root / "triton.log")]
        for i, (binary, name) in enumerate(zip(binaries, names)):
            servers.append(Wirespeed(binary, root / "models", root / f"wirespeed{i}.log", name))
        try:
            for server in servers:
                one(server, [16])
            times = {(s.name, case): [] for s in servers for case in ("1 GiB", "4 x 200 MB")}
            for _ in range(args.rounds):
                for server in servers:
                    times[(server.name, "1 GiB")].append(one(server, [GIB]))
                    times[(server.name, "4 x 200 MB")].append(one(server, [200 << 20] * 4))
        finally:
            for server in servers:
                server.stop()
    print("| case | Triton 2.51 | " + " | ".join(f"{n} | Triton / {n}" for n in names) + " |")
    print("|---|---|" + "---|---|" * len(names))
    for case in ("1 GiB", "4 x 200 MB"):
        triton = statistics.median(times[("triton", case)])
        cells = []
        for name in names:
            ours = statistics.median(times[(name, case)])
            cells.append(f"{ours:.2f} s | {triton / ours:.2f}x")
        print(f"| {case} | {triton:.2f} s | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
