"""Python models against the real Triton: the same repository served by
Triton 2.51 (tests/triton_peer.py) and by wirespeed, the same requests
through tritonclient, the answers compared field by field.

What a model's code sees (`initialize`'s args), a model that is not
decoupled answering through its response sender, and every error a model
makes: the text, the HTTP status and the gRPC code of an exception in
`execute`, of a misused response sender, of the wrong number of
responses, of each `TritonError` code, and a decoupled model's errors on
the gRPC stream, which Triton answers with one error per request.

Where Triton 2.51 is wrong we do not follow it, and say so in
docs/triton.md ("Where wirespeed differs from Triton"): a model that is
not decoupled and sends two responses gets Triton a body of a response
followed by an error object.
"""

import concurrent.futures
import json
import os
import queue
import re
import sys
import textwrap

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import running_requests, wait_until
from triton_peer import side_by_side

# wirespeed's workers run the models on the tests' Python (numpy's).
os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

DECOUPLED = "model_transaction_policy { decoupled: true }"

# name: (extra config.pbtxt lines, model.py)
MODELS = {
    "init_args": ("", '''
        import json
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.args = dict(args)

            def execute(self, requests):
                out = np.array([json.dumps(self.args).encode()], dtype=np.object_)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
    '''),
    "one_sender": ("", '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                    request.get_response_sender().send(
                        pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    '''),
    "final_first": ("", '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    '''),
    "wrong_count": ("", '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                x = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)])] * (len(requests) + 1)
    '''),
    "not_a_list": ("", '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                x = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
                return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)])
    '''),
    "raises": ("", '''
        def check(x):
            raise ValueError("no good: %d" % x)

        class TritonPythonModel:
            def execute(self, requests):
                check(3)
    '''),
    "error_codes": ("", '''
        import triton_python_backend_utils as pb_utils

        CODES = [None, "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE",
                 "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED"]

        class TritonPythonModel:
            def execute(self, requests):
                answers = []
                for request in requests:
                    code = CODES[int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])]
                    error = (pb_utils.TritonError("bad thing") if code is None
                             else pb_utils.TritonError("bad thing", getattr(pb_utils.TritonError, code)))
                    answers.append(pb_utils.InferenceResponse(error=error))
                return answers
    '''),
    "decoupled_raises": (DECOUPLED, '''
        class TritonPythonModel:
            def execute(self, requests):
                raise ValueError("no good")
    '''),
    "decoupled_returns": (DECOUPLED, '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                x = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)])]
    '''),
    "decoupled_sends_then_raises": (DECOUPLED, '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                    request.get_response_sender().send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
                raise ValueError("after one")
    '''),
    # Each request waits until `IN[0]` requests have started, then answers
    # how many had: requests that run one at a time would each wait out
    # the bound, and answer -1.
    "decoupled_async": (DECOUPLED, '''
        import asyncio
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.started = 0
                self.everyone = None

            async def execute(self, requests):
                if self.everyone is None:
                    self.everyone = asyncio.Event()
                self.started += len(requests)
                wanted = int(pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()[0])
                if self.started >= wanted:
                    self.everyone.set()
                try:
                    await asyncio.wait_for(self.everyone.wait(), 10)
                    seen = float(self.started)
                except asyncio.TimeoutError:
                    seen = -1.0
                for request in requests:
                    request.get_response_sender().send(
                        pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([seen, 0], np.float32))]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    '''),
    # Requests that queue behind one held at a gate (a file in the
    # model's folder, which the test creates), each answered on its own:
    # 5 with an error response, 7 by raising, the others doubled.
    "gated": ("", '''
        import os
        import time
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.folder = args["model_repository"]

            def execute(self, requests):
                answers = []
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                    if x[0] < 0:
                        open(os.path.join(self.folder, "started"), "w").close()
                        until = time.monotonic() + 60
                        while not os.path.exists(os.path.join(self.folder, "gate")) and time.monotonic() < until:
                            time.sleep(0.005)
                    if x[0] == 5:
                        answers.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("five is refused")))
                    elif x[0] == 7:
                        raise ValueError("seven raised")
                    else:
                        answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
                return answers
    '''),
}

ECHO_A = '''
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "A").as_numpy())]) for r in requests]
'''

