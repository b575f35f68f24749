"""What the Python benchmark scripts share: a free loopback port, one wrk
run read as (requests a second, p50 in ms), timed JSON posts, waiting for
a server to answer, a process's CPU time, and KServe kept on loopback.
Imported by the scripts beside it (`from harness import wrk`)."""

import http.client
import os
import statistics
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POST = ROOT / "benchmarks" / "wrk" / "post.lua"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(url, path, body, connections, seconds):
    """POSTs the file `body` to `url` + `path` for `seconds` over
    `connections` (one wrk thread), or GETs it when `body` is None; exits
    on any answer but a 2xx."""
    if body is None:
        command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url + path]
        env = os.environ
    else:
        command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(POST), url]
        env = dict(os.environ, WRK_PATH=path, WRK_BODY=str(body))
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 30).stdout
    if "Non-2xx" in out or "Requests/sec" not in out:
        sys.exit(f"{url}{path}: errors\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    return rps, float(p50.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[p50.group(2)]


def post_json(port, path, body, times):
    """(p50 ms, the last answer's bytes) of `times` POSTs of `body` to
    127.0.0.1:`port` + `path`, a fresh connection each, as one client
    sends a large request; exits on any answer but a 200."""
    took = []
    for _ in range(times):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        started = time.perf_counter()
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        took.append((time.perf_counter() - started) * 1000)
        connection.close()
        if response.status != 200:
            sys.exit(f"port {port}: {response.status} {answer[:300]!r}")
    return statistics.median(took), answer


def kserve_on_loopback():
    """Binds KServe's ModelServer to 127.0.0.1 only (it binds every
    interface): its uvicorn config and gRPC port, patched before `kserve`
    is imported."""
    import uvicorn
    from grpc.aio import _server as grpc_server

    config = uvicorn.Config.__init__

    def loopback(self, *args, **kwargs):
        kwargs["host"] = "127.0.0.1"
        config(self, *args, **kwargs)

    uvicorn.Config.__init__ = loopback
    add_port = grpc_server.Server.add_insecure_port
    grpc_server.Server.add_insecure_port = lambda self, a: add_port(self, a.replace("[::]", "127.0.0.1"))


def wait_ready(url, seconds=60, every=0.1):
    """Waits until GET `url` answers 200, asking every `every` seconds
    (a start timed with it wants a small one)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(every)
    sys.exit(f"{url} never answered")


def tree(pid):
    """`pid` and every process under it, from /proc."""
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            frontier += children
    return found


def tree_cpu_seconds(pid):
    """CPU of `pid` and every process under it (a server's workers)."""
    total = 0.0
    for p in tree(pid):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass
    return total


def tree_rss_mib(pid):
    """Resident memory of `pid` and every process under it, MiB."""
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def cpu_seconds(pid):
    """User and system CPU of process `pid` (all its threads) so far, in
    seconds, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
