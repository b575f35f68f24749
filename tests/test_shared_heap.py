"""Large inputs reach a Python worker where the server decoded them (the
shared heap, `crates/wirespeed-core/src/shared_heap.rs`): over V2 JSON,
Triton's binary extension and gRPC, with tritonclient as it comes. The
model reports what it read (a sum, against numpy's of the same array)
and where its array lies (a view of the heap's mapping, or of the input
segment for a small input); many requests at once, each with its own
tensor, on two workers; a model that keeps an input past its request;
and the heap's memory given back after a large request."""

import concurrent.futures
import os
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import RunningServer, proc_status, wait_until

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

# Where an array's memory lies: the size of the mapping it views (the
# shared heap is reserved whole, 64 GiB; a worker's input segment is a
# few pages to a few MiB), 0 when it views no mapping.
PROBE = '''
import mmap
import numpy as np
import triton_python_backend_utils as pb_utils


def mapping_size(array):
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return len(base) if isinstance(base, mmap.mmap) else 0


class TritonPythonModel:
    def initialize(self, args):
        self.kept = None

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            kept = 0.0 if self.kept is None else float(self.kept[:4].astype(np.float64).sum())
            # An input kept past its request, as a model may: it stays
            # readable (what it holds then is the server's business).
            self.kept = x
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([x.astype(np.float64).sum()], dtype=np.float64)),
                pb_utils.Tensor("MAPPING", np.array([mapping_size(x)], dtype=np.int64)),
                pb_utils.Tensor("KEPT", np.array([kept], dtype=np.float64)),
            ]))
        return responses
'''

CONFIG = '''name: "probe"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "SUM" data_type: TYPE_FP64 dims: [ 1 ] },
  { name: "MAPPING" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "KEPT" data_type: TYPE_FP64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
'''

HEAP = 64 << 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    (root / "probe" / "1").mkdir(parents=True)
    (root / "probe" / "config.pbtxt").write_text(CONFIG)
    (root / "probe" / "1" / "model.py").write_text(PROBE)
    running = RunningServer(root)
    client = httpclient.InferenceServerClient(running.address)
    wait_until("the probe model ready", lambda: client.is_model_ready("probe"))
    yield running
    running.stop()
    assert not any("being restarted" in line for line in running.log), "".join(running.log)


def over_http(server, x, binary):
    client = httpclient.InferenceServerClient(server.address)
    tensor = httpclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    result = client.infer("probe", [tensor])
    return result.as_numpy("SUM")[0], result.as_numpy("MAPPING")[0]


def over_grpc(server, x):
    client = grpcclient.InferenceServerClient(server.grpc_address)
    tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("probe", [tensor])
    return result.as_numpy("SUM")[0], result.as_numpy("MAPPING")[0]


SENDS = {
    "json": lambda server, x: over_http(server, x, binary=False),
    "binary": lambda server, x: over_http(server, x, binary=True),
    "grpc": over_grpc,
}


@pytest.mark.parametrize("protocol", SENDS)
def test_a_large_input_is_read_where_it_was_decoded_and_a_small_one_from_the_segment(server, protocol):
    rng = np.random.default_rng(len(protocol))
    large = rng.standard_normal(1 << 18).astype(np.float32)  # 1 MiB
    small = rng.standard_normal(100).astype(np.float32)
    for x, in_heap in ((large, True), (small, False), (large[::-1].copy(), True)):
        total, mapping = SENDS[protocol](server, x)
        assert total == x.astype(np.float64).sum()
        if in_heap:
            assert mapping == HEAP
        else:
            assert 0 < mapping < HEAP


def test_requests_at_once_each_read_their_own_tensor(server):
    # Sizes from 64 KiB to 2 MiB, each filled with values of its own; two
    # workers, 32 requests in flight over three protocols: a block freed
    # and taken again while a worker still read it would show as a sum
    # that is not its request's.
    rng = np.random.default_rng(11)
    tensors = [
        rng.standard_normal(int(n)).astype(np.float32) + i
        for i, n in enumerate(rng.integers(1 << 14, 1 << 19, size=96))
    ]
    protocols = list(SENDS.values())

    def send(i):
        total, mapping = protocols[i % len(protocols)](server, tensors[i])
        return i, total, mapping

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        for i, total, mapping in pool.map(send, range(len(tensors))):
            assert total == tensors[i].astype(np.float64).sum(), i
            assert mapping == HEAP


def test_freed_tensors_keep_at_most_32_mib_of_pages(server):
    # Sixteen 12 MiB tensors in flight at once: 192 MiB of the heap
    # written. Once they are answered, no more than 32 MiB of freed pages
    # stay resident: the server's shared memory falls under 40 MiB.
    pid = server.process.pid
    tensors = [np.full(3 << 20, i, dtype=np.float32) for i in range(16)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda x: over_http(server, x, binary=True), tensors))
    for x, (total, mapping) in zip(tensors, answers):
        assert (total, mapping) == (x.astype(np.float64).sum(), HEAP)
    wait_until("freed pages given back", lambda: proc_status(pid, "RssShmem") < 40 << 10)


def test_a_tensor_of_16_mib_or_more_is_copied_to_the_segment(server):
    x = np.full(5 << 20, 0.5, dtype=np.float32)  # 20 MiB
    total, mapping = over_http(server, x, binary=True)
    assert total == x.size * 0.5
    assert 0 < mapping < HEAP
    # The model kept earlier inputs (large ones in the heap, since freed
    # and taken again or given back); its next requests read them without
    # a fault, and the workers live on (the fixture checks that none was
    # restarted).
    client = httpclient.InferenceServerClient(server.address)
    tensor = httpclient.InferInput("X", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    for _ in range(4):
        assert client.infer("probe", [tensor]).as_numpy("KEPT").shape == (1,)


def test_a_worker_that_cannot_map_the_heap_reads_its_inputs_from_the_segment(tmp_path):
    # The model's Python under `ulimit -v` of 8 GiB: room for numpy, not
    # for the heap's 64 GiB of address space. The worker says so when it
    # loads, and its large inputs are copied into its segment as before.
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nulimit -v {8 << 20}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "repo" / "probe" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "probe" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "repo" / "probe" / "1" / "model.py").write_text(PROBE)
    running = RunningServer(tmp_path / "repo", env=dict(os.environ, WIRESPEED_PYTHON=str(python)))
    try:
        client = httpclient.InferenceServerClient(running.address)
        wait_until("the probe model ready", lambda: client.is_model_ready("probe"))
        x = np.random.default_rng(5).standard_normal(1 << 18).astype(np.float32)
        for send in SENDS.values():
            total, mapping = send(running, x)
            assert total == x.astype(np.float64).sum()
            assert 0 < mapping < HEAP
    finally:
        running.stop()
