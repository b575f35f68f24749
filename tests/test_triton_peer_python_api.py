"""The Python backend's API against the real Triton: the same models
served by Triton 2.51 (tests/triton_peer.py) and by wirespeed, asked the
same through tritonclient, the answers compared.

What `triton_python_backend_utils` refuses (a wrong argument type is a
TypeError, as Triton's typed bindings make it; a list holding None,
Triton's own exception), a model that takes no inputs, request
rescheduling (a model that is not decoupled executing a request again, an
iterative sequence streaming over its executions, and Triton's error for
a rescheduled request the model also answered), and a batched model's
output returned in a shape other than its configuration's, which Triton
passes on as produced.
"""

import json
import os
import queue
import re
import sys
import textwrap
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from conftest import wait_until
from triton_peer import side_by_side

# wirespeed's workers run the models on the tests' Python (numpy's).
os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

# Each call the model makes, and what it raised: the exception's class.
ARGUMENTS = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils

CALLS = {
    "Tensor(None, array)": lambda: pb_utils.Tensor(None, np.zeros(2, np.int32)),
    "Tensor(name, None)": lambda: pb_utils.Tensor("OUT", None),
    "Tensor.from_dlpack(name, None)": lambda: pb_utils.Tensor.from_dlpack("OUT", None),
    "InferenceRequest(inputs=[None])": lambda: pb_utils.InferenceRequest(
        inputs=[None], model_name="m", requested_output_names=["o"]),
    "InferenceRequest(inputs=None)": lambda: pb_utils.InferenceRequest(
        inputs=None, model_name="m", requested_output_names=["o"]),
    "InferenceRequest(model_name=None)": lambda: pb_utils.InferenceRequest(
        inputs=[], model_name=None, requested_output_names=["o"]),
    "InferenceRequest(requested_output_names=[None])": lambda: pb_utils.InferenceRequest(
        inputs=[], model_name="m", requested_output_names=[None]),
    "InferenceRequest(correlation_id=None)": lambda: pb_utils.InferenceRequest(
        inputs=[], model_name="m", requested_output_names=[], correlation_id=None),
    "InferenceRequest(flags=None)": lambda: pb_utils.InferenceRequest(
        inputs=[], model_name="m", requested_output_names=[], flags=None),
    "InferenceRequest(correlation_id='id-5')": lambda: pb_utils.InferenceRequest(
        inputs=[], model_name="m", requested_output_names=[], correlation_id="id-5").correlation_id(),
    "InferenceResponse(output_tensors=[None])": lambda: pb_utils.InferenceResponse(output_tensors=[None]),
    "InferenceResponse(output_tensors=None)": lambda: pb_utils.InferenceResponse(output_tensors=None),
    "InferenceResponse()": lambda: len(pb_utils.InferenceResponse().output_tensors()),
    "Logger.log(message, None)": lambda: pb_utils.Logger.log("message", None),
    "Logger.log(message, 1)": lambda: pb_utils.Logger.log("message", 1),
    "Logger.log_info(None)": lambda: pb_utils.Logger.log_info(None),
    "a counter's Metric.increment(-1)": lambda: pb_utils.MetricFamily(
        name="arguments_counter", description="d", kind=pb_utils.MetricFamily.COUNTER).Metric().increment(-1),
    "a gauge's Metric.observe(1)": lambda: pb_utils.MetricFamily(
        name="arguments_gauge", description="d", kind=pb_utils.MetricFamily.GAUGE).Metric().observe(1),
    "a histogram's Metric() without buckets": lambda: pb_utils.MetricFamily(
        name="arguments_histogram", description="d", kind=pb_utils.MetricFamily.HISTOGRAM).Metric(),
}


def outcome(call):
    try:
        return "returned %r" % (call(),)
    except Exception as e:
        return "raised " + type(e).__name__


