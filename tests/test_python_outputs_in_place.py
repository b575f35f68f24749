"""A Python model's large outputs are answered from where its worker wrote
them (its output segment, `segment.rs`), not copied out first: each stays
the server's until its response has gone, while the worker computes the
next requests around it. What a client sees must not change: every answer
is its own request's, however many are in flight, and the segment does
not grow with the number of requests."""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, RunningServer
from test_triton_peer_bls_memory import identity_model

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))


def output_segment_bytes(server, model):
    """The length of `model`'s first instance's output segment (a memfd
    named for it, among the server's open files)."""
    fds = Path("/proc") / str(server.process.pid) / "fd"
    for fd in fds.iterdir():
        try:
            if os.readlink(fd).startswith(f"/memfd:wirespeed-{model}-0-out"):
                return os.stat(fd).st_size
        except FileNotFoundError:
            continue
    raise AssertionError(f"no output segment of {model}")


def test_answers_in_flight_each_keep_their_own_large_output(tmp_path):
    """Eight clients at once (gRPC, binary HTTP and JSON HTTP, whose
    encoding holds an output longest) send a one-instance Python identity
    distinct tensors of 1-2 MiB; every answer is its own request's, and
    the segment stays within the outputs that can be in flight at once."""
    identity_model(tmp_path)
    server = RunningServer(tmp_path)
    try:
        def ask(client_index, rounds=40):
            rng = np.random.default_rng(client_index)
            kind = ("grpc", "grpc", "grpc", "binary", "binary", "binary", "json", "json")[client_index]
            if kind == "grpc":
                client, module = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"), grpcclient
            else:
                client, module = httpclient.InferenceServerClient(server.address), httpclient
            for _ in range(rounds):
                size = int(rng.integers(1 << 20, 2 << 20)) if kind != "json" else int(rng.integers(100_000, 300_000))
                sent = rng.integers(0, 256, size, dtype=np.uint8)
                given = module.InferInput("INPUT0", [size], "UINT8")
                if kind == "json":
                    given.set_data_from_numpy(sent, binary_data=False)
                    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
                elif kind == "binary":
                    given.set_data_from_numpy(sent)
                    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
                else:
                    given.set_data_from_numpy(sent)
                    wanted = [grpcclient.InferRequestedOutput("OUTPUT0")]
                got = client.infer("identity", [given], outputs=wanted).as_numpy("OUTPUT0")
                assert got.shape == sent.shape and np.array_equal(got, sent), kind
            return kind

        with ThreadPoolExecutor(8) as pool:
            done = list(pool.map(ask, range(8)))
        assert len(done) == 8
        # At most eight answers in flight and the one being computed, of
        # 2 MiB each at most: the places answered are used again (320
        # requests of 1-2 MiB would take ~450 MiB one after the other).
        assert output_segment_bytes(server, "identity") <= 32 << 20
    finally:
        server.stop()
