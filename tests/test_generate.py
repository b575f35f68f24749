"""Triton's generate extension (`docs/protocol/extension_generate.md`):
`POST /v2/models/{m}/generate` and `/generate_stream`, read as LLM clients
read them: `requests` for the JSON answer, `requests` with `stream=True`
for the server-sent event, and `curl -N`. The model is a Triton Python
model with `text_input` and `text_output`, as Triton's generate examples
configure them; the checks are the spec's (the id echoed, the model's name
and version, `text_output`, parameters reaching the model, errors as
`{"error": ...}` with a 4xx)."""

import json
import os
import subprocess

import pytest
import requests

from conftest import ROOT, RunningServer

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

CONFIG = """
name: "echo_upper"
backend: "python"
max_batch_size: 8
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

MODEL = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0][0].decode()
            limit = pb_utils.get_input_tensor_by_name(request, "max_tokens")
            if limit is not None:
                text = text[: int(limit.as_numpy()[0][0])]
            suffix = json.loads(request.parameters()).get("suffix", "")
            out = np.array([[(text.upper() + suffix).encode()]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", out)]))
        return responses
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate")
    (root / "echo_upper" / "1").mkdir(parents=True)
    (root / "echo_upper" / "config.pbtxt").write_text(CONFIG)
    (root / "echo_upper" / "1" / "model.py").write_text(MODEL)
    running = RunningServer(root)
    yield running
    running.stop()


def test_generate_answers_one_json_object(server):
    url = f"http://{server.address}/v2/models/echo_upper/generate"
    r = requests.post(url, json={"id": "42", "text_input": "client input", "parameters": {"suffix": "!"}})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"id": "42", "model_name": "echo_upper", "model_version": "1",
                        "text_output": "CLIENT INPUT!"}
    # Another input by its key; a plain key that is not an input is a parameter.
    r = requests.post(url, json={"text_input": "abcdef", "max_tokens": 3, "suffix": "?"})
    assert r.json()["text_output"] == "ABC?", r.text
    assert "id" not in r.json()
    # The version in the path.
    r = requests.post(f"http://{server.address}/v2/models/echo_upper/versions/1/generate",
                      json={"text_input": "v"})
    assert r.json()["model_version"] == "1"


def test_generate_stream_sends_server_sent_events(server):
    url = f"http://{server.address}/v2/models/echo_upper/generate_stream"
    with requests.post(url, json={"text_input": "streamed"}, stream=True) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = [line for line in r.iter_lines(decode_unicode=True) if line]
    assert len(events) == 1 and events[0].startswith("data: "), events
    assert json.loads(events[0][len("data: "):])["text_output"] == "STREAMED"
    curl = subprocess.run(["curl", "-sN", "-X", "POST", url, "-d", '{"text_input": "by curl"}'],
                          capture_output=True, text=True, timeout=30)
    assert curl.stdout.startswith("data: {") and curl.stdout.endswith("\n\n"), curl.stdout
    assert '"text_output":"BY CURL"' in curl.stdout


@pytest.mark.parametrize("body, status, words", [
    ('["not", "an", "object"]', 400, "not a JSON object"),
    ('{"parameters": {}}', 400, "text_input"),
    ('{"text_input": "x", "other": [1, 2]}', 400, "'other' is not an input"),
    ('{"text_input": [["a", "b"], ["c"]]}', 400, ""),
    ('{"text_input": "x", "id": 7}', 400, "'id' must be a string"),
])
def test_a_bad_generate_request_is_a_clear_4xx(server, body, status, words):
    url = f"http://{server.address}/v2/models/echo_upper/generate"
    r = requests.post(url, data=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"], r.json()
    # The stream's error before inference is JSON too.
    r = requests.post(url + "_stream", data=body)
    assert r.status_code == status and "error" in r.json()


def test_generate_on_an_unknown_model_says_so(server):
    r = requests.post(f"http://{server.address}/v2/models/nosuch/generate", json={"text_input": "x"})
    assert 400 <= r.status_code < 500 and "nosuch" in r.json()["error"]


def test_generate_serves_any_model_with_arrays_in_and_out(demo_server):
    """The bundled identity model: a nested array in is the tensor, an
    output of several elements comes back as an array; the Titanic trees
    answer a passenger's features."""
    r = requests.post(f"http://{demo_server.address}/v2/models/identity_fp32/generate",
                      json={"INPUT0": [[1.5, 2.5, -3.0]]})
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT0"] == [1.5, 2.5, -3.0]
    row = [1.0, 0.0, 1.0, 0.2875, 0.33333334, 0.0, 0.322667, 0.0, 1.0, 0.0, 0.0, 0.0]
    r = requests.post(f"http://{demo_server.address}/v2/models/titanic/generate", json={"features": row})
    infer = requests.post(f"http://{demo_server.address}/v2/models/titanic/infer",
                          json={"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12],
                                            "data": row}]}).json()
    by_name = {o["name"]: o["data"] for o in infer["outputs"]}
    assert r.json()["probability"] == by_name["probability"][0], r.text


def test_a_body_of_many_keys_with_one_twice_is_refused_at_once(server):
    """100,000 parameters, the first given again at the end: the duplicate
    is found in one pass (a pairwise search would take billions of
    comparisons, past the client's timeout)."""
    keys = ", ".join(f'"k{i}": 1' for i in range(100_000))
    body = '{"text_input": "a", ' + keys + ', "k0": 2}'
    r = requests.post(f"http://{server.address}/v2/models/echo_upper/generate", data=body, timeout=30)
    assert r.status_code == 400 and "parameter 'k0' already exists in request" in r.json()["error"], r.text
