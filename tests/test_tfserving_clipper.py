"""TF Serving's REST API and Clipper's query frontend, driven with
`requests` the way their users' scripts do, and checked against the V2
answers for the same rows."""

import base64
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import MODELS, RunningServer
from test_binary_http import write_repo
from test_repository import versioned_repository
from titanic import features, load_params, passenger_rows


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(MODELS / "titanic", root / "titanic")
    # TF Serving's version labels, as its model config gives them.
    config = root / "titanic" / "config.toml"
    config.write_text('version_labels = { stable = "1" }\n' + config.read_text())
    write_repo(root, "text", [("s", "BYTES", "[-1]")])
    write_repo(root, "pair", [("a", "FP32", "[-1, 2]"), ("b", "INT64", "[-1]")])
    # An output whose alias ends in `_bytes`: TF Serving base64-encodes it.
    (root / "blob").mkdir()
    (root / "blob" / "config.toml").write_text(
        'backend = "identity"\n[[inputs]]\nname = "data"\ndatatype = "BYTES"\nshape = [-1]\n'
        '[[outputs]]\nname = "data_bytes"\ndatatype = "BYTES"\nshape = [-1]\n')
    write_repo(root, "raw", [("b", "UINT8", "[-1, -1]")])
    versioned_repository(root, 'version_policy = { all = {} }\nversion_labels = { stable = "1", canary = "2" }')
    running = RunningServer(root)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def rows():
    params = load_params()
    return np.array([features(r, params) for r in passenger_rows()[:25]], dtype=np.float32)


@pytest.fixture(scope="module")
def v2(server, rows):
    """The V2 answers for the same rows: the reference."""
    client = httpclient.InferenceServerClient(url=server.address)
    inp = httpclient.InferInput("features", list(rows.shape), "FP32")
    inp.set_data_from_numpy(rows)
    result = client.infer("titanic", [inp])
    return result.as_numpy("probability"), result.as_numpy("margin")


def url(server, path):
    return f"http://{server.address}{path}"


@pytest.mark.parametrize("path", ["/v1/models/titanic:predict", "/v1/models/titanic/versions/1:predict",
                                  "/v1/models/titanic/labels/stable:predict"])
def test_tf_row_format_matches_v2(server, rows, v2, path):
    # json.dumps of float32 values widened to float64, as TF Serving clients send them.
    answer = requests.post(url(server, path), json={"signature_name": "serving_default", "instances": rows.tolist()})
    assert answer.status_code == 200, answer.text
    predictions = answer.json()["predictions"]
    assert len(predictions) == len(rows)
    np.testing.assert_array_equal(np.array([p["probability"] for p in predictions], dtype=np.float32), v2[0])
    np.testing.assert_array_equal(np.array([p["margin"] for p in predictions], dtype=np.float32), v2[1])


def test_tf_named_instances_and_columnar_format_match_v2(server, rows, v2):
    named = requests.post(url(server, "/v1/models/titanic:predict"),
                          json={"instances": [{"features": r} for r in rows.tolist()]})
    assert named.status_code == 200, named.text
    np.testing.assert_array_equal(np.array([p["probability"] for p in named.json()["predictions"]], dtype=np.float32),
                                  v2[0])
    columnar = requests.post(url(server, "/v1/models/titanic:predict"), json={"inputs": rows.tolist()})
    assert columnar.status_code == 200, columnar.text
    outputs = columnar.json()["outputs"]
    np.testing.assert_array_equal(np.array(outputs["probability"], dtype=np.float32), v2[0])
    np.testing.assert_array_equal(np.array(outputs["margin"], dtype=np.float32), v2[1])


def test_tf_several_inputs_and_b64(server):
    pair = requests.post(url(server, "/v1/models/pair:predict"),
                         json={"instances": [{"a": [1.5, 2], "b": 7}, {"b": -1, "a": [3, 4]}]})
    assert pair.status_code == 200, pair.text
    assert pair.json()["predictions"] == [{"a_out": [1.5, 2.0], "b_out": 7}, {"a_out": [3.0, 4.0], "b_out": -1}]
    raw = bytes([0xFF, 0, 1])
    text = requests.post(url(server, "/v1/models/text:predict"),
                         json={"instances": [{"b64": base64.b64encode(raw).decode()}, "plain é"]})
    assert text.status_code == 200, text.text
    first, second = text.json()["predictions"]
    assert base64.b64decode(first["b64"]) == raw
    assert second == "plain é"


def test_tf_outputs_named_bytes_come_back_in_base64(server):
    raw = bytes([0xFF, 0, 1])
    r = requests.post(url(server, "/v1/models/blob:predict"),
                      json={"instances": ["hello", {"b64": base64.b64encode(raw).decode()}]})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": [{"b64": base64.b64encode(b"hello").decode()},
                                        {"b64": base64.b64encode(raw).decode()}]}
    r = requests.post(url(server, "/v1/models/blob:predict"), json={"inputs": ["hi"]})
    assert r.json() == {"outputs": [{"b64": "aGk="}]}


