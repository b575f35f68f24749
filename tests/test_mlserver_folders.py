"""MLServer's model folders, served unchanged by wirespeed and by MLServer
itself, answer the same, field by field.

The folders are built as MLServer's own examples build them (its
repository's docs/examples: sklearn's mnist-svm, xgboost's mushroom
classifier, lightgbm's iris, catboost's classifier, mlflow's wine
ElasticNet, the custom runtime with `decode_args`, custom-json's JSON
echo, content types per request and per input, streaming's
`predict_stream`, versions side by side, adaptive batching, the
repository API), trained by the Python of .venv-mlserver, the models' own
environment, which wirespeed's workers run too. The same folders are
loaded into the session's MLServer through its repository API, and every
request goes to both with the same body, written as the examples write
it; the answers must agree as a client reads them: status, model name and
version, id, the response's and each output's parameters, names,
datatypes, shapes and values, model metadata, stream events, the
repository index. docs/migrating.md lists what differs, and why.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import RunningServer, free_port, wirespeed_binary
from mlserver_examples import MODELS_PYTHON, write_examples

@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The example folders, trained by the models' own Python."""
    if not MODELS_PYTHON.exists():
        pytest.fail(f"{MODELS_PYTHON} is missing: scripts/test installs MLServer into .venv-mlserver")
    root = tmp_path_factory.mktemp("mlserver-examples")
    write_examples(root)
    return root


NAMES = ["mnist-svm", "iris-pipeline", "mushroom-xgboost", "iris-lgb", "linear", "columns", "content-types",
         "versioned", "batched", "wine-classifier", "echo", "json-hello-world", "text-model", "catboost"]


@pytest.fixture(scope="module")
def theirs(mlserver, folders):
    """The session's MLServer with the same folders, loaded through its
    repository API."""
    repo = Path(mlserver["repo"])
    for name in NAMES:
        shutil.copytree(folders / name, repo / name, dirs_exist_ok=True)
        r = requests.post(f"http://127.0.0.1:{mlserver['http']}/v2/repository/models/{name}/load", timeout=120)
        assert r.status_code == 200, r.text
    return f"http://127.0.0.1:{mlserver['http']}"


@pytest.fixture(scope="module")
def ours(folders):
    """wirespeed on the folders as they are, its workers on the models'
    Python."""
    server = RunningServer(folders, env={**os.environ, "WIRESPEED_PYTHON": str(MODELS_PYTHON)})
    yield server
    server.stop()


def post(base, path, body):
    r = requests.post(base + path, json=body, timeout=60)
    return r.status_code, r.json()


def same_outputs(ours, theirs):
    """The answers agree field by field: model name and version (absent in
    both when the settings name none), the request's id when it had one;
    each output's name, datatype, shape and parameters (its content type)
    exactly, values to FP32's precision (numbers) or exactly (integers and
    strings); the response's parameters exactly, and an id in both (a
    UUID each invents when the request has none)."""
    assert ours["model_name"] == theirs["model_name"], (ours, theirs)
    assert ours.get("model_version") == theirs.get("model_version"), (ours, theirs)
    assert ours.get("parameters") == theirs.get("parameters"), (ours, theirs)
    assert ("id" in ours) == ("id" in theirs), (ours, theirs)
    assert [o["name"] for o in ours["outputs"]] == [o["name"] for o in theirs["outputs"]], (ours, theirs)
    for mine, other in zip(ours["outputs"], theirs["outputs"]):
        assert mine["datatype"] == other["datatype"], (mine, other)
        assert mine["shape"] == other["shape"], (mine, other)
        assert mine.get("parameters") == other.get("parameters"), (mine, other)
        a, b = np.array(mine["data"]).reshape(-1), np.array(other["data"]).reshape(-1)
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-5, atol=1e-6)
        else:
            assert a.tolist() == b.tolist(), (mine, other)


