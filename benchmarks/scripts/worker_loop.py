#!/usr/bin/env python3
"""The Python worker's own time for one request, apart from the server
and the kernel: the worker program (`channel.py`, `stub.py`, `peers.py`,
`decoupled.py`, `worker.py`, as the server sends it) loaded in a process
of its own with Triton's `add_sub` model (`triton.py`'s), then a loop of
what the worker does with each request: read the `infer` message, run the
model through Triton's stub (inputs viewed in the input segment, outputs
written into the output segment), write the `done` message.

    benchmarks/scripts/worker_loop.py [--rounds 5] [--requests 50000] [--against REV]

With `--against REV`, the worker program of git revision REV is measured
too, in rounds alternated with this tree's. Prints each round's
microseconds per request and the medians. Run it with the Python the
models run in (it needs numpy).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = "crates/wirespeed-python-backend/src"
PROGRAM = ("channel.py", "stub.py", "peers.py", "decoupled.py", "worker.py")
UTILS = ("triton_python_backend_utils.py", "triton_metrics.py", "triton_logger.py")
# The request `triton.py` sends, as the keeper writes it for the worker
# (each input's sixth field says whether it lies in the shared heap; a
# worker before the heap takes five).
INFER = (b'{"op":"infer","size":65536,"inputs":[["INPUT0","FP32",[4],0,16,false],'
         b'["INPUT1","FP32",[4],64,16,false]],"outputs":["OUTPUT0","OUTPUT1"],"parameters":{}}')
INFER_BEFORE_HEAP = INFER.replace(b",false]", b"]")


def measure(sources: Path, requests: int) -> float:
    """Microseconds per request of the worker program in `sources`, in
    this process (one program per process: it installs its modules)."""
    import mmap

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from triton import ADD_SUB

    ours, _theirs = socket.socketpair()
    for fd, source in ((3, ours.fileno()), (4, os.memfd_create("in")), (5, os.memfd_create("out")),
                       (6, os.memfd_create("call"))):
        os.dup2(source, fd)
    os.ftruncate(4, 65536)
    os.ftruncate(5, 65536)
    segment = mmap.mmap(4, 65536)
    segment[0:16] = np.array([1, 2, 3, 4], np.float32).tobytes()
    segment[64:80] = np.array([0.5, 0.25, 0.125, 1], np.float32).tobytes()
    program = "\n".join((sources / name).read_text() for name in PROGRAM)
    # Everything but the last line's `main()`: the worker's names.
    names = {"__name__": "wirespeed_worker"}
    exec(compile(program[: program.rstrip().rfind("main()")], "wirespeed_worker.py", "exec"), names)
    folder = Path(tempfile.mkdtemp())
    (folder / "model.py").write_text(ADD_SUB)
    worker = names["Worker"](names["Channel"](3))
    worker.load({
        "op": "load",
        "modules": {"triton_python_backend_utils": "\n".join((sources / n).read_text() for n in UTILS)},
        "file": str(folder / "model.py"),
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}, {"name": "OUTPUT1", "datatype": "FP32"}],
        "triton_args": {"model_instance_name": "add_sub_0_0"},
    })
    # A build before the codec's own functions read and wrote with `json`.
    decode = names.get("decode_message", json.loads)
    encode = names.get("encode_message", lambda m: json.dumps(m, separators=(",", ":")).encode())
    with_metrics = names["with_metrics"]

    message = INFER if "map_heap" in program else INFER_BEFORE_HEAP

    def one():
        answer = {"op": "done", "outputs": worker.infer(decode(bytearray(message)))}
        return encode(with_metrics(answer))

    expected = [list(np.array([1.5, 2.25, 3.125, 5.0], np.float32).tobytes()),
                list(np.array([0.5, 1.75, 2.875, 3.0], np.float32).tobytes())]
    placed = json.loads(one())["outputs"]
    out = mmap.mmap(5, 0)
    got = [list(out[o[3]: o[3] + o[4]]) for o in placed]
    assert got == expected, (placed, got)
    for _ in range(requests // 10):
        one()
    started = time.perf_counter()
    for _ in range(requests):
        one()
    return (time.perf_counter() - started) / requests * 1e6


def sources_of(revision: str) -> Path:
    """The worker program's files at git `revision`."""
    folder = Path(tempfile.mkdtemp())
    for name in PROGRAM + UTILS:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{SOURCES}/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (folder / name).write_text(text)
    return folder


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=50000)
    parser.add_argument("--against")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(measure(Path(args.child), args.requests))
        return
    programs = [("this tree", ROOT / SOURCES)]
    if args.against:
        programs.append((args.against, sources_of(args.against)))
    figures = {name: [] for name, _ in programs}
    for round in range(args.rounds):
        for name, sources in programs if round % 2 == 0 else programs[::-1]:
            out = subprocess.run([sys.executable, __file__, "--child", str(sources),
                                  "--requests", str(args.requests)], check=True, capture_output=True, text=True)
            figures[name].append(float(out.stdout.split()[-1]))
            print(f"round {round + 1} {name}: {figures[name][-1]:.2f} us a request", flush=True)
    for name, values in figures.items():
        print(f"median {name}: {statistics.median(values):.2f} us a request")
    if args.against:
        ours, theirs = (statistics.median(figures[name]) for name, _ in programs)
        print(f"this tree takes {ours / theirs:.2f}x the time of {args.against}")


if __name__ == "__main__":
    main()