# Models with configurations of their own, for input validation: a
# variable dimension and an optional input; a batch dimension.
OWN_CONFIGS = {
    "shape2": ("""
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] },
                { name: "B" data_type: TYPE_INT64 dims: [ 1 ] optional: true } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
        """, ECHO_A),
    "batched": ("""
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
        """, ECHO_A),
}

ADD_SUB = """
    name: "add_sub"
    backend: "python"
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """


def ensemble(name, first):
    """Triton's ensemble of two add_sub-like steps, `first` then add_sub."""
    return f"""
    name: "{name}"
    platform: "ensemble"
    input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    output [ {{ name: "S" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "D" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    ensemble_scheduling {{ step [
      {{ model_name: "{first}" model_version: -1
         input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
         output_map {{ key: "OUTPUT0" value: "s1" }} output_map {{ key: "OUTPUT1" value: "d1" }} }},
      {{ model_name: "add_sub" model_version: -1
         input_map {{ key: "INPUT0" value: "s1" }} input_map {{ key: "INPUT1" value: "d1" }}
         output_map {{ key: "OUTPUT0" value: "S" }} output_map {{ key: "OUTPUT1" value: "D" }} }} ] }}
    """


# Models whose whole config.pbtxt is given: Triton's add_sub, one that
# fails the same way, and ensembles of them.
WHOLE_CONFIGS = {
    "add_sub": (ADD_SUB, '''
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
                    out.append(pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
                return out
    '''),
    "broken_step": (ADD_SUB.replace('"add_sub"', '"broken_step"'), '''
        class TritonPythonModel:
            def execute(self, requests):
                raise ValueError("step broke")
    '''),
    "ens": (ensemble("ens", "add_sub"), None),
    "ens_broken": (ensemble("ens_broken", "broken_step"), None),
    # An ensemble whose first step is the ensemble above.
    "ens_nested": ('''
        name: "ens_nested"
        platform: "ensemble"
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "D" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [
          { model_name: "ens" model_version: -1
            input_map { key: "A" value: "A" } input_map { key: "B" value: "B" }
            output_map { key: "S" value: "s1" } output_map { key: "D" value: "d1" } },
          { model_name: "add_sub" model_version: -1
            input_map { key: "INPUT0" value: "s1" } input_map { key: "INPUT1" value: "d1" }
            output_map { key: "OUTPUT0" value: "S" } output_map { key: "OUTPUT1" value: "D" } } ] }
        ''', None),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """One repository of the models above."""
    repo = tmp_path_factory.mktemp("triton_python_repo")
    for name, (config, code) in WHOLE_CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
        if code:
            (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
    for name, (tensors, code) in OWN_CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\n' + textwrap.dedent(tensors))
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
    for name, (extra, code) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        out = ("TYPE_STRING", 1) if name == "init_args" else ("TYPE_FP32", 2)
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(f"""\
            name: "{name}"
            backend: "python"
            input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
            output [ {{ name: "OUT" data_type: {out[0]} dims: [ {out[1]} ] }} ]
            instance_group [ {{ kind: KIND_CPU count: 1 }} ]
            {extra}
            """))
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
    return repo


@pytest.fixture(scope="module")
def servers(repo, tmp_path_factory):
    """Triton and wirespeed on the repository."""
    with side_by_side(repo, tmp_path_factory.mktemp("triton_log") / "triton.log") as servers:
        yield servers


def body(values):
    return {"inputs": [{"name": "IN", "shape": [2], "datatype": "FP32", "data": list(values)}]}


def rest(server, model, values=(1.0, 2.0)):
    """The answer to a V2 REST request: status and JSON."""
    answer = requests.post(f"http://{server.address}/v2/models/{model}/infer", json=body(values), timeout=30)
    return answer.status_code, answer.json()


def grpc(server, model, values=(1.0, 2.0)):
    """The answer to a gRPC ModelInfer: ("ok", outputs) or (code, message)."""
    client = grpcclient.InferenceServerClient(server.grpc_address)
    x = grpcclient.InferInput("IN", [2], "FP32")
    x.set_data_from_numpy(np.array(values, dtype=np.float32))
    try:
        result = client.infer(model, [x])
    except InferenceServerException as e:
        return e.status(), e.message()
    finally:
        client.close()
    return "ok", result.as_numpy("OUT").tolist()


def both(servers, ask, *args):
    return {name: ask(server, *args) for name, server in servers.items()}


def test_initialize_gets_the_args_triton_gives(servers):
    got = {}
    for name, server in servers.items():
        status, answer = rest(server, "init_args")
        assert status == 200, (name, answer)
        got[name] = json.loads(answer["outputs"][0]["data"][0])
    triton, ours = got["triton"], got["wirespeed"]
    assert sorted(ours) == sorted(triton)
    for key in ("model_instance_kind", "model_instance_name", "model_instance_device_id",
                "model_repository", "model_version", "model_name"):
        assert ours[key] == triton[key], key
    # The configuration as JSON: what a model reads of it.
    config = {name: json.loads(args["model_config"]) for name, args in got.items()}
    for key in ("name", "backend", "max_batch_size"):
        assert config["wirespeed"][key] == config["triton"][key], key
    for side in ("input", "output"):
        tensors = {name: [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in c[side]]
                   for name, c in config.items()}
        assert tensors["wirespeed"] == tensors["triton"], side
    groups = {name: [(g["name"], g["kind"], g["count"]) for g in c["instance_group"]] for name, c in config.items()}
    assert groups["wirespeed"] == groups["triton"]


@pytest.mark.parametrize("ask", [rest, grpc])
def test_a_model_that_is_not_decoupled_answers_through_its_response_sender(servers, ask):
    answers = both(servers, ask, "one_sender")
    assert answers["wirespeed"] == answers["triton"]
    if ask is rest:
        assert answers["triton"][0] == 200 and answers["triton"][1]["outputs"][0]["data"] == [2.0, 4.0]
    else:
        assert answers["triton"] == ("ok", [2.0, 4.0])


@pytest.mark.parametrize("model", ["final_first", "wrong_count", "not_a_list", "raises"])
@pytest.mark.parametrize("ask", [rest, grpc])
def test_a_model_that_fails_is_answered_in_tritons_words(servers, model, ask):
    answers = both(servers, ask, model)
    assert answers["wirespeed"] == answers["triton"]
    assert "Failed to process the request(s) for model" in str(answers["triton"])


@pytest.mark.parametrize("code", range(9))
def test_each_triton_error_code_has_tritons_status_and_text(servers, code):
    for ask in (rest, grpc):
        answers = both(servers, ask, "error_codes", (float(code), 0.0))
        assert answers["wirespeed"] == answers["triton"], ask.__name__


def test_requests_queued_behind_a_busy_instance_are_each_answered_as_triton_answers_them(repo, servers):
    """One instance held at a gate while ten more requests queue behind it
    (on wirespeed its keeper sends them to the worker in one message):
    each is answered on its own, the refused and the raising one with
    Triton's words, field by field as Triton answers them."""
    folder = repo / "gated"
    answers = {}
    for name, server in servers.items():
        for mark in ("started", "gate"):
            (folder / mark).unlink(missing_ok=True)
        with concurrent.futures.ThreadPoolExecutor(11) as pool:
            first = pool.submit(rest, server, "gated", (-1.0, 1.0))
            wait_until("the gated request to run", (folder / "started").exists)
            queued = [pool.submit(rest, server, "gated", (float(n), 1.0)) for n in range(10)]
            if name == "wirespeed":
                # All ten in the keeper's queue before the gate opens.
                wait_until("ten requests to queue", lambda: running_requests(server, "gated") == 11)
            (folder / "gate").touch()
            answers[name] = [first.result()] + [f.result() for f in queued]
    assert answers["wirespeed"] == answers["triton"]
    statuses = [status for status, _ in answers["triton"]]
    assert statuses.count(200) == 9 and answers["triton"][1][1]["outputs"][0]["data"] == [0.0, 2.0]
    assert "five is refused" in str(answers["triton"][6]) and "seven raised" in str(answers["triton"][8])


def stream(server, model):
    """What a gRPC stream client sees of one request: each response
    (outputs and final flag) until the final flag or an error; and that
    closing the stream then returns."""
    events = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    x = grpcclient.InferInput("IN", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    client.async_stream_infer(model, [x], request_id="7", enable_empty_final_response=True)
    seen = []
    while True:
        # The wait only bounds a stream that would hang.
        result, error = events.get(timeout=60)
        if error is not None:
            # An error ends the request: Triton sends nothing after it.
            seen.append(("error", error.message()))
            break
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        seen.append(("response", [o.name for o in response.outputs], final))
        if final:
            break
    client.stop_stream()
    client.close()
    return seen


@pytest.mark.parametrize("model", ["decoupled_raises", "decoupled_returns", "decoupled_sends_then_raises"])
def test_a_decoupled_model_that_fails_ends_its_stream_with_tritons_error(servers, model):
    answers = both(servers, stream, model)
    assert answers["wirespeed"] == answers["triton"]
    assert answers["triton"][-1][0] == "error"


def concurrent_stream(server, model, count):
    """`count` requests on one gRPC stream at once: each one's first output
    value, in the order the answers came."""
    events = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    for i in range(count):
        x = grpcclient.InferInput("IN", [2], "FP32")
        x.set_data_from_numpy(np.array([count, i], dtype=np.float32))
        client.async_stream_infer(model, [x], request_id=str(i))
    values = []
    while len(values) < count:
        result, error = events.get(timeout=60)
        assert error is None, error
        values.append(float(result.as_numpy("OUT")[0]))
    client.stop_stream()
    client.close()
    return values


def test_a_decoupled_models_coroutine_execute_runs_its_requests_at_once(servers):
    """Triton runs a decoupled model's `async def execute` in the
    background, so one instance holds several requests at once."""
    answers = both(servers, concurrent_stream, "decoupled_async", 3)
    assert answers["triton"] == [3.0, 3.0, 3.0]
    assert answers["wirespeed"] == answers["triton"]


def tensor(name, datatype, shape, data):
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


IN = tensor("IN", "FP32", [2], [1, 2])
A = tensor("A", "FP32", [1, 3], [1, 2, 3])

# What a client may get wrong, model by model: the inputs sent (and the
# outputs asked for).
MISTAKES = {
    "no inputs": ("one_sender", [], None),
    "an extra input": ("one_sender", [IN, tensor("X", "FP32", [2], [1, 2])], None),
    "an unknown input": ("one_sender", [tensor("X", "FP32", [2], [1, 2])], None),
    "a datatype": ("one_sender", [tensor("IN", "INT32", [2], [1, 2])], None),
    "a shape": ("one_sender", [tensor("IN", "FP32", [3], [1, 2, 3])], None),
    "a fixed dimension": ("shape2", [tensor("A", "FP32", [2, 4], list(range(8)))], None),
    "a rank": ("shape2", [tensor("A", "FP32", [6], list(range(6)))], None),
    "more inputs than optional ones allow": (
        "shape2", [A, tensor("B", "INT64", [1], [1]), tensor("C", "INT64", [1], [1])], None),
    "none of required and optional": ("shape2", [], None),
    "an input twice": ("shape2", [A, A], None),
    "an unknown output": ("shape2", [A], [{"name": "Z"}]),
    "a batch over max_batch_size": ("batched", [tensor("A", "FP32", [5, 3], [1, 2, 3] * 5)], None),
    "a version not served": ("one_sender/versions/9", [IN], None),
    "a model not served": ("nope", [IN], None),
}

# Triton prefixes request-level errors with "[request id: <id>] ";
# wirespeed does not (its errors name the request in the log instead).
REQUEST_ID = re.compile(r"^\[request id: [^\]]*\] ")
GOT_INPUTS = re.compile(r"Got input\(s\) \[([^\]]*)\]")


def as_compared(message):
    """An error's text as the two servers are held to it: Triton lists the
    inputs a request gave in no fixed order (wirespeed in the request's),
    and writes an empty list of missing inputs as `]` (wirespeed `[]`)."""
    message = REQUEST_ID.sub("", message)
    message = GOT_INPUTS.sub(lambda m: "Got input(s) [%s]" % ",".join(sorted(m.group(1).split(","))), message)
    return message.replace("missing required input(s) ].", "missing required input(s) [].")


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_request_the_model_cannot_take_is_refused_in_tritons_words(servers, mistake):
    model, inputs, outputs = MISTAKES[mistake]
    request = {"inputs": inputs, **({"outputs": outputs} if outputs else {})}
    answers = {}
    for name, server in servers.items():
        answer = requests.post(f"http://{server.address}/v2/models/{model}/infer", json=request, timeout=30)
        answers[name] = (answer.status_code, as_compared(answer.json()["error"]))
    assert answers["triton"][0] in (400, 404)
    assert answers["wirespeed"] == answers["triton"]


@pytest.mark.parametrize("version", ["abc", "-1", "01", "9"])
def test_a_version_is_read_as_triton_reads_it(servers, version):
    """An integer above 0, `01` being version 1; over gRPC, since Triton's
    REST routes take only digits (its answer to `abc` is a bare 404)."""
    answers = {}
    for name, server in servers.items():
        client = grpcclient.InferenceServerClient(server.grpc_address)
        x = grpcclient.InferInput("IN", [2], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
        try:
            answers[name] = ("ok", client.infer("one_sender", [x], model_version=version).as_numpy("OUT").tolist())
        except InferenceServerException as e:
            answers[name] = (e.status(), e.message())
        client.close()
    assert answers["wirespeed"] == answers["triton"]


A4 = tensor("A", "FP32", [4], [1, 2, 3, 4])
B4 = tensor("B", "FP32", [4], [1, 1, 1, 1])


def outputs_by_name(answer):
    """An answer's outputs by name (Triton's order of an ensemble's
    outputs is its own), with their datatypes, shapes and data."""
    return {o["name"]: (o["datatype"], o["shape"], o["data"]) for o in answer.get("outputs", [])}


@pytest.mark.parametrize("request_body", [
    {"inputs": [A4, B4]},
    {"inputs": [A4, B4], "outputs": [{"name": "D"}]},
], ids=["all outputs", "one output"])
def test_an_ensemble_answers_as_triton_does(servers, request_body):
    answers = {}
    for name, server in servers.items():
        answer = requests.post(f"http://{server.address}/v2/models/ens/infer", json=request_body, timeout=30)
        assert answer.status_code == 200, answer.text
        answers[name] = outputs_by_name(answer.json())
    assert answers["triton"]["D"] == ("FP32", [4], [2.0, 2.0, 2.0, 2.0])
    assert answers["wirespeed"] == answers["triton"]


def test_an_ensemble_inside_an_ensemble_answers_and_counts_as_tritons(servers):
    """The outer ensemble's answer, and what each model's statistics
    count of it: the ensemble it calls is counted as Triton counts it."""
    def counts(server):
        found = {}
        for model in ("ens_nested", "ens", "add_sub"):
            stats = requests.get(f"http://{server.address}/v2/models/{model}/stats", timeout=30).json()
            (entry,) = stats["model_stats"]
            found[model] = (entry["inference_stats"]["success"]["count"], entry["inference_count"],
                            entry["execution_count"])
        return found

    answers, counted = {}, {}
    for name, server in servers.items():
        before = counts(server)
        for _ in range(3):
            answer = requests.post(f"http://{server.address}/v2/models/ens_nested/infer",
                                   json={"inputs": [A4, B4]}, timeout=30)
            assert answer.status_code == 200, answer.text
        answers[name] = outputs_by_name(answer.json())
        after = counts(server)
        counted[name] = {m: tuple(a - b for a, b in zip(after[m], before[m])) for m in after}
    # ens: (a+b, a-b) -> (2a, 2b); add_sub again -> (2a+2b, 2a-2b).
    assert answers["triton"]["S"] == ("FP32", [4], [4.0, 6.0, 8.0, 10.0])
    assert answers["wirespeed"] == answers["triton"]
    assert counted["triton"]["ens"][0] == 3, counted
    assert counted["wirespeed"] == counted["triton"]


@pytest.mark.parametrize("model, inputs", [
    ("ens_broken", [A4, B4]),
    ("ens", [A4]),
    ("ens", [A4, tensor("B", "INT32", [4], [1, 1, 1, 1])]),
], ids=["a step that raises", "an input missing", "a datatype"])
def test_an_ensembles_errors_are_tritons(servers, model, inputs):
    answers = {}
    for name, server in servers.items():
        answer = requests.post(f"http://{server.address}/v2/models/{model}/infer", json={"inputs": inputs}, timeout=30)
        answers[name] = (answer.status_code, as_compared(answer.json()["error"]))
    assert answers["wirespeed"] == answers["triton"]
