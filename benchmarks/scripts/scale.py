#!/usr/bin/env python3
"""How wirespeed's costs grow with the work: curves, drawn as SVG.

  benchmarks/scripts/scale.py [--only connections,models,python,bodies] [--seconds 5] [--rounds 3]
                              [--out docs/figures] [--binary target/release/wirespeed] [--json FILE]

- connections: 64, 1,000 and 10,000 open keep-alive connections, all but 64
  idle (each has made one request), and `wrk -t1 -c64 --latency` on
  `GET /v2` among them: the rate, the p99, and the server's RSS growth per
  idle connection, for wirespeed and for nginx answering the same bytes
  from a `return 200` location; medians of `--rounds` rounds, the two
  servers alternated.
- models: a repository of 1, 100, 1,000 and 10,000 copies of the bundled
  Titanic tree model: start to ready, RSS at ready, and one model's p50
  (`wrk -t1 -c1`), with metrics on (the default).
- python: a repository of 1, 10 and 50 copies of Triton's `add_sub`
  Python model (one instance each), served by the real Triton 2.51 (the
  `nvidia-pytriton` wheel's, as triton.py starts it) and by wirespeed, one
  after the other: start to ready, the RSS of the whole process tree (the
  Python processes included), and one model's p50 (`wrk -t1 -c1`, V2 JSON).
- bodies: the p50 of one connection's V2 JSON infer (`wirespeed bench -c 1`)
  against the body's size, 1 to 10,000 Titanic rows.

The models, python and bodies points are one run each; the figures go to stdout,
and each curve to `<out>/scale-*.svg`.
"""

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness import tree_rss_mib, wait_ready, wrk

ROOT = Path(__file__).resolve().parents[2]
WS_PORT, NGINX_PORT = 18380, 18381


def start_wirespeed(binary, models, port=WS_PORT, extra=(), env=None):
    process = subprocess.Popen(
        [binary, "serve", "--models", str(models), "--http", f"127.0.0.1:{port}", "--grpc", "off",
         "--log-level", "warn", "--max-connections", "20000", *extra],
        env={**os.environ, "WIRESPEED_METRICS": "127.0.0.1:0", **(env or {})},
    )
    return process


def stop(process):
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wrk_get(url, connections, seconds):
    """`wrk -t1 --latency` GETs of `url`: requests a second, and the
    percentiles in ms (harness.wrk reads only the p50)."""
    args = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    percentiles = {}
    for p, value, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        percentiles[int(p)] = float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return rate, percentiles


def open_idle(port, count):
    """`count` keep-alive connections, each after one `GET /v2`."""
    idle = []
    for _ in range(count):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/v2")
        connection.getresponse().read()
        idle.append(connection)
    return idle


def start_nginx(body, work):
    escaped = body.replace("\\", "\\\\").replace('"', '\\"')
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "nginx.conf").write_text(f"""
worker_processes auto;
worker_rlimit_nofile 40000;
pid {work}/nginx.pid;
error_log {work}/logs/error.log warn;
events {{ worker_connections 20000; }}
http {{
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{NGINX_PORT} backlog=16384;
        location = /v2 {{ default_type application/json; return 200 "{escaped}"; }}
    }}
}}
""")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    subprocess.run([nginx, "-p", str(work), "-c", str(work / "nginx.conf")], check=True)
    wait_ready(f"http://127.0.0.1:{NGINX_PORT}/v2")
    return int((work / "nginx.pid").read_text())


def connections(args, results):
    counts = [64, 1000, 10000]
    ws = start_wirespeed(args.binary, ROOT / "models", extra=["--keep-alive-timeout", "300"])
    work = Path(tempfile.mkdtemp())
    master = None
    try:
        wait_ready(f"http://127.0.0.1:{WS_PORT}/v2/health/ready")
        body = urllib.request.urlopen(f"http://127.0.0.1:{WS_PORT}/v2").read().decode()
        master = start_nginx(body, work)
        servers = (("wirespeed", WS_PORT, ws.pid), ("nginx", NGINX_PORT, master))
        for _, port, _ in servers:
            wrk_get(f"http://127.0.0.1:{port}/v2", 64, 1)  # warm-up: buffers at their working size
        for n in counts:
            growth, idle = {}, []
            for name, port, pid in servers:
                before = tree_rss_mib(pid)
                idle += open_idle(port, n - 64)
                growth[name] = (tree_rss_mib(pid) - before) * 1024
            # Rounds alternate the servers, so a slow moment hits both.
            rates, p99s = {s[0]: [] for s in servers}, {s[0]: [] for s in servers}
            for r in range(args.rounds):
                for name, port, _ in servers[r % 2:] + servers[:r % 2]:
                    rate, p = wrk_get(f"http://127.0.0.1:{port}/v2", 64, args.seconds)
                    rates[name].append(rate)
                    p99s[name].append(p.get(99))
            for name, _, _ in servers:
                rate, p99 = statistics.median(rates[name]), statistics.median(p99s[name])
                per = growth[name] / max(n - 64, 1)
                results.setdefault("connections", []).append(
                    {"server": name, "connections": n, "rate": rate, "p99_ms": p99,
                     "rss_growth_kib": growth[name], "kib_per_idle": per})
                print(f"connections {name:9} {n:6}: GET /v2 {rate:10.0f} req/s, p99 {p99:7.3f} ms, "
                      f"RSS +{growth[name] / 1024:7.1f} MiB ({per:5.1f} KiB per idle connection)", flush=True)
            for s in idle:
                s.close()
            time.sleep(0.5)  # the closes reach the servers before the next count
    finally:
        stop(ws)
        if master:
            subprocess.run(["kill", str(master)])
    rows = results["connections"]
    for key, label, file in (("rate", "GET /v2 req/s (64 active)", "scale-connections-rate.svg"),
                             ("p99_ms", "p99 ms (64 active)", "scale-connections-p99.svg"),
                             ("kib_per_idle", "RSS KiB per idle connection", "scale-connections-memory.svg")):
        series = {s: [(r["connections"], r[key]) for r in rows if r["server"] == s] for s in ("wirespeed", "nginx")}
        svg(args.out / file, label + " against open connections", "open connections", label, series, logx=True)


