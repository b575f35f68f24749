#!/usr/bin/env python3
"""The idle server's resident memory, and where it is.

Starts `wirespeed serve` on the bundled models (REST, gRPC and metrics
listeners), waits for readiness, asks `/v2/health/ready` once, lets it
idle 3 s, and reads `/proc/PID/smaps`: the RSS, split into the binary's
code, its read-only data, its relocated data (written by the loader at
start), the shared libraries and the anonymous memory (heap, stacks).
Builds given together are started in turn, round after round, and each
figure is the median of its rounds.

Usage: idle_memory.py [--rounds N] BINARY [BINARY...]
"""

import argparse
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HTTP, GRPC, METRICS = 18950, 18951, 18952


def ready():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{HTTP}/v2/health/ready", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def parts(pid, binary):
    """KiB resident per part of the process, from its smaps."""
    out = {"code": 0, "read-only data": 0, "relocated data": 0, "libraries": 0, "anonymous": 0}
    mapping, seen_code = None, False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                mapping = head
            elif head[0] == "Rss:":
                kib = int(head[1])
                perms = mapping[1]
                path = mapping[5] if len(mapping) > 5 else ""
                if path and Path(path).exists() and Path(path).samefile(binary):
                    # in address order: read-only data, code, then the data the
                    # loader relocates (read-only after, RELRO) and the writable data
                    if "x" in perms:
                        part, seen_code = "code", True
                    elif seen_code:
                        part = "relocated data"
                    else:
                        part = "read-only data"
                    out[part] += kib
                elif path.startswith("/") and ".so" in path:
                    out["libraries"] += kib
                else:
                    out["anonymous"] += kib
    return out


def idle(binary):
    server = subprocess.Popen(
        [binary, "serve", "--models", str(ROOT / "models"), "--http", f"127.0.0.1:{HTTP}",
         "--grpc", f"127.0.0.1:{GRPC}", "--metrics", f"127.0.0.1:{METRICS}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not ready():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f"{binary} did not become ready")
            time.sleep(0.02)
        time.sleep(3)  # idle: what it keeps, not what the start peaked at
        figures = parts(server.pid, binary)
        with open(f"/proc/{server.pid}/smaps_rollup") as rollup:
            figures["rss"] = next(int(l.split()[1]) for l in rollup if l.startswith("Rss:"))
        return figures
    finally:
        server.terminate()
        server.wait()


def main():
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("binary", nargs="+")
    args = cli.parse_args()
    binaries = [str(Path(b).resolve()) for b in args.binary]
    runs = {b: [] for b in binaries}
    for _ in range(args.rounds):
        for binary in binaries:
            runs[binary].append(idle(binary))
    keys = ["rss", "code", "read-only data", "relocated data", "libraries", "anonymous"]
    print("| binary | " + " | ".join(f"{k} (MiB)" for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for binary, rounds in runs.items():
        medians = [statistics.median(r[k] for r in rounds) / 1024 for k in keys]
        print(f"| {binary} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
