"""Start to ready from a bucket against from local disk: a model folder
with a 500 MB file (a Python model beside its weights, Triton's layout, so
that the real Triton 2.51 serves it too) and a repository of 100 small
tree models (wirespeed only: Triton has no XGBoost JSON backend here),
each read from a folder and from SeaweedFS's S3 on loopback, rounds
interleaved; wirespeed's peak RSS at ready; and what the 500 MB object
alone takes to download with boto3 (the loopback's rate).

Usage (from the repository root, after `cargo build --release -p wirespeed`
and scripts/test, which builds SeaweedFS):
    .venv/bin/python benchmarks/scripts/storage_start.py [--rounds 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from harness import ROOT, free_port  # noqa: E402
from object_storage import SeaweedFS  # noqa: E402
from test_storage_s3 import ADD_SUB_PY  # noqa: E402
from test_triton_peer_python import ADD_SUB  # noqa: E402
from triton_peer import TritonServer  # noqa: E402

BIG = 500_000_000


def big_repository(root):
    folder = root / "add_sub"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(ADD_SUB)
    (folder / "1" / "model.py").write_text(ADD_SUB_PY)
    with open(folder / "1" / "weights.bin", "wb") as out:
        for _ in range(BIG // (1 << 20)):
            out.write(os.urandom(1 << 20))
        out.write(os.urandom(BIG % (1 << 20)))
    return root


def many_repository(root):
    for i in range(100):
        shutil.copytree(ROOT / "models" / "titanic", root / f"titanic_{i:03}")
    return root


def wirespeed_ready(binary, models, env, cache):
    """Seconds from the process's start to `/v2/health/ready`, and its peak
    RSS (MiB) then."""
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen([str(binary), "serve", "--models", str(models), "--http", f"127.0.0.1:{port}",
                                "--grpc", "off", "--metrics", "off", "--model-cache-dir", str(cache)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            assert process.poll() is None, "wirespeed exited"
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.005)
        took = time.monotonic() - started
        rss = next(int(line.split()[1]) for line in open(f"/proc/{process.pid}/status")
                   if line.startswith("VmHWM")) / 1024
        return took, rss
    finally:
        process.terminate()
        process.wait(30)


def triton_ready(models, log, env):
    started = time.monotonic()
    triton = TritonServer(models, log, env=env)
    took = time.monotonic() - started
    triton.stop()
    return took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", default=str(ROOT / "target" / "release" / "wirespeed"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="storage-start-"))
    store = SeaweedFS(work / "seaweedfs")
    try:
        big, many = big_repository(work / "big"), many_repository(work / "many")
        bucket = store.bucket("bench")
        store.upload(big, bucket, "big")
        store.upload(many, bucket, "many")
        env = store.env(WIRESPEED_PYTHON=str(ROOT / ".venv-triton" / "bin" / "python"))
        times = {}

        def note(name, value):
            times.setdefault(name, []).append(value)

        for r in range(args.rounds):
            started = time.monotonic()
            store.client().download_file(bucket, "big/add_sub/1/weights.bin", str(work / "download.bin"))
            note("boto3 download of the 500 MB object", time.monotonic() - started)
            (work / "download.bin").unlink()
            for name, local, url in [("500 MB model", big, f"s3://{store.host}/bench/big"),
                                     ("100 tree models", many, f"s3://{store.host}/bench/many")]:
                took, rss = wirespeed_ready(args.binary, local, env, work / f"cache-{r}-local")
                note(f"wirespeed {name}, local disk", took)
                note(f"wirespeed {name}, local disk: peak RSS MiB", rss)
                took, rss = wirespeed_ready(args.binary, url, env, work / f"cache-{r}-{name[:3]}")
                note(f"wirespeed {name}, S3", took)
                note(f"wirespeed {name}, S3: peak RSS MiB", rss)
            note("Triton 500 MB model, local disk", triton_ready(big, work / "triton.log", env))
            note("Triton 500 MB model, S3", triton_ready(f"s3://{store.host}/bench/big", work / "triton.log", env))
        width = max(map(len, times))
        for name, values in times.items():
            print(f"{name:<{width}}  median {statistics.median(values):8.3f}  ({', '.join(f'{v:.3f}' for v in values)})")
    finally:
        store.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
