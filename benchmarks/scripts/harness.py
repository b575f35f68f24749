"""What the Python benchmark scripts share: a free loopback port, one wrk
run read as (requests a second, p50 in ms), and waiting for a server to
answer, a process's CPU time. Imported by the scripts beside it
(`from harness import wrk`)."""

import os
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
    `connections` (one wrk thread); exits on any answer but a 2xx."""
    env = dict(os.environ, WRK_PATH=path, WRK_BODY=str(body))
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(POST), url],
                         env=env, capture_output=True, text=True, timeout=seconds + 30).stdout
    if "Non-2xx" in out or "Requests/sec" not in out:
        sys.exit(f"{url}{path}: errors\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    return rps, float(p50.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[p50.group(2)]


def wait_ready(url, seconds=60):
    """Waits until GET `url` answers 200."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{url} never answered")


def cpu_seconds(pid):
    """User and system CPU of process `pid` (all its threads) so far, in
    seconds, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
