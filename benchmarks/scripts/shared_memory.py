"""One 8 MiB FP32 tensor through wirespeed's identity model, the same
client (tritonclient) every way, measured in interleaved rounds: system
shared memory (input and output in regions) over HTTP and gRPC, against
the tensor in the request (HTTP binary, gRPC raw, JSON), and the
in-process copy that shared memory should approach.

    .venv/bin/python benchmarks/scripts/shared_memory.py [BINARY] [ROUNDS] [REQUESTS]

BINARY defaults to target/release/wirespeed. The shared-memory timings
include the client's own copies (the tensor into its region, the answer
out of its region), since a client has to make them.
"""

import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

ROOT = Path(__file__).resolve().parents[2]
binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target" / "release" / "wirespeed")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
requests = int(sys.argv[3]) if len(sys.argv) > 3 else 20

server = subprocess.Popen(
    [binary, "serve", "--models", str(ROOT / "models"), "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
     "--max-body-bytes", str(256 << 20), "--max-grpc-message-bytes", str(256 << 20)],
    stderr=subprocess.PIPE,
    text=True,
)
http_port = grpc_port = None
for line in server.stderr:
    if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
        http_port = m.group(1)
    if m := re.search(r"listening on grpc://127\.0\.0\.1:(\d+)", line):
        grpc_port = m.group(1)
    if http_port and grpc_port:
        break
threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()

data = np.random.default_rng(0).standard_normal((1024, 2048), dtype=np.float32)  # 8 MiB
size = data.nbytes
http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=120)
grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
keys = [f"/wirespeed-bench-{uuid.uuid4().hex[:8]}-{side}" for side in ("in", "out")]
in_handle = shm.create_shared_memory_region("bench_in", keys[0], size)
out_handle = shm.create_shared_memory_region("bench_out", keys[1], size)
for client in (http, grpc):
    client.unregister_system_shared_memory()
http.register_system_shared_memory("bench_in", keys[0], size)
http.register_system_shared_memory("bench_out", keys[1], size)


def shared(client, module):
    def run():
        shm.set_shared_memory_region(in_handle, [data])
        inp = module.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_shared_memory("bench_in", size)
        out = module.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("bench_out", size)
        client.infer("identity_fp32", [inp], outputs=[out])
        return shm.get_contents_as_numpy(out_handle, np.float32, list(data.shape)).copy()

    return run


def in_request(client, module, binary=True):
    def run():
        inp = module.InferInput("INPUT0", list(data.shape), "FP32")
        if module is httpclient:
            inp.set_data_from_numpy(data, binary_data=binary)
            out = module.InferRequestedOutput("OUTPUT0", binary_data=binary)
        else:
            inp.set_data_from_numpy(data)
            out = module.InferRequestedOutput("OUTPUT0")
        return client.infer("identity_fp32", [inp], outputs=[out]).as_numpy("OUTPUT0")

    return run


def in_process():
    # The floor: the tensor copied once each way within one process.
    there = data.copy()
    return there.copy()


ways = {
    "in-process copy (floor)": in_process,
    "system shared memory, HTTP": shared(http, httpclient),
    "system shared memory, gRPC": shared(grpc, grpcclient),
    "HTTP binary": in_request(http, httpclient),
    "gRPC raw": in_request(grpc, grpcclient),
}
json_requests = max(2, requests // 10)
times = {name: [] for name in [*ways, "JSON"]}
for name, run in ways.items():  # warm-up, and a check that each answers right
    np.testing.assert_array_equal(run(), data)
for r in range(rounds):
    order = list(ways.items())
    if r % 2:
        order.reverse()
    for name, run in order:
        for _ in range(requests):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    json_run = in_request(http, httpclient, binary=False)
    for _ in range(json_requests):
        start = time.perf_counter()
        json_run()
        times["JSON"].append(time.perf_counter() - start)

floor = statistics.median(times["in-process copy (floor)"])
print(f"8 MiB FP32 through identity_fp32, {rounds} rounds, p50 of each (ms):")
print(f"{'':34} {'p50 ms':>9} {'x floor':>9}")
for name, samples in times.items():
    p50 = statistics.median(samples)
    print(f"{name:34} {p50 * 1e3:9.2f} {p50 / floor:9.1f}")

http.unregister_system_shared_memory()
shm.destroy_shared_memory_region(in_handle)
shm.destroy_shared_memory_region(out_handle)
server.terminate()
server.wait()
