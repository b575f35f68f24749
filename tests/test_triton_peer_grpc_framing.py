"""`ModelInfer` bodies framed wrong, sent by curl to the real Triton 2.51
and to wirespeed on the same repository: each gets the same gRPC
status from both. wirespeed reads an uncompressed `ModelInfer` from its
HTTP/2 frames (`protocols/v2/grpc_frames.rs`); this is what Triton's
gRPC front end answers to the same bytes."""

import os
import sys

import pytest

from test_grpc import curl_model_infer, framed
from triton_peer import side_by_side

# The Python model runs in the tests' Python, which has numpy.
os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

# model_name "nope", which neither server serves.
NOPE = b"\x0a\x04nope"

CASES = [
    ("whole", framed(NOPE)),
    ("cut short", framed(NOPE, length=100)),
    ("no message", b""),
    ("not protobuf", framed(b"\x0a\xff\xff")),
    # A raw_input_contents entry (field 7) longer than the message.
    ("raw entry past the end", framed(NOPE + b"\x3a\x40abcd")),
    # What follows the first message is not read: a second one, whole or
    # cut short, leaves the first's answer as it is.
    ("a second message", framed(NOPE) + framed(b"\x0a\xff\xff")),
    ("a second message cut short", framed(NOPE) + framed(b"", length=9)),
]


IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    # One model, which the requests do not name.
    repo = tmp_path_factory.mktemp("repo")
    (repo / "identity" / "1").mkdir(parents=True)
    (repo / "identity" / "config.pbtxt").write_text(
        'name: "identity"\nbackend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    (repo / "identity" / "1" / "model.py").write_text(IDENTITY)
    with side_by_side(repo, tmp_path_factory.mktemp("log") / "triton.log") as both:
        yield both


@pytest.mark.parametrize("case, data", CASES, ids=[c for c, _ in CASES])
def test_a_misframed_message_gets_tritons_status(servers, case, data):
    triton = curl_model_infer(servers["triton"], data)
    ours = curl_model_infer(servers["wirespeed"], data)
    assert ours[0] == triton[0], (case, triton, ours)


def test_a_compressed_flag_without_an_encoding_is_refused_as_grpc_says(servers):
    # Triton reads the message as if uncompressed (NOT_FOUND for "nope");
    # gRPC's compression spec says such a message MUST fail with INTERNAL,
    # and wirespeed follows the spec, as tonic did before.
    status, message = curl_model_infer(servers["wirespeed"], framed(NOPE, flag=1))
    assert status == "13" and "compressed-flag" in message, (status, message)