class TritonPythonModel:
    def execute(self, requests):
        found = json.dumps({name: outcome(call) for name, call in CALLS.items()})
        out = np.array([found.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
'''

RESCHEDULED = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.executions += 1
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if self.executions % 2 == 1:
                # Not done yet: the request comes back.
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + self.executions)]))
        return responses
'''

ANSWERED_AND_RESCHEDULED = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return responses
'''

COUNTDOWN = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    # One sequence at a time, as Triton's own example keeps it: a request
    # is a new object at each execution.
    left = None

    def execute(self, requests):
        for request in requests:
            if self.left is None:
                self.left = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            self.left -= 1
            out = pb_utils.InferenceResponse([pb_utils.Tensor("LEFT", np.array([self.left], np.int32))])
            sender = request.get_response_sender()
            if self.left > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(out)
            else:
                self.left = None
                sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

# Triton's Logger with its level constants (pybind11 exports them into
# the class), from `initialize` and `execute`; each line says which level.
LOGGER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Triton's stub adds Logger to the module once the model's file is
        # imported: it is read inside the methods.
        Logger = pb_utils.Logger
        Logger.log("logger says info-from-initialize", Logger.INFO)
        Logger.log("logger says warning-by-constant", Logger.WARNING)
        Logger.log("logger says error-by-enum", Logger.LogLevel.ERROR)

    def execute(self, requests):
        Logger = pb_utils.Logger
        Logger.log_info("logger says log-info")
        Logger.log_warn("logger says log-warn")
        Logger.log_error("logger says log-error")
        Logger.log_verbose("logger says log-verbose")
        Logger.log("logger says log-default")
        levels = [Logger.VERBOSE is Logger.LogLevel.VERBOSE]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([float(all(levels))], np.float32))])
                for _ in requests]
'''

NO_INPUTS = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7.0], np.float32))])
                for _ in requests]
'''

FLAT = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            # One value per row: [n], where the configuration says [n, 1].
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x.reshape(-1) * 2)]))
        return responses
'''

SENT_LATER = '''
import threading
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()

            def later(sender=sender, x=x):
                time.sleep(0.2)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 3)]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            threading.Thread(target=later, daemon=True).start()
        return [None for _ in requests]
'''

SENT_TWICE = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
            # Refused (one response), raising out of execute.
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return None
'''

SENT_AND_RETURNED = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return responses
'''

# Answers its first request by returning the response, and keeps that
# request; tries to send the kept request a second response while it
# executes the next, and answers that one with what the send did.
RETURNED_THEN_SENT = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.kept = None

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if self.kept is None:
                self.kept = request
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
                continue
            try:
                self.kept.get_response_sender().send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                outcome = "sent"
            except Exception as e:
                outcome = "%s: %s" % (type(e).__name__, e)
            self.kept = None
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(outcome)))
        return responses
'''

# Marks its folder when a request starts and when it sees the client
# gone; answers CANCELLED then.
CANCELLABLE = '''
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.folder = os.path.join(args["model_repository"], "marks")
        os.makedirs(self.folder, exist_ok=True)

    def mark(self, name):
        open(os.path.join(self.folder, name), "w").close()

    def execute(self, requests):
        self.mark("started")
        for _ in range(300):
            time.sleep(0.1)
            if requests[0].is_cancelled():
                self.mark("cancelled")
                error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                return [pb_utils.InferenceResponse(error=error)]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(2, np.float32))])]
'''

# Two of its instances wait for each other: "together" only when both
# calls run at once.
RENDEZVOUS = '''
import os
import time
import uuid
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.folder = os.path.join(args["model_repository"], "arrived")
        os.makedirs(self.folder, exist_ok=True)

    def execute(self, requests):
        open(os.path.join(self.folder, uuid.uuid4().hex), "w").close()
        end = time.monotonic() + 20
        while len(os.listdir(self.folder)) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        together = float(len(os.listdir(self.folder)) >= 2)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([together], np.float32))])
                for _ in requests]
'''

def streamer(final_alone):
    last = ('sender.send(out)\n            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)'
            if final_alone else 'sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)')
    return f'''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1.0], np.float32))])
            {last}
        return None
'''

# Its coroutine calls two models at once (their streams counted) and the
# rendezvous twice at once.
FAN_OUT = '''
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