def test_the_sklearn_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "digits.npy")
    # The example's request, to the example's versioned endpoint.
    for rows in (x[0:1], x):
        body = {"inputs": [{"name": "predict", "shape": list(rows.shape), "datatype": "FP32", "data": rows.tolist()}]}
        path = "/v2/models/mnist-svm/versions/v0.1.0/infer"
        status, mine = post(f"http://{ours.address}", path, body)
        assert status == 200, mine
        _, other = post(theirs, path, body)
        same_outputs(mine, other)
        assert mine["model_version"] == other["model_version"] == "v0.1.0"


def test_a_pipelines_outputs_and_default_function_answer_as_mlserver(ours, theirs):
    rows = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]
    for outputs in (None, [{"name": "predict"}], [{"name": "predict"}, {"name": "predict_proba"}]):
        body = {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP64", "data": rows}]}
        if outputs:
            body["outputs"] = outputs
        status, mine = post(f"http://{ours.address}", "/v2/models/iris-pipeline/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/iris-pipeline/infer", body)
        same_outputs(mine, other)


def test_the_xgboost_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "mushrooms.npy")
    for outputs in (None, [{"name": "predict_proba"}], [{"name": "predict_proba"}, {"name": "predict"}]):
        body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]}
        if outputs:
            body["outputs"] = outputs
        status, mine = post(f"http://{ours.address}", "/v2/models/mushroom-xgboost/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/mushroom-xgboost/infer", body)
        same_outputs(mine, other)


def test_versions_of_one_model_answer_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "mushrooms.npy")
    body = {"inputs": [{"name": "predict", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}],
            "outputs": [{"name": "predict_proba"}]}
    answers = {}
    # Each version by name, and the newest when none is named.
    for path in ("/v2/models/versioned/versions/v0.1.0/infer", "/v2/models/versioned/versions/v0.2.0/infer",
                 "/v2/models/versioned/infer"):
        status, mine = post(f"http://{ours.address}", path, body)
        assert status == 200, mine
        _, other = post(theirs, path, body)
        same_outputs(mine, other)
        assert mine["model_version"] == other["model_version"], (mine, other)
        answers[path] = mine["outputs"][0]["data"]
    assert answers["/v2/models/versioned/infer"] == answers["/v2/models/versioned/versions/v0.2.0/infer"]
    assert answers["/v2/models/versioned/versions/v0.1.0/infer"] != answers["/v2/models/versioned/infer"]


