"""The generate endpoint against the real Triton 2.51: the same bodies to
both servers' `/v2/models/{m}/generate`, the answers compared. Where
Triton's words are the client's clue, wirespeed's error starts with them;
where Triton's status is wrong (500 for a body the client got wrong, 200
for an error), wirespeed answers 400 or 500 and docs/python-models.md
says so."""

import os
import sys
import textwrap

import pytest
import requests

from test_generate import CONFIG, MODEL
from triton_peer import side_by_side

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

DECOUPLED = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            for _ in range(COUNT):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
                    "text_output", np.array([b"x"], dtype=np.object_))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate_peer")
    (root / "echo_upper" / "1").mkdir(parents=True)
    (root / "echo_upper" / "config.pbtxt").write_text(CONFIG)
    (root / "echo_upper" / "1" / "model.py").write_text(MODEL)
    for name, count in (("none", 0), ("two", 2)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(f"""\
            name: "{name}"
            backend: "python"
            input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }} ]
            output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }} ]
            model_transaction_policy {{ decoupled: true }}
            """))
        (root / name / "1" / "model.py").write_text(DECOUPLED.replace("COUNT", str(count)))
    with side_by_side(root, tmp_path_factory.mktemp("triton_log") / "triton.log") as servers:
        yield servers


def generate(server, model, body):
    answer = requests.post(f"http://{server.address}/v2/models/{model}/generate", data=body, timeout=30)
    return answer.status_code, answer.json()


@pytest.mark.parametrize("model, body", [
    ("echo_upper", '{"text_input": "a", "id": ""}'),
    ("echo_upper", '{"text_input": "a", "id": "7"}'),
    ("echo_upper", '{"text_input": "a", "suffix": "!"}'),
])
def test_an_answer_is_tritons(servers, model, body):
    answers = {name: generate(server, model, body) for name, server in servers.items()}
    assert answers["triton"][0] == 200
    assert answers["wirespeed"] == answers["triton"]


# body -> (Triton's status, wirespeed's): the same unless Triton's is wrong.
@pytest.mark.parametrize("model, body, statuses", [
    ("echo_upper", '{"text_input": "a", "text_input": "b"}', (400, 400)),
    ("echo_upper", '{"text_input": "a", "parameters": [1]}', (500, 400)),
    ("echo_upper", '{"text_input": "a", "extra": {"k": 1}}', (400, 400)),
    ("echo_upper", '{"text_input": "a", "extra": [1, 2]}', (400, 400)),
    ("none", '{"text_input": "a"}', (200, 500)),
    ("two", '{"text_input": "a"}', (200, 500)),
])
def test_an_error_has_tritons_words(servers, model, body, statuses):
    answers = {name: generate(server, model, body) for name, server in servers.items()}
    assert (answers["triton"][0], answers["wirespeed"][0]) == statuses, answers
    theirs = answers["triton"][1]["error"].removeprefix("[request id: <id_unknown>] ")
    # Triton's words, up to what it adds from its JSON parser.
    assert answers["wirespeed"][1]["error"].startswith(theirs.split(": attempt")[0]), answers