def ask(model):
    return pb_utils.InferenceRequest(model_name=model, inputs=[], requested_output_names=["OUT"])

class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            streams = await asyncio.gather(
                ask("final_with_data").async_exec(decoupled=True),
                ask("final_alone").async_exec(decoupled=True))
            counts = [float(len(list(s))) for s in streams]
            met = await asyncio.gather(ask("rendezvous").async_exec(), ask("rendezvous").async_exec())
            together = [float(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0]) for r in met]
            out = pb_utils.Tensor("OUT", np.array(counts + together, np.float32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

# Answers each request of a batch with the batch's size and its place in
# it; fails the second.
LISTED = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for i, request in enumerate(requests):
            rows = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().shape[0]
            out = pb_utils.Tensor("OUT", np.array([[len(requests), i]] * rows, np.float32))
            error = pb_utils.TritonError("the second fails") if i == 1 else None
            responses.append(pb_utils.InferenceResponse([out], error=error))
        return responses
'''

LISTED_STREAM = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for i, request in enumerate(requests):
            out = pb_utils.Tensor("OUT", np.array([[len(requests), i]], np.float32))
            error = pb_utils.TritonError("the second fails") if i == 1 else None
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out], error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

ONE_FLOAT = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]'
IN_FLOAT = 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]'
OUT_FLOAT = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]'
ITERATIVE = "sequence_batching { iterative_sequence: true }"
DECOUPLED = "model_transaction_policy { decoupled: true }"

# name: (config.pbtxt after name and backend, model.py)
MODELS = {
    "arguments": ('output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]', ARGUMENTS),
    "no_inputs": (ONE_FLOAT, NO_INPUTS),
    "logger": (ONE_FLOAT, LOGGER),
    "rescheduled": (f"{IN_FLOAT}\n{OUT_FLOAT}\n{ITERATIVE}", RESCHEDULED),
    "answered_and_rescheduled": (f"{IN_FLOAT}\n{OUT_FLOAT}\n{ITERATIVE}", ANSWERED_AND_RESCHEDULED),
    "countdown": (
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "LEFT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"{ITERATIVE}\nmodel_transaction_policy {{ decoupled: true }}",
        COUNTDOWN,
    ),
    "sent_later": (f"{IN_FLOAT}\n{OUT_FLOAT}", SENT_LATER),
    "sent_twice": (f"{IN_FLOAT}\n{OUT_FLOAT}", SENT_TWICE),
    "sent_and_returned": (f"{IN_FLOAT}\n{OUT_FLOAT}", SENT_AND_RETURNED),
    "returned_then_sent": (f"{IN_FLOAT}\n{OUT_FLOAT}", RETURNED_THEN_SENT),
    "cancellable": (f"{IN_FLOAT}\n{OUT_FLOAT}", CANCELLABLE),
    "rendezvous": (f"{ONE_FLOAT}\ninstance_group [ {{ kind: KIND_CPU count: 2 }} ]", RENDEZVOUS),
    "final_with_data": (f"{ONE_FLOAT}\n{DECOUPLED}", streamer(final_alone=False)),
    "final_alone": (f"{ONE_FLOAT}\n{DECOUPLED}", streamer(final_alone=True)),
    "fan_out": ('output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' + DECOUPLED, FAN_OUT),
    "listed": (
        'max_batch_size: 8\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 30000000 }",
        LISTED,
    ),
    "listed_stream": (
        'max_batch_size: 8\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 30000000 }\n"
        + DECOUPLED,
        LISTED_STREAM,
    ),
    "flat": (
        'max_batch_size: 8\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n' + ONE_FLOAT,
        FLAT,
    ),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Triton and wirespeed on one repository of the models above."""
    repo = tmp_path_factory.mktemp("triton_python_api_repo")
    for name, (config, code) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        group = "" if "instance_group" in config else "instance_group [ { kind: KIND_CPU } ]\n"
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{config}\n{group}')
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
    with side_by_side(repo, tmp_path_factory.mktemp("triton_log") / "triton.log") as servers:
        yield {**servers, "repo": repo}


def tensors(inputs):
    """The request's inputs, from arrays by name."""
    made = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


def infer(server, model, inputs, output):
    """("ok", the output) or (the gRPC code, the message)."""
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        result = client.infer(model, tensors(inputs))
    except InferenceServerException as e:
        return e.status(), e.message()
    finally:
        client.close()
    return "ok", result.as_numpy(output).tolist()


def both(servers, ask, *args):
    return {name: ask(servers[name], *args) for name in ("triton", "wirespeed")}


def test_the_python_api_refuses_wrong_arguments_as_triton_does(servers):
    answers = both(servers, infer, "arguments", {}, "OUT")
    assert answers["triton"][0] == "ok", answers["triton"]
    triton = json.loads(answers["triton"][1][0])
    ours = json.loads(answers["wirespeed"][1][0])
    assert triton["InferenceRequest(inputs=None)"] == "raised TypeError"
    assert ours == triton


def logged(lines):
    """The Logger lines in a log, by their message: (level's letter,
    file:line)."""
    found = {}
    for line in lines:
        match = re.search(r"(\S+\.py:\d+)\] \"?logger says ([\w-]+)", line)
        if match:
            # Triton: "W1206 04:44:35.1 123 model.py:12] ..."; wirespeed:
            # "... WARN wirespeed_models::python::output: model.py:12] ...".
            level = re.search(r"^([IWEV])\d{4} |\b(INFO|WARN|ERROR|DEBUG)\b", line)
            letter = level.group(1) or {"INFO": "I", "WARN": "W", "ERROR": "E", "DEBUG": "V"}[level.group(2)]
            found[match.group(2)] = (letter, match.group(1))
    return found


def test_loggers_levels_and_lines_are_tritons(servers):
    answers = both(servers, infer, "logger", {}, "OUT")
    assert answers["triton"] == ("ok", [1.0])
    assert answers["wirespeed"] == answers["triton"]
    wanted = {"info-from-initialize", "warning-by-constant", "error-by-enum", "log-info", "log-warn",
              "log-error", "log-default"}
    wait_until("wirespeed logged the model's lines",
               lambda: wanted <= set(logged(list(servers["wirespeed"].log))))
    triton, ours = logged(servers["triton"].log.read_text().splitlines()), logged(list(servers["wirespeed"].log))
    assert wanted <= set(triton), triton
    # VERBOSE shows at neither server's default verbosity.
    assert "log-verbose" not in triton and "log-verbose" not in ours
    assert {k: ours[k] for k in wanted} == {k: triton[k] for k in wanted}


def test_a_model_without_inputs_answers_as_in_triton(servers):
    answers = both(servers, infer, "no_inputs", {}, "OUT")
    assert answers["triton"] == ("ok", [7.0])
    assert answers["wirespeed"] == answers["triton"]


def test_a_rescheduled_request_is_executed_again_as_in_triton(servers):
    x = {"IN": np.array([1.0, 2.0], np.float32)}
    first = both(servers, infer, "rescheduled", x, "OUT")
    assert first["triton"] == ("ok", [3.0, 4.0])  # answered at the second execution
    assert first["wirespeed"] == first["triton"]
    again = both(servers, infer, "rescheduled", x, "OUT")
    assert again["wirespeed"] == again["triton"] == ("ok", [5.0, 6.0])


def test_an_answer_to_a_rescheduled_request_is_tritons_error(servers):
    answers = both(servers, infer, "answered_and_rescheduled", {"IN": np.array([1.0, 2.0], np.float32)}, "OUT")
    code, message = answers["triton"]
    assert "Expected a None object in the execute function return list for reschduled request" in message
    assert answers["wirespeed"][0] == code
    assert answers["wirespeed"][1].split(", found type")[0] == message.split(", found type")[0]


def stream(server, model, inputs):
    """Every response of one request on the gRPC stream, to its final one."""
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), got))
    client.async_stream_infer(model, tensors(inputs), enable_empty_final_response=True)
    answers = []
    while True:
        result, error = got.get(timeout=30)
        if error is not None:
            answers.append(("error", error.message()))
            break
        response = result.get_response()
        if response.outputs:
            answers.append(result.as_numpy("LEFT").tolist())
        if response.parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return answers


def test_an_iterative_sequence_streams_over_its_executions_as_in_triton(servers):
    answers = both(servers, stream, "countdown", {"N": np.array([3], np.int32)})
    assert answers["triton"] == [[2], [1], [0]]
    assert answers["wirespeed"] == answers["triton"]


def test_an_output_is_answered_in_the_shape_the_model_gave_as_in_triton(servers):
    answers = both(servers, infer, "flat", {"IN": np.array([[1.0], [2.0], [3.0]], np.float32)}, "OUT")
    assert answers["triton"] == ("ok", [2.0, 4.0, 6.0])
    assert answers["wirespeed"] == answers["triton"]


def on_stream(server, model, inputs, output, times=2):
    """What the gRPC stream gives `times` requests sent one after the
    other: ("ok", output) or ("error", message) each, in order."""
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), got))
    answers = []
    for _ in range(times):
        client.async_stream_infer(model, tensors(inputs))
        result, error = got.get(timeout=30)
        answers.append(("error", error.message()) if error else ("ok", result.as_numpy(output).tolist()))
    client.stop_stream()
    client.close()
    return answers


@pytest.mark.parametrize("model", ["sent_later", "sent_twice", "sent_and_returned"])
def test_a_models_first_response_is_its_answer_as_in_triton(servers, model):
    """A model that is not decoupled answers with the first response it
    sends, before `execute` returns or after (from a thread); what fails
    after it (a second response, one returned as well) is dropped: the
    next answer on the stream is the next request's. (Triton's unary
    gRPC answers `expected a single response, got 2` to the model that
    sends twice; wirespeed the first response there too, docs/python-models.md.)"""
    answers = both(servers, on_stream, model, {"IN": np.array([1.0, 2.0], np.float32)}, "OUT")
    expected = [3.0, 6.0] if model == "sent_later" else [1.0, 2.0]
    assert answers["triton"] == [("ok", expected)] * 2
    assert answers["wirespeed"] == answers["triton"]


def test_a_returned_response_closes_the_requests_sender_as_in_triton(servers):
    """A response `execute` returns is the request's one response: the
    request's sender refuses another one later, with Triton's error."""
    x = {"IN": np.array([1.0, 2.0], np.float32)}
    answers = both(servers, lambda server: [infer(server, "returned_then_sent", x, "OUT") for _ in range(2)])
    assert answers["triton"][0] == ("ok", [1.0, 2.0])
    assert "sent" != answers["triton"][1][1]
    assert answers["wirespeed"] == answers["triton"]


def wait_for(path, timeout=30):
    import time

    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never came"
        time.sleep(0.02)


def test_a_model_sees_its_client_leave_as_in_triton(servers, tmp_path):
    """A client that cancels a request it is waiting for: the model's
    `request.is_cancelled()` turns true while it computes."""
    marks = servers["repo"] / "cancellable" / "marks"
    for name in ("triton", "wirespeed"):
        for mark in ("started", "cancelled"):
            (marks / mark).unlink(missing_ok=True)
        client = grpcclient.InferenceServerClient(servers[name].grpc_address)
        x = tensors({"IN": np.array([1.0, 2.0], np.float32)})
        got = queue.Queue()
        future = client.async_infer("cancellable", x, partial(lambda q, result, error: q.put(error), got))
        wait_for(marks / "started")
        future.cancel()
        error = got.get(timeout=30)
        assert error is not None and error.status() == "StatusCode.CANCELLED", (name, error)
        wait_for(marks / "cancelled")
        client.close()


def test_a_coroutines_calls_run_at_once_and_streams_end_as_in_triton(servers):
    """A decoupled model's coroutine awaiting two BLS calls at once: both
    run at the same time (two instances of the callee meet), and a
    decoupled callee's stream gives one response when its last carried
    the final flag, two when the flag came alone (an empty last one)."""
    for name in ("triton", "wirespeed"):
        arrived = servers["repo"] / "rendezvous" / "arrived"
        for mark in arrived.glob("*"):
            mark.unlink()
        assert on_stream(servers[name], "fan_out", {}, "OUT", times=1) == [("ok", [1.0, 2.0, 1.0, 1.0])], name


def test_a_batch_is_a_list_of_requests_as_in_triton(servers):
    """Triton's dynamic batcher gives a Python model's `execute` the
    batch's requests, each answered (or failed) on its own: four requests
    of one row reach the preferred size together."""
    import concurrent.futures

    for name in ("triton", "wirespeed"):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            asks = [pool.submit(infer, servers[name], "listed", {"IN": np.array([[1.0]], np.float32)}, "OUT")
                    for _ in range(4)]
            answers = [ask.result() for ask in asks]
        ok = sorted(tuple(a[1][0]) for a in answers if a[0] == "ok")
        failed = [a for a in answers if a[0] != "ok"]
        assert ok == [(4.0, 0.0), (4.0, 2.0), (4.0, 3.0)], (name, answers)
        assert len(failed) == 1 and "the second fails" in failed[0][1], (name, answers)
    # One execution of four rows, in each server's statistics. (Triton's
    # inference_count for it is 3 or 4 from run to run: not compared.)
    counts = {}
    for name in ("triton", "wirespeed"):
        client = grpcclient.InferenceServerClient(servers[name].grpc_address)
        stats = client.get_inference_statistics("listed", as_json=True)["model_stats"][0]
        client.close()
        counts[name] = (stats.get("execution_count"),
                        [(b["batch_size"], b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])])
    assert counts["triton"] == ("1", [("4", "1")])
    assert counts["wirespeed"] == counts["triton"]


def test_a_decoupled_models_batch_is_a_list_of_requests_as_in_triton(servers):
    """A decoupled model's dynamic batch: three requests of one stream
    given to `execute` at once, each answered (or failed) through its own
    sender."""
    for name in ("triton", "wirespeed"):
        got = queue.Queue()
        client = grpcclient.InferenceServerClient(servers[name].grpc_address)
        client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), got))
        for _ in range(3):
            client.async_stream_infer("listed_stream", tensors({"IN": np.array([[1.0]], np.float32)}))
        answers = [got.get(timeout=60) for _ in range(3)]
        client.stop_stream()
        client.close()
        ok = sorted(tuple(result.as_numpy("OUT")[0]) for result, error in answers if error is None)
        failed = [error.message() for result, error in answers if error is not None]
        assert ok == [(3.0, 0.0), (3.0, 2.0)], (name, answers)
        assert len(failed) == 1 and "the second fails" in failed[0], (name, failed)


def test_an_unloaded_model_is_indexed_as_in_triton(tmp_path):
    """Explicit model control: after an unload, the index keeps the
    model's version, UNAVAILABLE with the reason "unloaded", as Triton's."""
    import tritonclient.http as httpclient

    from conftest import RunningServer, wait_until
    from triton_peer import TritonServer

    (tmp_path / "repo" / "echo" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "echo" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n')
    (tmp_path / "repo" / "echo" / "1" / "model.py").write_text(textwrap.dedent("""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
        """))
    triton = TritonServer(tmp_path / "repo", tmp_path / "triton.log",
                          ["--model-control-mode=explicit", "--load-model=*"])
    try:
        ours = RunningServer(tmp_path / "repo", extra_args=["--model-control-mode", "explicit", "--load-model", "*"])
        try:
            indexes = []
            for address in (triton.address, ours.address):
                client = httpclient.InferenceServerClient(address)
                loaded = client.get_model_repository_index()
                client.unload_model("echo")
                # Triton's unload returns while the model is UNLOADING.
                wait_until("the model unloaded", lambda: client.get_model_repository_index()[0]["state"]
                           != "UNLOADING")
                indexes.append((loaded, client.get_model_repository_index()))
        finally:
            ours.stop()
    finally:
        triton.stop()
    assert indexes[0] == indexes[1], indexes
    assert indexes[0][1] == [{"name": "echo", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]