def test_the_lightgbm_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "iris.npy")
    body = {"inputs": [{"name": "predict-prob", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/iris-lgb/versions/v0.1.0/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/iris-lgb/versions/v0.1.0/infer", body)
    same_outputs(mine, other)


def test_a_custom_runtime_runs_unchanged(ours, theirs):
    body = {"inputs": [
        {"name": "marriage", "shape": [3], "datatype": "FP64", "data": [1.0, 2.0, 3.5]},
        {"name": "age", "shape": [3], "datatype": "FP64", "data": [30.0, 40.0, 50.0]},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/linear/infer", body)
    same_outputs(mine, other)
    np.testing.assert_allclose(mine["outputs"][0]["data"], [1.0 * 0.5 - 7.5 + 1.5, 1.0 - 10 + 1.5, 1.75 - 12.5 + 1.5])
    # Its own InferenceError is the client's mistake, as in MLServer: 400
    # with its message.
    body["inputs"][1]["data"] = [30.0, -1.0, 50.0]
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", body)
    their_status, other = post(theirs, "/v2/models/linear/infer", body)
    assert status == their_status == 400, (mine, other)
    assert "age cannot be negative" in mine["error"]


def test_pandas_content_types_reach_the_runtime_as_mlserver_decodes_them(ours, theirs):
    body = {
        "parameters": {"content_type": "pd"},
        "inputs": [
            {"name": "name", "shape": [2], "datatype": "BYTES", "data": ["apple", "pear"]},
            {"name": "price", "shape": [2], "datatype": "FP64", "data": [0.5, 1.25]},
            {"name": "quantity", "shape": [2], "datatype": "INT64", "data": [4, 2]},
        ],
    }
    status, mine = post(f"http://{ours.address}", "/v2/models/columns/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/columns/infer", body)
    same_outputs(mine, other)
    assert mine["outputs"][1]["data"] == [5, 4]


def test_each_inputs_content_type_reaches_the_runtime(ours, theirs):
    body = {"inputs": [
        {"name": "metadata-np", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4],
         "parameters": {"content_type": "np"}},
        {"name": "metadata-str", "datatype": "BYTES", "shape": [2], "data": ["hello", "world"],
         "parameters": {"content_type": "str"}},
        {"name": "metadata-b64", "datatype": "BYTES", "shape": [1], "data": ["aGVsbG8gd29ybGQ="],
         "parameters": {"content_type": "base64"}},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/content-types/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/content-types/infer", body)
    same_outputs(mine, other)
    assert mine["outputs"][0]["data"][1] == "metadata-str=list:['hello', 'world']", mine


def test_adaptive_batching_joins_a_custom_runtimes_requests_as_mlserver_does(ours, theirs):
    from concurrent.futures import ThreadPoolExecutor

    def ask(base, i):
        body = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [i, i, i]}]}
        return post(base, "/v2/models/batched/infer", body)

    for base in (f"http://{ours.address}", theirs):
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: ask(base, i), range(4)))
        for i, (status, answer) in enumerate(answers):
            assert status == 200, answer
            outputs = {o["name"]: o for o in answer["outputs"]}
            assert outputs["total"]["data"] == [3.0 * i] and outputs["total"]["shape"] == [1, 1], answer
            # All four in one call of predict.
            assert outputs["rows"]["data"] == [4], (base, answer)


def test_the_mlflow_example_answers_as_mlserver(ours, theirs, folders):
    rows = json.loads((folders / "wine.json").read_text())
    # The example's request: one FP32 input per column.
    body = {"inputs": [
        {"name": column, "shape": [3], "datatype": "FP32", "data": list(values.values())}
        for column, values in rows.items()
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/wine-classifier/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/wine-classifier/infer", body)
    same_outputs(mine, other)


def test_tritonclient_calls_an_mlserver_folder_unchanged(ours, theirs, folders):
    x = np.load(folders / "digits.npy")
    answers = []
    for address in (ours.address, theirs.removeprefix("http://")):
        client = httpclient.InferenceServerClient(address)
        assert client.is_model_ready("mnist-svm")
        inp = httpclient.InferInput("predict", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=False)
        answers.append(client.infer("mnist-svm", [inp]).as_numpy("predict"))
    np.testing.assert_array_equal(answers[0], answers[1])


def test_a_request_the_runtime_cannot_take_is_a_clear_400(ours):
    two = {"inputs": [
        {"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    ]}
    status, answer = post(f"http://{ours.address}", "/v2/models/mushroom-xgboost/infer", two)
    assert status == 400 and "takes one input, and the request gives 2" in answer["error"], answer
    wide = {"inputs": [{"name": "a", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    status, answer = post(f"http://{ours.address}", "/v2/models/mnist-svm/infer", wide)
    assert status == 400 and "Expected [-1,64], got [1,3]" in answer["error"], answer
    status, answer = post(f"http://{ours.address}", "/v2/models/iris-pipeline/infer",
                          {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
                           "outputs": [{"name": "transform"}]})
    assert status == 400 and "transform" in answer["error"], answer


def test_asked_it_listens_where_mlserver_would(folders, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(folders / "iris-lgb", root / "iris-lgb")
    http, grpc = free_port(), free_port()
    (root / "settings.json").write_text(json.dumps({"host": "127.0.0.1", "http_port": http, "grpc_port": grpc}))
    process = subprocess.Popen([str(wirespeed_binary()), "serve", "--models", str(root), "--ports-from-settings"],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        seen = set()
        for line in process.stderr:
            for port in (http, grpc):
                if f"127.0.0.1:{port}" in line and "listening on" in line:
                    seen.add(port)
            if seen == {http, grpc}:
                break
        assert seen == {http, grpc}
        x = [[5.1, 3.5, 1.4, 0.2]]
        status, answer = post(f"http://127.0.0.1:{http}", "/v2/models/iris-lgb/infer",
                              {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]})
        assert status == 200 and answer["outputs"][0]["shape"] == [1, 3], answer
    finally:
        process.terminate()
        process.wait(timeout=15)
    # Asked twice where to listen: refused, naming both.
    out = subprocess.run([str(wirespeed_binary()), "serve", "--models", str(root), "--ports-from-settings",
                          "--http", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--ports-from-settings" in out.stderr and "--http" in out.stderr, out.stderr


def test_a_runtime_gets_mlservers_own_types_and_answers_them_back(ours, theirs):
    for body in (
        {"id": "r-1", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, 2, 3, 4]}]},
        {"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["a", "b"],
                     "parameters": {"content_type": "str"}}]},
    ):
        status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/echo/infer", body)
        same_outputs(mine, other)
        if "id" in body:
            assert mine["id"] == other["id"] == body["id"], (mine, other)


def test_what_mlservers_schema_takes_is_taken(ours, theirs):
    # pydantic's .dict() of a request writes its unset fields as null; one
    # value may stand for the whole data.
    nulls = {"id": None, "parameters": None, "outputs": None, "inputs": [
        {"name": "marriage", "shape": [1], "datatype": "FP64", "data": [1.0], "parameters": None},
        {"name": "age", "shape": [1], "datatype": "FP64", "data": 30.0, "parameters": {"content_type": None}},
    ]}
    status, mine = post(f"http://{ours.address}", "/v2/models/linear/infer", nulls)
    their_status, other = post(theirs, "/v2/models/linear/infer", nulls)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)
    one = {"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": "hello world"}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", one)
    their_status, other = post(theirs, "/v2/models/echo/infer", one)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)


def test_outputs_carry_their_content_type_over_grpc_as_mlserver(ours, theirs, mlserver, folders):
    import tritonclient.grpc as grpcclient

    x = np.load(folders / "iris.npy")[:2]
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        client = grpcclient.InferenceServerClient(address)
        inp = grpcclient.InferInput("predict-prob", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        answer = client.infer("iris-lgb", [inp], model_version="v0.1.0")
        outputs = answer.get_response(as_json=True)["outputs"]
        # MLServer sets an empty `contents` beside the raw bytes; an unset
        # message reads the same.
        outputs = [{k: v for k, v in o.items() if (k, v) != ("contents", {})} for o in outputs]
        answers.append((outputs, answer.as_numpy("predict")))
    (mine, mine_values), (other, other_values) = answers
    assert mine == other, (mine, other)
    assert mine[0]["parameters"] == {"content_type": {"string_param": "np"}}, mine
    np.testing.assert_allclose(mine_values, other_values, rtol=1e-6)


def test_models_unload_and_load_through_the_repository_api_as_mlservers_do(ours, theirs):
    """MLServer always allows its repository API; so does wirespeed on its
    models when no --model-control-mode is given. An unloaded model keeps
    its version in the index."""
    indexes = {}
    for base in (f"http://{ours.address}", theirs):
        assert requests.post(f"{base}/v2/repository/models/iris-lgb/unload", timeout=60).status_code == 200
        index = requests.post(f"{base}/v2/repository/index", json={}, timeout=60).json()
        entry = [e for e in index if e["name"] == "iris-lgb"]
        assert [(e["version"], e["state"]) for e in entry] == [("v0.1.0", "UNAVAILABLE")], (base, index)
        # The index entry by entry (MLServer lists them in its own order).
        indexes[base] = sorted(json.dumps(e, sort_keys=True) for e in index if e["name"] in NAMES)
        assert requests.get(f"{base}/v2/models/iris-lgb/ready", timeout=60).status_code != 200
        assert requests.post(f"{base}/v2/repository/models/iris-lgb/load", timeout=120).status_code == 200
        assert requests.get(f"{base}/v2/models/iris-lgb/ready", timeout=60).status_code == 200
    assert indexes[f"http://{ours.address}"] == indexes[theirs], indexes


def test_the_custom_json_example_answers_as_mlserver(ours, theirs, mlserver):
    """MLServer's custom-json example: a string whose shape is its length
    in bytes, over REST as its notebook sends it and over gRPC as
    MLServer's own converter builds the message (bytes_contents)."""
    import grpc
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    text = json.dumps({"name": "Foo Bar", "message": "Hello from Client (REST)!"})
    body = {"inputs": [{"name": "echo_request", "shape": [len(text)], "datatype": "BYTES", "data": [text]}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/json-hello-world/infer", body)
    assert status == 200, mine
    _, other = post(theirs, "/v2/models/json-hello-world/infer", body)
    same_outputs(mine, other)
    answer = json.loads(mine["outputs"][0]["data"][0])
    # The runtime saw the shape as the client wrote it.
    assert answer["shapes"] == {"echo_request": [len(text)]} and answer["request"]["echo_request"]["name"] == "Foo Bar"
    assert mine["outputs"][0]["shape"] == [len(mine["outputs"][0]["data"][0])]

    # Two strings of 11 bytes as [2, 11], as MLServer's pandas requests write them.
    two = {"inputs": [{"name": "echo_request", "shape": [2, 2], "datatype": "BYTES", "data": ["{}", "{}"]}]}
    status, mine = post(f"http://{ours.address}", "/v2/models/echo/infer", two)
    their_status, other = post(theirs, "/v2/models/echo/infer", two)
    assert status == their_status == 200, (mine, other)
    same_outputs(mine, other)

    raw = json.dumps({"name": "Foo Bar", "message": "Hello from Client (gRPC)!"}).encode()
    message = service_pb2.ModelInferRequest(model_name="json-hello-world", inputs=[
        service_pb2.ModelInferRequest.InferInputTensor(
            name="echo_request", datatype="BYTES", shape=[len(raw)],
            parameters={"content_type": service_pb2.InferParameter(string_param="str")},
            contents=service_pb2.InferTensorContents(bytes_contents=[raw]))])
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        with grpc.insecure_channel(address) as channel:
            response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=60)
        output = MessageToDict(response.outputs[0])
        output.pop("contents", None)
        contents = list(response.outputs[0].contents.bytes_contents) or [
            bytes(response.raw_output_contents[0][4:])]
        # Where the bytes lie: MLServer answers a request of typed contents
        # in typed contents (code written to its stubs reads them there).
        where = "raw_output_contents" if response.raw_output_contents else "contents.bytes_contents"
        answers.append((output, json.loads(contents[0]), where))
    assert answers[0] == answers[1], answers
    assert answers[0][1]["shapes"] == {"echo_request": [len(raw)]}


def test_the_streaming_example_streams_as_mlserver(ours, theirs):
    """MLServer's streaming example, its REST client as the example writes
    it (httpx-sse on generate_stream, the request's .dict()), and the same
    request to infer_stream: each event an InferenceResponse, the same
    words in the same order."""
    import httpx
    from httpx_sse import connect_sse

    request = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                           "data": ["What is the capital of France?"], "parameters": {"content_type": "str"}}],
               "outputs": [{"name": "output"}]}
    # What pydantic's .dict() of the request writes: its unset fields null.
    as_dict = {"id": None, "parameters": None, **request,
               "inputs": [{**request["inputs"][0]}], "outputs": [{"name": "output", "parameters": None}]}
    streams = {}
    for base in (f"http://{ours.address}", theirs):
        for endpoint, body in (("generate_stream", as_dict), ("infer_stream", request)):
            with httpx.Client(timeout=60) as client:
                with connect_sse(client, "POST", f"{base}/v2/models/text-model/{endpoint}", json=body) as events:
                    assert events.response.status_code == 200, events.response.read()
                    streams[base, endpoint] = [json.loads(sse.data) for sse in events.iter_sse()]
    words = ["What", " is", " the", " capital", " of", " France?"]
    for endpoint in ("generate_stream", "infer_stream"):
        mine, other = streams[f"http://{ours.address}", endpoint], streams[theirs, endpoint]
        assert len(mine) == len(other) == len(words), (mine, other)
        for m, o in zip(mine, other):
            # MLServer's stream events keep the CloudEvents headers its
            # middleware sets (HTTP headers of a unary answer) in the
            # response's parameters.
            o["parameters"].pop("headers", None)
            same_outputs(m, o)
        assert [m["outputs"][0]["data"] for m in mine] == [[w] for w in words], mine


# The streaming example's gRPC client, as its notebook writes it, run by
# the Python MLServer is installed in (its own stub and converters).
GRPC_STREAM_CLIENT = r'''
import asyncio, json, sys

import grpc
import mlserver.grpc.converters as converters
import mlserver.grpc.dataplane_pb2_grpc as dataplane
import mlserver.types as types
from mlserver.codecs import StringCodec

inference_request = types.InferenceRequest.model_validate_json(sys.argv[2])
inference_request.inputs[0] = StringCodec.encode_input("prompt", inference_request.inputs[0].data.root)
inference_request_g = converters.ModelInferRequestConverter.from_types(
    inference_request, model_name="text-model", model_version=None)


async def get_inference_request_stream(inference_request):
    yield inference_request


async def main():
    answers = []
    async with grpc.aio.insecure_channel(sys.argv[1]) as grpc_channel:
        grpc_stub = dataplane.GRPCInferenceServiceStub(grpc_channel)
        async for response in grpc_stub.ModelStreamInfer(get_inference_request_stream(inference_request_g)):
            response = converters.ModelInferResponseConverter.to_types(response)
            answers.append({"model_name": response.model_name,
                            "words": StringCodec.decode_output(response.outputs[0]),
                            "shape": response.outputs[0].shape,
                            "parameters": response.outputs[0].parameters.model_dump(exclude_none=True)})
    print(json.dumps(answers))

asyncio.run(main())
'''


def test_the_streaming_examples_grpc_client_reads_our_stream_as_mlservers(ours, mlserver):
    request = json.dumps({"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES",
                                      "data": ["What is the capital of France?"],
                                      "parameters": {"content_type": "str"}}],
                          "outputs": [{"name": "output"}]})
    answers = []
    for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}"):
        out = subprocess.run([str(MODELS_PYTHON), "-c", GRPC_STREAM_CLIENT, address, request],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        answers.append(json.loads(out.stdout))
    assert answers[0] == answers[1], answers
    assert [a["words"] for a in answers[0]] == [["What"], [" is"], [" the"], [" capital"], [" of"], [" France?"]]


def test_model_metadata_is_mlservers(ours, theirs, mlserver):
    """What MLServer answers of a model is what its settings say (declared
    tensors, versions and platform), over REST and gRPC."""
    import tritonclient.grpc as grpcclient

    for name in NAMES:
        mine = requests.get(f"http://{ours.address}/v2/models/{name}", timeout=60)
        other = requests.get(f"{theirs}/v2/models/{name}", timeout=60)
        assert mine.status_code == other.status_code == 200, (name, mine.text, other.text)
        assert mine.json() == other.json(), name
    for name in ("text-model", "mnist-svm", "batched"):
        answers = [grpcclient.InferenceServerClient(address).get_model_metadata(name, as_json=True)
                   for address in (f"127.0.0.1:{ours.grpc_port}", f"127.0.0.1:{mlserver['grpc']}")]
        assert answers[0] == answers[1], answers


def test_the_catboost_example_answers_as_mlserver(ours, theirs, folders):
    x = np.load(folders / "catboost.npy")
    for rows in (x[0:1], x):
        body = {"inputs": [{"name": "predict-prob", "shape": list(rows.shape), "datatype": "FP32",
                            "data": rows.tolist()}]}
        status, mine = post(f"http://{ours.address}", "/v2/models/catboost/versions/v0.1.0/infer", body)
        assert status == 200, mine
        _, other = post(theirs, "/v2/models/catboost/versions/v0.1.0/infer", body)
        same_outputs(mine, other)
