#!/usr/bin/env python3
"""Overload and slowloris figures for docs/limits.md, against the release
binary (`cargo build --release -p wirespeed`).

    python3 benchmarks/scripts/abuse.py [overload|slowloris|both]

Overload: an identity model that takes 10 ms per request, 2 at a time (its
capacity is 200 requests a second) with room for 16 waiting, driven open
loop at 3x that for 10 s. Latency is measured from each request's intended
send time, so a stalled server cannot hide behind a slow client.

Slowloris: 200 connections trickle a byte every 0.3 s (half in the
headers, half in the body) while one normal client sends Titanic rows
back to back.

Both report the server's peak RSS (VmHWM).
"""

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "target" / "release" / "wirespeed"


def start(models, *flags):
    process = subprocess.Popen([str(BINARY), "serve", "--models", str(models), "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                                "--grpc", "off", *flags], stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if "listening on http://" in line:
            port = int(line.rsplit(":", 1)[1])
            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
            return process, port
    raise RuntimeError("the server did not start")


def peak_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def overload():
    repo = Path(tempfile.mkdtemp())
    (repo / "slow").mkdir()
    (repo / "slow" / "config.toml").write_text(
        "max_concurrency = 2\nmax_queue = 16\ndelay_ms = 10\nbackend = \"identity\"\n"
        "[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [-1]\n"
        "[[outputs]]\nname = \"x_out\"\ndatatype = \"FP32\"\nshape = [-1]\n")
    process, port = start(repo)
    body = json.dumps({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()
    rate, seconds = 600, 10
    results = []
    lock = threading.Lock()

    def one(due):
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/slow/infer", data=body)
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            status = "error"
        with lock:
            results.append((status, time.monotonic() - due))

    start_at = time.monotonic() + 0.5
    with ThreadPoolExecutor(max_workers=256) as pool:
        for i in range(rate * seconds):
            pool.submit(one, start_at + i / rate)
    accepted = [lat for status, lat in results if status == 200]
    shed = sum(1 for status, _ in results if status == 503)
    errors = sum(1 for status, _ in results if status not in (200, 503))
    print(f"overload: offered {rate}/s for {seconds} s to a model that takes 200/s")
    print(f"  answered {len(results)}: {len(accepted)} accepted, {shed} shed with 503 "
          f"({100 * shed / len(results):.1f} %), {errors} errors")
    print(f"  accepted latency from intended send: p50 {pct(accepted, 0.5) * 1e3:.1f} ms, "
          f"p99 {pct(accepted, 0.99) * 1e3:.1f} ms, max {max(accepted) * 1e3:.1f} ms")
    print(f"  server peak RSS {peak_rss_mib(process.pid):.1f} MiB")
    process.terminate()
    process.wait()


def slowloris():
    process, port = start(ROOT / "models")
    row = [1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0]
    body = json.dumps({"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": row}]}).encode()
    started = time.monotonic()
    closed = []
    lock = threading.Lock()

    # A body that takes 5 minutes to trickle: only the deadline stops it.
    padded = body + b" " * 1000

    def slow(i):
        sock = socket.create_connection(("127.0.0.1", port))
        head = b"POST /v2/models/titanic/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(padded)
        if i % 2:
            sock.sendall(head + b"\r\n")
            payload = padded
        else:
            payload = head + b"X-Slow: y\r\n" * 10000
        try:
            for b in payload:
                sock.sendall(bytes([b]))
                time.sleep(0.3)
        except OSError:
            pass
        with lock:
            closed.append(time.monotonic() - started)
        sock.close()

    threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(200)]
    for t in threads:
        t.start()
    latencies, failures = [], 0
    while time.monotonic() - started < 20:
        t0 = time.monotonic()
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/titanic/infer", data=body)
            with urllib.request.urlopen(request, timeout=5) as r:
                r.read()
            latencies.append(time.monotonic() - t0)
        except OSError:
            failures += 1
    for t in threads:
        t.join(timeout=max(0.0, 75 - (time.monotonic() - started)))
    print("slowloris: 200 connections trickling a byte every 0.3 s, default timeouts (10 s header, "
          "10 s body idle, 60 s body)")
    print(f"  normal client: {len(latencies)} requests, {failures} failed, p50 {pct(latencies, 0.5) * 1e3:.2f} ms, "
          f"p99 {pct(latencies, 0.99) * 1e3:.2f} ms")
    print(f"  slow connections closed by the server: {len(closed)} of 200, "
          f"the last after {max(closed) if closed else float('nan'):.1f} s")
    print(f"  server peak RSS {peak_rss_mib(process.pid):.1f} MiB")
    process.terminate()
    process.wait()


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    if which in ("overload", "both"):
        overload()
    if which in ("slowloris", "both"):
        slowloris()
