"""A BLS call's answer, read where it was written, against the real
Triton 2.51: a Python model calls a Python identity model with tensors of
100 KiB to 16 MiB, holds some answers (through views of them) across the
calls that follow and drops the others, and checks every answer's values
when it arrives and the held ones again after the last call. The two
servers' verdicts and the answers' writability are compared field by
field. The model also reports whether each answer's bytes lie in a shared
mapping of its process (`/proc/self/maps`): Triton's Python backend copies
a BLS answer out of its shared-memory pool into private memory (so the
test checks that it does), wirespeed's model reads it in place, in the
call segment the server wrote it to.
"""

import os
import sys
import textwrap

import numpy as np
import tritonclient.http as httpclient

from test_triton_peer_bls_memory import identity_model
from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

HOLDER = textwrap.dedent('''
    import numpy as np
    import triton_python_backend_utils as pb_utils


    def call(size, value):
        data = np.full(size, value, dtype=np.uint8)
        response = pb_utils.InferenceRequest(
            model_name="identity", inputs=[pb_utils.Tensor("INPUT0", data)],
            requested_output_names=["OUTPUT0"]).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()


    def place(array):
        """Whether the array's bytes lie in a shared mapping or a private one."""
        low = array.__array_interface__["data"][0]
        high = low + array.nbytes
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= low and high <= end:
                    return "shared" if fields[1][3] == "s" else "private"
        return "unmapped"


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                sizes = pb_utils.get_input_tensor_by_name(request, "SIZES").as_numpy().tolist()
                keep = pb_utils.get_input_tensor_by_name(request, "KEEP").as_numpy().tolist()
                verdicts, places, writable, held = [], [], [], []
                for i, size in enumerate(sizes):
                    value = (i * 37 + 11) % 256
                    out = call(size, value)
                    places.append(place(out))
                    writable.append(bool(out.flags.writeable))
                    verdicts.append("ok" if out.shape == (size,) and (out == value).all() else "wrong")
                    if keep[i]:
                        # Only a view stays: the array itself goes.
                        held.append((i, value, out[1:].reshape(1, -1)))
                    del out
                for i, value, view in held:
                    if not (view == value).all():
                        verdicts[i] = "changed by a later call"
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("VERDICTS", np.array([v.encode() for v in verdicts], dtype=np.object_)),
                    pb_utils.Tensor("PLACES", np.array([p.encode() for p in places], dtype=np.object_)),
                    pb_utils.Tensor("WRITABLE", np.array(writable, dtype=np.bool_)),
                ]))
            return responses
    ''')

KIB, MIB = 1 << 10, 1 << 20
# Sizes past the 64 KiB a call carries in its message, some held across
# the calls after them, in the order a loop's variables keep them.
SIZES = [4 * MIB, 100 * KIB, 8 * MIB, 4 * MIB, 1 * MIB, 16 * MIB, 4 * MIB, 2 * MIB, 200 * KIB, 8 * MIB, 4 * MIB]
KEEP = [1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1]


def repository(root):
    identity_model(root)
    (root / "holder" / "1").mkdir(parents=True)
    (root / "holder" / "config.pbtxt").write_text(textwrap.dedent("""\
        name: "holder"
        backend: "python"
        input [ { name: "SIZES" data_type: TYPE_INT64 dims: [ -1 ] } ]
        input [ { name: "KEEP" data_type: TYPE_BOOL dims: [ -1 ] } ]
        output [ { name: "VERDICTS" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "PLACES" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "WRITABLE" data_type: TYPE_BOOL dims: [ -1 ] } ]
        instance_group [ { kind: KIND_CPU count: 1 } ]
        """))
    (root / "holder" / "1" / "model.py").write_text(HOLDER)


def ask(server, sizes, keep):
    client = httpclient.InferenceServerClient(server.address)
    try:
        given = [httpclient.InferInput("SIZES", [len(sizes)], "INT64"),
                 httpclient.InferInput("KEEP", [len(keep)], "BOOL")]
        given[0].set_data_from_numpy(np.array(sizes, dtype=np.int64))
        given[1].set_data_from_numpy(np.array(keep, dtype=np.bool_))
        result = client.infer("holder", given)
        return {
            "verdicts": [v.decode() for v in result.as_numpy("VERDICTS").tolist()],
            "places": [p.decode() for p in result.as_numpy("PLACES").tolist()],
            "writable": result.as_numpy("WRITABLE").tolist(),
        }
    finally:
        client.close()


def test_held_answers_keep_their_values_and_lie_where_triton_puts_them(tmp_path):
    repository(tmp_path / "repo")
    with side_by_side(tmp_path / "repo", tmp_path / "triton.log") as servers:
        # Twice: the second time the segment is grown and holds the first
        # request's pages.
        answers = {name: [ask(server, SIZES, KEEP), ask(server, SIZES[::-1], KEEP)]
                   for name, server in servers.items()}
    triton, ours = answers["triton"], answers["wirespeed"]
    for theirs, mine in zip(triton, ours):
        assert theirs["verdicts"] == ["ok"] * len(SIZES), theirs
        assert mine["verdicts"] == theirs["verdicts"]
        assert mine["writable"] == theirs["writable"] == [True] * len(SIZES)
        # Triton copies each answer out of its pool; wirespeed does not.
        assert "shared" not in theirs["places"], theirs
        assert mine["places"] == ["shared"] * len(SIZES), mine