def ready_rss_p50(port, pid, started, model, body, seconds, every):
    """For a server started at `started` (monotonic): start to ready, the
    RSS of its process tree at ready, and `model`'s p50 with one connection."""
    wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", seconds=900, every=every)
    ready = time.monotonic() - started
    rss = tree_rss_mib(pid)
    _, p50 = wrk(f"http://127.0.0.1:{port}", f"/v2/models/{model}/infer", body, 1, seconds)
    return ready, rss, p50


def models(args, results):
    counts = [1, 100, 1000, 10000]
    source = ROOT / "models" / "titanic"
    body = Path(tempfile.mkdtemp()) / "row.json"
    body.write_text('{"inputs":[{"name":"features","shape":[1,12],"datatype":"FP32",'
                    '"data":[1,0,1,0.2875,0.3333333333333333,0,0.322667,0,1,0,0,0]}]}')
    for n in counts:
        repo = Path(tempfile.mkdtemp())
        for i in range(n):
            folder = repo / f"m{i}"
            folder.mkdir()
            for f in source.iterdir():
                os.link(f, folder / f.name)
        started = time.monotonic()
        ws = start_wirespeed(args.binary, repo)
        try:
            ready, rss, p50 = ready_rss_p50(WS_PORT, ws.pid, started, "m0", body, args.seconds, every=0.005)
        finally:
            stop(ws)
            shutil.rmtree(repo)
        results.setdefault("models", []).append({"models": n, "ready_s": ready, "rss_mib": rss, "p50_ms": p50})
        print(f"models {n:6}: ready in {ready:6.2f} s, RSS {rss:7.1f} MiB, one model's p50 {p50:6.3f} ms",
              flush=True)
    rows = results["models"]
    for key, label, file in (("ready_s", "start to ready, s", "scale-models-start.svg"),
                             ("rss_mib", "RSS at ready, MiB", "scale-models-memory.svg"),
                             ("p50_ms", "one model's p50, ms", "scale-models-p50.svg")):
        svg(args.out / file, label + " against tree models", "tree models in the repository", label,
            {"wirespeed": [(r["models"], r[key]) for r in rows]}, logx=True)


def python_models(args, results):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from triton import ADD_SUB, start_triton, tensor

    counts = [1, 10, 50]
    body = Path(tempfile.mkdtemp()) / "add_sub.json"
    body.write_text(json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [0.5, 0.25, 0.125, 1.0]}]}))
    config = ('backend: "python"\n'
              f'input [ {tensor("INPUT0", "TYPE_FP32", [4])}, {tensor("INPUT1", "TYPE_FP32", [4])} ]\n'
              f'output [ {tensor("OUTPUT0", "TYPE_FP32", [4])}, {tensor("OUTPUT1", "TYPE_FP32", [4])} ]\n'
              "instance_group [ { kind: KIND_CPU count: 1 } ]\n")
    python = ROOT / ".venv-triton" / "bin" / "python"
    rows = results.setdefault("python", [])
    for n in counts:
        repo = Path(tempfile.mkdtemp())
        for i in range(n):
            (repo / f"p{i}" / "1").mkdir(parents=True)
            (repo / f"p{i}" / "config.pbtxt").write_text(f'name: "p{i}"\n' + config)
            (repo / f"p{i}" / "1" / "model.py").write_text(ADD_SUB)
        for name in ("triton", "wirespeed"):
            started = time.monotonic()
            if name == "triton":
                server = start_triton(repo, subprocess.DEVNULL, wait=False)
                process, port = server.process, server.http
            else:
                process = start_wirespeed(args.binary, repo, env={"WIRESPEED_PYTHON": str(python)})
                port = WS_PORT
            try:
                ready, rss, p50 = ready_rss_p50(port, process.pid, started, "p0", body, args.seconds, every=0.02)
            finally:
                if name == "triton":
                    server.stop()
                else:
                    stop(process)
            rows.append({"server": name, "models": n, "ready_s": ready, "rss_mib": rss, "p50_ms": p50})
            print(f"python models {n:3} {name:9}: ready in {ready:6.2f} s, RSS {rss:7.1f} MiB, "
                  f"one model's p50 {p50:6.3f} ms", flush=True)
        shutil.rmtree(repo)
    for key, label, file in (("ready_s", "start to ready, s", "scale-python-start.svg"),
                             ("rss_mib", "RSS of the process tree at ready, MiB", "scale-python-memory.svg"),
                             ("p50_ms", "one model's p50, ms", "scale-python-p50.svg")):
        svg(args.out / file, label + " against Python models", "Python models in the repository", label,
            {name: [(r["models"], r[key]) for r in rows if r["server"] == name]
             for name in ("wirespeed", "triton")}, logx=True)