def test_tf_status_and_metadata_by_label(server):
    status = requests.get(url(server, "/v1/models/titanic/labels/stable"))
    assert status.status_code == 200, status.text
    assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"
    meta = requests.get(url(server, "/v1/models/titanic/labels/stable/metadata"))
    assert meta.status_code == 200, meta.text
    assert "serving_default" in meta.json()["metadata"]["signature_def"]["signature_def"]


def test_tf_status_and_metadata(server):
    status = requests.get(url(server, "/v1/models/titanic"))
    assert status.status_code == 200
    assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"
    meta = requests.get(url(server, "/v1/models/titanic/versions/1/metadata")).json()
    signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    features_spec = signature["inputs"]["features"]
    assert features_spec["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in features_spec["tensor_shape"]["dim"]] == ["-1", "12"]
    assert set(signature["outputs"]) == {"probability", "margin"}


@pytest.mark.parametrize(
    "method, path, body, status, needle",
    [
        ("POST", "/v1/models/nope:predict", {"instances": [[1]]}, 404, "nope"),
        ("POST", "/v1/models/titanic:predict", {"instances": [[1] * 12, [1] * 11]}, 400, "rectangular"),
        ("POST", "/v1/models/titanic:predict", {"instances": [[1] * 11]}, 400, "Expected [-1,12], got [1,11]"),
        ("POST", "/v1/models/titanic:predict", {"instances": [["a"] * 12]}, 400, "expected a number"),
        ("POST", "/v1/models/titanic:predict", {"instance": [[1] * 12]}, 400, "neither 'instances' nor 'inputs'"),
        ("POST", "/v1/models/titanic:classify", {"examples": []}, 400, "'examples' is an empty list"),
        ("GET", "/v1/models/titanic:predict", None, 405, "takes POST"),
        ("GET", "/v1/models/titanic/versions/9", None, 404, "version"),
    ],
)
def test_tf_errors(server, method, path, body, status, needle):
    answer = requests.request(method, url(server, path), json=body)
    assert answer.status_code == status, answer.text
    assert needle in answer.json()["error"]


def test_tf_unknown_fields_are_ignored(server, rows, v2):
    answer = requests.post(url(server, "/v1/models/titanic:predict"),
                           json={"instances": rows.tolist(), "extra": {"deep": [1, {"x": None}]}})
    assert answer.status_code == 200, answer.text


def test_clipper_input_and_input_batch_match_v2(server, rows, v2):
    one = requests.post(url(server, "/titanic/predict"), json={"input": rows[0].tolist()})
    assert one.status_code == 200, one.text
    body = one.json()
    assert body["default"] is False and isinstance(body["query_id"], int)
    assert np.float32(body["output"]) == v2[0][0]
    batch = requests.post(url(server, "/titanic/predict"), json={"input_batch": rows.tolist()})
    assert batch.status_code == 200, batch.text
    predictions = batch.json()["batch_predictions"]
    np.testing.assert_array_equal(np.array([p["output"] for p in predictions], dtype=np.float32), v2[0])
    ids = [p["query_id"] for p in predictions]
    assert ids == list(range(ids[0], ids[0] + len(rows)))


def test_clipper_answers_a_batch_of_one_as_one_query(server, rows, v2):
    """Clipper's query frontend (get_batch_prediction_response_content)
    answers a batch of one with the query's own object."""
    answer = requests.post(url(server, "/titanic/predict"), json={"input_batch": rows[:1].tolist()})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"query_id", "output", "default"}, body
    assert np.float32(body["output"]) == v2[0][0]


def test_clipper_version_picks_the_model_version(server, rows):
    """`"version"` asks for a version of the app's model; the answer
    equals V2's for that version, and the version's own statistics count
    it."""
    client = httpclient.InferenceServerClient(url=server.address)
    inp = httpclient.InferInput("features", [1, 12], "FP32")
    inp.set_data_from_numpy(rows[:1])
    want = {v: client.infer("versioned", [inp], model_version=v).as_numpy("probability")[0] for v in ("1", "2")}
    assert want["1"] != want["2"], "the versions must differ for this to prove anything"

    def successes(version):
        stats = client.get_inference_statistics("versioned", version)["model_stats"][0]
        return stats["inference_stats"]["success"]["count"]

    before = successes("1")
    for version, expected in (("1", want["1"]), ("2", want["2"]), (None, want["2"])):
        body = {"input": rows[0].tolist()}
        if version:
            body["version"] = version
        answer = requests.post(url(server, "/versioned/predict"), json=body)
        assert answer.status_code == 200, answer.text
        assert np.float32(answer.json()["output"]) == expected, version
    assert successes("1") == before + 1
    missing = requests.post(url(server, "/versioned/predict"), json={"input": rows[0].tolist(), "version": "7"})
    assert missing.status_code == 400, missing.text
    assert missing.json() == {"error": "Query processing error",
                              "cause": "Requested version: 7 does not exist for model: versioned"}


