"""A Python model's large outputs are answered from where its worker wrote
them (its output segment, `segment.rs`), not copied out first: each stays
the server's until its response has gone, while the worker computes the
next requests around it. What a client sees must not change: against the
real Triton 2.51 on the same folder, the same clients get the same
verdicts (every answer its own request's, however many are in flight),
and wirespeed's segment does not grow with the number of requests."""

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from test_triton_peer_bls_memory import identity_model
from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

KINDS = ("grpc", "grpc", "grpc", "binary", "binary", "binary", "json", "json")


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


def ask(server, client_index, rounds=30):
    """One client's requests of distinct tensors to `server`'s identity,
    each answer's verdict: "ok" when it is the request's own tensor."""
    rng = np.random.default_rng(client_index)
    kind = KINDS[client_index]
    if kind == "grpc":
        client, module = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"), grpcclient
    else:
        client, module = httpclient.InferenceServerClient(server.address), httpclient
    verdicts = []
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
        verdicts.append("ok" if got.shape == sent.shape and np.array_equal(got, sent) else "wrong")
    return kind, verdicts


def test_answers_in_flight_each_keep_their_own_large_output(tmp_path):
    """Eight clients at once (gRPC, binary HTTP and JSON HTTP, whose
    encoding holds an output longest) send a one-instance Python identity
    distinct tensors of 1-2 MiB, on Triton and on wirespeed in turn; the
    verdicts are compared field by field (all "ok" on both), and
    wirespeed's segment stays within the outputs that can be in flight at
    once."""
    identity_model(tmp_path / "repo")
    with side_by_side(tmp_path / "repo", tmp_path / "triton.log") as servers:
        verdicts = {}
        for name, server in servers.items():
            with ThreadPoolExecutor(len(KINDS)) as pool:
                verdicts[name] = list(pool.map(lambda i, s=server: ask(s, i), range(len(KINDS))))
        # At most eight answers in flight and the one being computed, of
        # 2 MiB each at most: the places answered are used again (240
        # requests of 1-2 MiB would take ~340 MiB one after the other).
        segment = output_segment_bytes(servers["wirespeed"], "identity")
    triton, ours = verdicts["triton"], verdicts["wirespeed"]
    for (kind, theirs), (same_kind, mine) in zip(triton, ours):
        assert kind == same_kind
        assert theirs == ["ok"] * len(theirs), (kind, theirs)
        assert mine == theirs, kind
    assert segment <= 32 << 20, segment