def bodies(args, results):
    rows_list = [1, 10, 100, 1000, 10000]
    ws = start_wirespeed(args.binary, ROOT / "models")
    try:
        wait_ready(f"http://127.0.0.1:{WS_PORT}/v2/health/ready")
        for rows in rows_list:
            out = Path(tempfile.mkdtemp()) / "bench.json"
            subprocess.run([args.binary, "bench", f"http://127.0.0.1:{WS_PORT}", "--body", f"titanic:{rows}", "-c", "1",
                            "--threads", "1", "--json", str(out), "--max-windows", "5"],
                           check=True, capture_output=True)
            summary = json.loads(out.read_text())["measurements"][0]["summary"]
            p50 = summary["latency"]["p50"]
            # The bytes each request sent, head included.
            size = round(summary["mb_out_per_s"] * 1e6 / summary["throughput"])
            results.setdefault("bodies", []).append({"rows": rows, "request_bytes": size, "p50_ms": p50})
            print(f"bodies {rows:6} rows ({size} bytes a request): p50 {p50:8.3f} ms", flush=True)
    finally:
        stop(ws)
    svg(args.out / "scale-bodies-p50.svg", "one connection's p50 against the body's size", "V2 JSON request, bytes",
        "p50, ms", {"wirespeed": [(r["request_bytes"], r["p50_ms"]) for r in results["bodies"]]}, logx=True, logy=True)


def svg(path, title, xlabel, ylabel, series, logx=False, logy=False):
    """A line plot, one polyline per series, with labelled ticks."""
    import math

    width, height, left, right, top, bottom = 640, 400, 80, 140, 40, 60
    points = [p for line in series.values() for p in line if p[1] is not None]
    if not points:
        return
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    fy = (lambda v: math.log10(v)) if logy else (lambda v: v)
    xs = [fx(x) for x, _ in points]
    ys = [fy(y) for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys), max(ys)) if logy else (0.0, max(ys) * 1.1 or 1.0)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1

    def px(v):
        return left + (fx(v) - x0) / (x1 - x0) * (width - left - right)

    def py(v):
        return height - bottom - (fy(v) - y0) / (y1 - y0) * (height - top - bottom)

    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
           f'<text x="{(left + width - right) / 2}" y="{height - 15}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(top + height - bottom) / 2}" text-anchor="middle" '
           f'transform="rotate(-90 15 {(top + height - bottom) / 2})">{ylabel}</text>']
    for x in sorted({x for x, _ in points}):
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 18}" text-anchor="middle">{x:g}</text>')
    for i in range(5):
        value = y0 + (y1 - y0) * i / 4
        label = 10 ** value if logy else value
        y = height - bottom - i / 4 * (height - top - bottom)
        out.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{label:.3g}</text>')
    for i, (name, line) in enumerate(series.items()):
        line = [(x, y) for x, y in line if y is not None]
        colour = colours[i % len(colours)]
        path_points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line)
        out.append(f'<polyline points="{path_points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in line:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{width - right + 10}" y="{top + 20 + 18 * i}" fill="{colour}">{name}</text>')
    out.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="connections,models,python,bodies")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="wrk rounds per point, servers alternated (connections)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    parser.add_argument("--binary", default=str(ROOT / "target" / "release" / "wirespeed"))
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    # 10,000 connections take as many descriptors on each side.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 12000
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        except (ValueError, OSError):
            sys.exit(f"the open-file limit is {soft} and cannot be raised to {want}")
    results = {}
    for part in args.only.split(","):
        {"connections": connections, "models": models, "python": python_models, "bodies": bodies}[part](args, results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