def test_clipper_bytes_inputs_are_base64(server):
    """Clipper's `bytes` input type: each query a base64 string, for a
    UINT8 input."""
    queries = [bytes([0, 1, 2, 255]), b"wire"]
    batch = requests.post(url(server, "/raw/predict"),
                          json={"input_batch": [base64.b64encode(q).decode() for q in queries]})
    assert batch.status_code == 200, batch.text
    assert [p["output"] for p in batch.json()["batch_predictions"]] == [list(q) for q in queries]
    one = requests.post(url(server, "/raw/predict"), json={"input": base64.b64encode(b"\x07\x08").decode()})
    assert one.status_code == 200, one.text
    assert one.json()["output"] == [7, 8]
    bad = requests.post(url(server, "/raw/predict"), json={"input": "not base64!"})
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"] == "Json error"
    assert "invalid base64" in bad.json()["cause"]


def test_clipper_accepts_integer_literals_for_floats(server):
    ints = requests.post(url(server, "/titanic/predict"), json={"input": [1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]})
    floats = requests.post(url(server, "/titanic/predict"),
                           json={"input": [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]})
    assert ints.status_code == 200, ints.text
    assert ints.json()["output"] == floats.json()["output"]


def test_clipper_wrong_method_is_a_clipper_error(server):
    answer = requests.get(url(server, "/titanic/predict"))
    assert answer.status_code == 405
    assert "takes POST" in answer.json()["cause"]


@pytest.mark.parametrize(
    "path, body, status, needle",
    [
        ("/nope/predict", b'{"input": [1]}', 404, "no application 'nope'"),
        ("/titanic/predict", b'{"input": [1, 2', 400, "ends"),
        ("/titanic/predict", b'{"inputs": [1]}', 400, "neither 'input' nor 'input_batch'"),
        ("/titanic/predict", b'{"input_batch": [[1, 2], [3]]}', 400, "rectangular"),
        ("/pair/predict", b'{"input": [1, 2]}', 400, "2 inputs"),
    ],
)
def test_clipper_errors(server, path, body, status, needle):
    answer = requests.post(url(server, path), data=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert set(error) == {"error", "cause"}
    assert needle in error["cause"], error
    # Clipper's two titles: a body it cannot read, and everything else.
    assert error["error"] == ("Json error" if status == 400 else "Query processing error"), error


def test_tf_signature_names_are_checked_as_tf_serving_checks_them(server):
    """`signature_name` on :predict is the model's one signature (or its
    name), else refused, as TF Serving refuses it; :regress also takes its
    method name."""
    body = {"instances": [[3, 1, 22, 1, 0, 7.25, 0, 0, 1, 0, 0, 1]]}
    for name in ["serving_default", "titanic", ""]:
        ok = requests.post(url(server, "/v1/models/titanic:predict"), json={**body, "signature_name": name})
        assert ok.status_code == 200, (name, ok.text)
    bad = requests.post(url(server, "/v1/models/titanic:predict"), json={**body, "signature_name": "nope"})
    assert bad.status_code == 400 and "serving signature 'nope' not found" in bad.json()["error"], bad.text
    regress = requests.post(url(server, "/v1/models/titanic:regress"), json={
        "signature_name": "tensorflow/serving/regress",
        "examples": [{"features": body["instances"][0]}]})
    assert regress.status_code == 200, regress.text


def test_version_labels_pick_their_versions_and_an_unknown_one_is_refused(server, rows):
    """`[version_labels]`: a label answers with the version it names; one
    the model does not have is a 404, as TF Serving refuses it."""
    client = httpclient.InferenceServerClient(url=server.address)
    for label, version in [("stable", "1"), ("canary", "2")]:
        inp = httpclient.InferInput("features", list(rows.shape), "FP32")
        inp.set_data_from_numpy(rows)
        want = client.infer("versioned", [inp], model_version=version).as_numpy("probability")
        answer = requests.post(url(server, f"/v1/models/versioned/labels/{label}:predict"),
                               json={"instances": rows.tolist()})
        assert answer.status_code == 200, answer.text
        got = np.array([p["probability"] for p in answer.json()["predictions"]], dtype=np.float32)
        np.testing.assert_array_equal(got, want)
        status = requests.get(url(server, f"/v1/models/versioned/labels/{label}")).json()
        assert [v["version"] for v in status["model_version_status"]] == [version]
    for path in ["/v1/models/titanic/labels/nope:predict", "/v1/models/titanic/labels/canary"]:
        answer = requests.request("POST" if path.endswith(":predict") else "GET", url(server, path),
                                  json={"instances": rows.tolist()})
        assert answer.status_code == 404, answer.text
        assert "no version labelled" in answer.json()["error"], answer.text
