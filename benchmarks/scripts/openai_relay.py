#!/usr/bin/env python3
"""wirespeed in front of an upstream OpenAI server: the latency it adds.

The upstream is the tests' vLLM-shaped stand-in
(`tests/upstream/openai_standin.py`, FastAPI on uvicorn, in a process of
its own); wirespeed serves it as `backend = "upstream"` with its URL, and
nginx proxies it too (`proxy_buffering off`, upstream keep-alive: the
floor of any proxy's hop on this machine). One client connection to each
(HTTP/1.1 keep-alive, read with plain `recv`) asks the same streamed chat request
of WORDS words, streamed DELAY_MS apart, in turn of the stand-in
directly, through nginx and
through wirespeed, so all see the same machine at the same moment. For
each: the time to the first token (the first event with content) and to
the stream's end. Added latency is the difference of the medians, per
round; the figure is the median over rounds. Each proxy's own CPU time
per relayed event (all its threads, from /proc; nginx's worker) is
measured beside it.
nginx comes from Debian's package (installed when missing, as root).

Usage (from the repository root, after `cargo build --release -p wirespeed`):
  benchmarks/scripts/openai_relay.py [ROUNDS]
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import cpu_seconds, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
W = Path(os.environ.get("W", ROOT / "target" / "release" / "wirespeed"))
PYTHON = os.environ.get("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
STANDIN = ROOT / "tests" / "upstream" / "openai_standin.py"
REMOTE = "standin/llm-7b"
WORDS = 64
STREAMS = 100
# The stand-in's pause before each word: 1000 words a second, faster than
# any LLM streams one answer, but paced as they are. 0 makes it a firehose
# that, on two cores, competes with wirespeed and the client for the CPU.
DELAY_MS = float(os.environ.get("DELAY_MS", "1"))

NGINX = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    upstream standin {{ server 127.0.0.1:{upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://standin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def nginx_binary():
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "nginx"], capture_output=True)
        found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    return found


class Connection:
    """A keep-alive HTTP/1.1 connection read with plain `recv`: the client
    spends as little CPU as it can, so that on two cores it takes as
    little as possible from the servers it measures."""

    def __init__(self, port):
        self.socket = socket.create_connection(("127.0.0.1", port))
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = port


def ask(connection, model):
    """One streamed chat: (seconds to the first token, to the end, events).
    The answer is chunked; it ends with `data: [DONE]` and the last chunk."""
    body = json.dumps({"model": model, "stream": True, "delay_ms": DELAY_MS, "messages": [
        {"role": "user", "content": " ".join(f"w{i}" for i in range(WORDS))}]}).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{connection.port}\r\n"
               f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    started = time.perf_counter()
    connection.socket.sendall(request)
    answer = bytearray()
    first = None
    while True:
        piece = connection.socket.recv(1 << 16)
        if not piece:
            sys.exit(f"{model}: the connection closed mid-answer")
        answer += piece
        # The stand-in writes `"content": "w0"`; wirespeed leaves the
        # choices as the upstream wrote them.
        if first is None and b'"content": "w' in answer:
            first = time.perf_counter() - started
        if answer.endswith(b"\r\n0\r\n\r\n") and b"data: [DONE]" in answer:
            break
    if not answer.startswith(b"HTTP/1.1 200"):
        sys.exit(f"{model}: {bytes(answer[:300])!r}")
    return first, time.perf_counter() - started, answer.count(b"\ndata: ") + answer.count(b"\r\ndata: ")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = Path(tempfile.mkdtemp(prefix="openai-relay-"))
    upstream_port, port, nginx_port = free_port(), free_port(), free_port()
    processes = [subprocess.Popen([PYTHON, str(STANDIN), "--port", str(upstream_port)])]
    try:
        wait_ready(f"http://127.0.0.1:{upstream_port}/v1/models")
        (work / "models" / "llm").mkdir(parents=True)
        (work / "models" / "llm" / "config.toml").write_text(
            f'backend = "upstream"\nurl = "http://127.0.0.1:{upstream_port}/v1"\nmodel = "{REMOTE}"\n')
        server = subprocess.Popen([str(W), "serve", "--models", str(work / "models"), "--http",
                                   f"127.0.0.1:{port}", "--grpc", "off", "--metrics", "off", "--log-level", "warn"])
        processes.append(server)
        wait_ready(f"http://127.0.0.1:{port}/v2/models/llm/ready")
        legs = {"direct": (Connection(upstream_port), REMOTE)}
        # The process whose CPU time each proxy's events cost.
        proxies = {"wirespeed": server.pid}
        nginx = nginx_binary()
        if nginx:
            (work / "nginx.conf").write_text(NGINX.format(work=work, upstream=upstream_port, port=nginx_port))
            master = subprocess.Popen([nginx, "-p", str(work), "-c", str(work / "nginx.conf")])
            processes.append(master)
            wait_ready(f"http://127.0.0.1:{nginx_port}/v1/models")
            legs["nginx"] = (Connection(nginx_port), REMOTE)
            proxies["nginx"] = int(Path(f"/proc/{master.pid}/task/{master.pid}/children").read_text().split()[0])
        else:
            print("nginx is not installed: no proxy floor measured")
        legs["wirespeed"] = (Connection(port), "llm")
        for _ in range(20):
            for connection, model in legs.values():
                ask(connection, model)
        added = {leg: {"first": [], "end": []} for leg in legs if leg != "direct"}
        firsts_all = {leg: [] for leg in legs}
        per_event = {leg: [] for leg in proxies}
        for r in range(rounds):
            firsts = {leg: [] for leg in legs}
            ends = {leg: [] for leg in legs}
            spent = {leg: 0.0 for leg in proxies}
            relayed = {leg: 0 for leg in proxies}
            for _ in range(STREAMS):
                for leg, (connection, model) in legs.items():
                    before = cpu_seconds(proxies[leg]) if leg in proxies else 0
                    first, end, events = ask(connection, model)
                    if leg in proxies:
                        spent[leg] += cpu_seconds(proxies[leg]) - before
                        relayed[leg] += events
                    firsts[leg].append(first)
                    ends[leg].append(end)
            p50 = {leg: (statistics.median(firsts[leg]), statistics.median(ends[leg])) for leg in legs}
            line = [f"round {r + 1}: first token p50 direct {p50['direct'][0] * 1e3:.3f} ms"]
            for leg in added:
                added[leg]["first"].append(p50[leg][0] - p50["direct"][0])
                added[leg]["end"].append(p50[leg][1] - p50["direct"][1])
                line.append(f"{leg} +{(p50[leg][0] - p50['direct'][0]) * 1e6:.0f} µs "
                            f"(stream +{(p50[leg][1] - p50['direct'][1]) * 1e6:.0f} µs)")
            for leg in legs:
                firsts_all[leg].append(p50[leg][0])
            for leg in proxies:
                per_event[leg].append(spent[leg] / relayed[leg])
            line.append("CPU an event " + ", ".join(
                f"{leg} {spent[leg] / relayed[leg] * 1e6:.2f} µs" for leg in proxies))
            print("; ".join(line), flush=True)
        print()
        print("time to first token, p50: " + ", ".join(
            f"{leg} {statistics.median(v) * 1e3:.3f} ms" for leg, v in firsts_all.items()))
        for leg, v in added.items():
            print(f"added by {leg}, median of rounds: first token {statistics.median(v['first']) * 1e6:.0f} µs, "
                  f"whole stream of {WORDS} words {statistics.median(v['end']) * 1e6:.0f} µs")
        print("CPU per relayed event, median of rounds: " + ", ".join(
            f"{leg} {statistics.median(v) * 1e6:.2f} µs" for leg, v in per_event.items()))
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
