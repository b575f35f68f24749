"""wirespeed's Python worker: runs one model's Python code for the server.

The server starts `python -c <a bootstrap>`, which reads this program from
the socket and runs it, with four or five descriptors:
fd 3 is a Unix socket to the server, fd 4 the input segment (a memfd the
server writes the inputs into), fd 5 the output segment (a memfd this
worker writes the outputs into and grows when they do not fit), fd 6 the
call segment (the tensors of the model's large BLS calls and of their
answers), fd 7, when there is one, the server's shared heap (the memfd
its large tensors are decoded into). Messages on the socket are frames: a
JSON message and the bytes it carries. A request's tensors never cross the
socket: a message names each one's datatype, shape, offset and length in
the input segment or the heap, and the model reads its inputs as numpy
arrays viewing them, with no copy.

The first message loads the model: our own API (a class `Model` with
`load(config)` and `predict(inputs, parameters)`, either may be `async`)
or Triton's Python backend (a class `TritonPythonModel` with
`initialize(args)`, `execute(requests)` and `finalize()`, given the
`triton_python_backend_utils` module the server sends). Then one request at
a time: `infer` messages, each answered `done` or `error`, until `stop` or
the socket closes (the server is gone).

A decoupled model (Triton's `model_transaction_policy { decoupled: true }`,
or our `predict` written as a generator) answers a request with a stream:
each response is a `response` message whose tensors' bytes follow it on
the socket (the output segment would be overwritten by the next response
before the server read it), the last one flagged `final`; `executed` says
`execute` has returned (the server may send the next request; threads the
model started may still be sending). A reader thread takes every message
from the server meanwhile: requests, `cancel` (the client left:
`is_cancelled()` turns true) and the answers to BLS calls.

SIGINT interrupts a request past its deadline (KeyboardInterrupt inside the
model's code, answered as an error); outside a request it is ignored.

The socket's messages and the segments are `channel.py`'s, what Triton's
stub does around a Triton model's code is `stub.py`'s, MLServer's and
KServe's APIs are `peers.py`'s, and a decoupled model's streams are
`decoupled.py`'s: the server sends them before this file, as one program.
"""

import inspect
import os
import signal
import sys
import threading
import time
import traceback
import types


class Worker(PeerApis, DecoupledServing):
    def __init__(self, channel):
        self.channel = channel
        self.segments = Segments()
        self.busy = False
        # Loading (`initialize` runs), on the worker's own thread.
        self.loading = False
        self.thread = threading.get_ident()
        self.loop = None
        # The event loop thread of a decoupled model's coroutine `execute`.
        self.background = None
        self.model = None
        self.triton = False
        self.dtypes = dtypes()
        self.outputs = {}
        self.decoupled = False
        # The metadata the model's own server would answer (MLServer's).
        self.metadata = None
        # A Triton model's instance, as Triton names it (`<model>_0_<n>`).
        self.instance_name = ""
        # Whose API the model is written to: "" (ours or Triton's),
        # "mlserver", "kserve" or "sklearn" (our scikit-learn runtime).
        self.api = ""
        self.runtime = None
        self.input_parameters = {}
        # Where the next outputs go in the output segment: past those of
        # the requests answered before them in one `infer_each`.
        self.output_base = 0
        # Around the places the server still holds (outputs of earlier
        # requests it reads in place), when it holds some: the message's
        # lowest gap, its room (None: to the end) and where the held
        # places end.
        self.output_gap = None
        self.linger = 0
        # Decoupled mode: ids of requests whose client left, and the
        # server's answers to BLS calls (the reader thread fills both).
        self.cancelled = set()
        # Decoupled: the BLS calls waiting for their answers, by number
        # (several run at once); the reader thread hands each its own.
        self.bls_waiting = None
        self.bls_numbers = None
        # A model that answers once: its request's client left, and the
        # messages read while looking for that (`is_cancelled`).
        self.current_cancelled = False
        self.pending = []
        # Decoupled: the request whose `execute` runs.
        self.executing = None
        # One BLS call at a time (but a decoupled model's, which run at
        # once, each answered by its number).
        self.bls_lock = threading.Lock()
        self.call_segment = CallSegment()

    # -- loading -------------------------------------------------------
    def load(self, message):
        for name, source in message.get("modules", {}).items():
            module = types.ModuleType(name)
            module.__file__ = "<wirespeed:%s.py>" % name
            exec(compile(source, module.__file__, "exec"), module.__dict__)
            sys.modules[name] = module
        utils = sys.modules.get("triton_python_backend_utils")
        if utils is not None:
            utils._bls_call = self.bls_call
            utils._pool_limit = message.get("pool_limit", 1 << 62)
            utils._metric_call = self.metric_call
            utils._send_response = self.send_response
            utils._is_cancelled = self.is_cancelled
        self.decoupled = bool(message.get("decoupled"))
        # How long to poll for the next request before sleeping: the
        # server says, from the cores its workers leave free.
        self.linger = message.get("linger_us", 0) / 1e6
        self.outputs = {o["name"]: o for o in message["outputs"]}
        self.api = message.get("api", "")
        if self.api == "sklearn":
            import wirespeed_sklearn

            runtime = message["runtime"]
            self.runtime = wirespeed_sklearn.Runtime(message["file"], runtime["functions"], runtime["column"])
            return
        if self.api == "mlserver":
            return self.load_mlserver(message)
        if self.api == "kserve":
            return self.load_kserve(message)
        path = message["file"]
        module = model_module(path)
        if hasattr(module, "TritonPythonModel"):
            self.triton = True
            self.instance_name = message["triton_args"].get("model_instance_name", "")
            if utils is not None:
                utils._model_instance_name = self.instance_name
            self.model = module.TritonPythonModel()
            if hasattr(self.model, "initialize"):
                self.call(self.model.initialize, message["triton_args"])
        elif hasattr(module, "Model"):
            self.model = module.Model()
            if hasattr(self.model, "load"):
                self.call(self.model.load, message["config"])
            if not hasattr(self.model, "predict"):
                raise TypeError("%s: class Model has no predict method" % path)
            # A predict that yields streams its answers.
            predict = self.model.predict
            if inspect.isasyncgenfunction(predict) or inspect.isgeneratorfunction(predict):
                self.decoupled = True
        else:
            raise TypeError(
                "%s defines neither a class Model (load and predict) nor Triton's "
                "TritonPythonModel (initialize and execute)" % path
            )

    def bls_call(self, message, payload=()):
        """One BLS call, its tensors in `payload`: sent on the socket,
        answered by the server (the answer's tensors in its `PAYLOAD`)."""
        if self.bls_waiting is not None:
            # Decoupled: calls run at once (a coroutine `execute` awaiting
            # several), each answer found by the call's number.
            import queue

            mine = queue.Queue(maxsize=1)
            with self.bls_lock:
                number = next(self.bls_numbers)
                self.bls_waiting[number] = mine
            self.channel.send(dict(message, call=number), payload)
            reply = mine.get()
        else:
            # One call at a time, whichever thread makes it (`async_exec`
            # waits in a thread of its own). Large tensors, and the
            # answer's, cross the call segment rather than the socket; small
            # ones go with the message, in one write.
            with self.bls_lock:
                size = payload_size(payload) if message.get("op") == "bls" else 0
                if size > INLINE_PAYLOAD:
                    at, room, held = self.call_segment.place(size)
                    self.call_segment.write(payload, at)
                    message = dict(message, segment=True, at=at, room=room, held=held)
                    payload = ()
                self.channel.send(message, payload)
                reply = self.channel.recv()
                while reply is not None and reply.get("op") == "cancel":
                    self.current_cancelled = True
                    reply = self.channel.recv()
                if reply is not None and reply.get("segment"):
                    size = answer_size(reply)
                    if size:
                        reply[PAYLOAD] = self.call_segment.lend(reply.get("at", 0), size)
        if reply is None or reply.get("op") not in ("bls_result", "metric_result"):
            raise RuntimeError("the server did not answer the BLS call")
        return reply

    def metric_call(self, change):
        """One operation on the model's custom metrics, carried out by the
        server and waited for: inside `initialize` and `execute` on the
        worker's thread, or any time in a decoupled model (its socket has
        a reader). None elsewhere: the change waits for the next message."""
        if self.bls_waiting is None and not (
            (self.loading or self.busy) and threading.get_ident() == self.thread
        ):
            return None
        take = getattr(sys.modules.get("triton_python_backend_utils"), "_take_metric_changes", None)
        pending = take() if take is not None else []
        return self.bls_call({"op": "metric", "metric": change, "pending": pending})

    def call(self, function, *args):
        result = function(*args)
        # What `execute` and `predict` return most (a list, a dict, None)
        # is not awaited: asked without `inspect`'s checks.
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            if self.loop is None:
                import asyncio

                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    # -- one request -----------------------------------------------------
    def inputs(self, message):
        segment = self.segments.input_map(message["size"])
        arrays = {}
        for name, datatype, shape, offset, length, heap in message["inputs"]:
            # A large input is where the server decoded it, in the shared
            # heap; the others were copied into the input segment.
            buffer = self.segments.heap if heap else segment
            if datatype == "BYTES":
                count = 1
                for d in shape:
                    count *= d
                array = read_bytes(buffer, offset, length, count)
            else:
                dtype = self.dtypes.get(datatype) or self.dtype(datatype, name)
                # `length` is the tensor's bytes (the server checked them
                # against its shape and datatype).
                array = np.frombuffer(buffer, dtype=dtype, count=length // dtype.itemsize, offset=offset)
            # A vector is its shape already.
            arrays[name] = array if len(shape) == 1 else array.reshape(shape)
        return arrays

    def dtype(self, datatype, name):
        dtype = self.dtypes.get(datatype)
        if dtype is None and datatype == "BF16":
            dtype = self.dtypes[datatype] = bf16()
        if dtype is None:
            raise TypeError(
                "tensor '%s' is %s, which needs the ml_dtypes package in the model's Python"
                % (name, datatype)
            )
        return dtype

    def infer(self, message):
        self.input_parameters = (message.get("parameters") or {}).pop(INPUT_PARAMETERS, {})
        inputs = self.inputs(message)
        wanted = message["outputs"]
        if self.api == "sklearn":
            return self.write_outputs(self.runtime.predict(inputs, wanted), wanted)
        if self.api == "mlserver":
            return self.place(self.infer_mlserver(inputs, message))
        if self.api == "kserve":
            return self.place(self.infer_kserve(inputs, message))
        if self.triton:
            (produced,) = execute_triton(self, [(inputs, message)])
            if isinstance(produced, Exception):
                raise produced
        else:
            produced = self.call(self.model.predict, inputs, message.get("parameters") or {})
            if not isinstance(produced, dict):
                raise TypeError(
                    "predict returned %s; it must return a dict of output name to array"
                    % type(produced).__name__
                )
        return self.write_outputs(produced, wanted)

    def infer_batch(self, message):
        """A batch of requests to a Triton model, in one call of `execute`
        (Triton's dynamic batcher): each request's outputs placed in the
        one output segment, or its error."""
        batch = []
        for request in message["requests"]:
            request["size"] = message["size"]
            (request.get("parameters") or {}).pop(INPUT_PARAMETERS, None)
            batch.append((self.inputs(request), request))
        outcomes = execute_triton(self, batch)
        prepared, answers = [], []
        for (_, request), produced in zip(batch, outcomes):
            if isinstance(produced, Exception):
                answers.append(self.failure(produced))
                continue
            try:
                mine = []
                for name in request["outputs"]:
                    if name not in produced:
                        raise KeyError("the model did not return output '%s'" % name)
                    mine.append((name, self.prepare(name, produced[name])))
            except Exception as e:
                answers.append(self.failure(e))
                continue
            answers.append({"outputs": len(mine)})
            prepared.extend(mine)
        layout = iter(self.place(prepared))
        for answer in answers:
            if "outputs" in answer:
                answer["outputs"] = [next(layout) for _ in range(answer["outputs"])]
        return answers

    def infer_each(self, message):
        """Requests that queued while the worker was busy, each run as if
        it had come alone, their outputs placed one after the other in the
        output segment: each one's outputs, or its error."""
        answers = []
        # One after the other, all past the places the server holds.
        self.output_base = self.output_gap[2] if self.output_gap else 0
        try:
            for request in message["requests"]:
                request["size"] = message["size"]
                self.current_cancelled = False
                try:
                    layout = self.infer(request)
                except Exception as e:
                    answers.append(self.failure(e))
                    continue
                answers.append({"outputs": layout})
                for placed in layout:
                    end = placed[3] + aligned(placed[4])
                    self.output_base = max(self.output_base, end)
        finally:
            self.output_base = 0
        return answers

    def write_outputs(self, produced, wanted):
        prepared = []
        for name in wanted:
            if name not in produced:
                raise KeyError("the model did not return output '%s'" % name)
            prepared.append((name, self.prepare(name, produced[name])))
        return self.place(prepared)

    def place(self, prepared):
        """Writes (name, (datatype, array, raw)[, parameters]) outputs into
        the output segment, from `output_base` on (past the outputs of the
        requests before, in one `infer_each`), or where the message says
        they fit between the places the server holds; returns where each
        lies (and its parameters)."""
        size = self.output_base
        if not size and self.output_gap:
            at, room, held = self.output_gap
            total = sum(aligned(array.nbytes if raw is None else len(raw))
                        for _, (_, array, raw), *_ in prepared)
            size = at if room is None or total <= room else held
        layout = []
        writes = []
        for entry in prepared:
            name, (datatype, array, raw) = entry[0], entry[1]
            if raw is None:
                # The array's bytes, viewed in place (one copy, into the
                # segment).
                raw = buffer_view(array)
            length = len(raw)
            placed = [name, datatype, list(array.shape), size, length]
            if len(entry) > 2 and entry[2]:
                # The output's own parameters, when it has some.
                placed.append(entry[2])
            layout.append(placed)
            if length:
                writes.append((size, length, raw))
            size += aligned(length)
        view = memoryview(self.segments.output_map(size))
        for offset, length, raw in writes:
            view[offset : offset + length] = raw
        view.release()
        return layout

    def prepare(self, name, value):
        spec = self.outputs.get(name)
        datatype = spec["datatype"] if spec else None
        if datatype is None:
            # An output nothing declares: its datatype is its array's.
            array = np.asarray(value)
            if array.dtype.kind in "OUS":
                array = array.astype(np.object_)
                return "BYTES", array, bytes_raw(array)
            datatype = numpy_datatype(array.dtype)
        if datatype == "BYTES":
            array = np.asarray(value, dtype=np.object_) if not isinstance(value, np.ndarray) else value
            return datatype, array, bytes_raw(array)
        dtype = self.dtypes.get(datatype) or self.dtype(datatype, name)
        array = np.asarray(value)
        if array.dtype != dtype:
            if not np.can_cast(array.dtype, dtype, casting="same_kind"):
                raise TypeError(
                    "output '%s' is declared %s, and the model returned an array of %s"
                    % (name, datatype, array.dtype)
                )
            array = array.astype(dtype)
        return datatype, np.ascontiguousarray(array), None

    # -- the loop ------------------------------------------------------
    def on_interrupt(self, signum, frame):
        if self.busy:
            raise KeyboardInterrupt

    def serve(self):
        if self.decoupled:
            return self.serve_decoupled()
        signal.signal(signal.SIGINT, self.on_interrupt)
        linger = self.linger
        while True:
            if self.pending:
                message = self.pending.pop(0)
            else:
                if linger:
                    self.channel.linger(linger)
                message = self.channel.recv()
            if message is not None and message["op"] == "cancel":
                continue  # for a request already answered
            if message is None or message["op"] == "stop":
                break
            self.current_cancelled = False
            started = time.perf_counter()
            self.output_gap = message.get("out")
            try:
                self.busy = True
                try:
                    if message["op"] == "infer_batch":
                        answer = {"op": "answers", "answers": self.infer_batch(message)}
                    elif message["op"] == "infer_each":
                        answer = {"op": "answers", "answers": self.infer_each(message)}
                    else:
                        answer = {"op": "done", "outputs": self.infer(message)}
                finally:
                    self.busy = False
                self.channel.send(with_metrics(answer))
            except KeyboardInterrupt:
                self.channel.send(
                    with_metrics({
                        "op": "error",
                        "kind": "interrupted",
                        "error": "interrupted after %.0f ms: the request's deadline passed"
                        % ((time.perf_counter() - started) * 1000),
                    })
                )
            except Exception as e:
                self.channel.send(with_metrics(self.failure(e)))
        self.finalize()

    def failure(self, e, log=True):
        """The `error` message of exception `e`: a Triton model's in
        Triton's words and statuses (`triton_failure`), another's with its
        type, and the status its error carries (MLServer's, KServe's)."""
        if log:
            traceback.print_exc(file=sys.stderr)
        utils = sys.modules.get("triton_python_backend_utils")
        if self.triton and utils is not None:
            kind, message = triton_failure(utils, e, self.instance_name)
            return {"op": "error", "kind": kind, "error": message}
        kind = "model"
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            # MLServer's and KServe's errors carry their HTTP status.
            kind = {400: "invalid", 404: "not_found", 422: "invalid", 501: "unsupported",
                    503: "unavailable"}.get(status, kind)
        message = e.message() if callable(getattr(e, "message", None)) else str(e)
        message = "%s: %s" % (type(e).__name__, message) if message else type(e).__name__
        return {"op": "error", "kind": kind, "error": message}

    def finalize(self):
        if self.triton and hasattr(self.model, "finalize"):
            try:
                self.call(self.model.finalize)
            except Exception:
                traceback.print_exc(file=sys.stderr)
        elif hasattr(self.model, "unload"):
            try:
                self.call(self.model.unload)
            except Exception:
                traceback.print_exc(file=sys.stderr)


# The types of results `Worker.call` need not ask `inspect` about.
_PLAIN = (list, dict, tuple, type(None))

# The key of a request's parameters under which the server sends the
# inputs' own parameters (wire.rs INPUT_PARAMETERS).
INPUT_PARAMETERS = "$inputs"

# The parameter under which a BYTES tensor carries its shape as MLServer's
# clients and runtimes write it (wirespeed_core::WRITTEN_SHAPE).
WRITTEN_SHAPE = "$shape"

# The start of an output's parameter that is its response's
# (wirespeed_core::RESPONSE_PARAMETER).
RESPONSE_PARAMETER = "$response."

# The input and output of a request whose JSON the model reads itself
# (wirespeed_core::JSON_BODY).
JSON_BODY = "$json"


class InvalidRequest(Exception):
    """The client's mistake: answered 400."""

    status_code = 400


def plain(value):
    """numpy's values as JSON's, for a model's v1 answer."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    raise TypeError("%s is not JSON" % type(value).__name__)


def model_module(path):
    """The model's code run as the module `model` (not `__main__`: a
    `__main__` block that starts another server does not run), its folder
    on the path for the modules beside it."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = types.ModuleType("model")
    module.__file__ = path
    sys.modules["model"] = module
    with open(path, "rb") as f:
        exec(compile(f.read(), path, "exec"), module.__dict__)
    return module


def numpy_datatype(dtype):
    """The protocol's datatype of a numpy dtype."""
    kind, bits = dtype.kind, dtype.itemsize * 8
    if kind == "b":
        return "BOOL"
    if kind in "iuf":
        return {"i": "INT%d", "u": "UINT%d", "f": "FP%d"}[kind] % bits
    raise TypeError("an array of %s is not a tensor's datatype" % dtype)


def as_text(value):
    """A BYTES element as MLServer's REST front gives it: a str when it is
    UTF-8, else bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def payload_size(payload):
    """The bytes of a payload's parts."""
    return sum(buffer_view(part).nbytes for part in payload)


def answer_size(reply):
    """How far into the call segment an answer's tensors reach: its
    outputs', and each of its responses' (name, datatype, shape, offset,
    length)."""
    answers = [reply] + list(reply.get("responses") or [])
    return max((o[3] + o[4] for a in answers for o in a.get("outputs") or []), default=0)


def with_metrics(message):
    """`message` with the custom metric changes the model made since the
    last one (Triton's pb_utils.MetricFamily), when it made any."""
    utils = sys.modules.get("triton_python_backend_utils")
    take = getattr(utils, "_take_metric_changes", None)
    if take is not None:
        changes = take()
        if changes:
            message["metrics"] = changes
    return message


def main():
    # SIGINT belongs to the server's deadlines, not a terminal's Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(SOCKET_FD)
    message = channel.recv()
    if message is None:
        return
    if np is None:
        channel.send(
            {
                "op": "failed",
                "error": "the model's Python (%s) cannot import numpy: %s"
                % (sys.executable, NUMPY_ERROR),
            }
        )
        return
    # The model's code sees no arguments of the worker's, as under
    # Triton's stub (a model that runs `unittest.main` reads them).
    del sys.argv[1:]
    worker = Worker(channel)
    try:
        worker.loading = True
        worker.load(message)
    except BaseException:
        channel.send({"op": "failed", "error": traceback.format_exc()})
        return
    finally:
        worker.loading = False
    channel.send(with_metrics({"op": "ready", "pid": os.getpid(), "python": sys.version.split()[0],
                               "decoupled": worker.decoupled, "metadata": worker.metadata,
                               "heap": worker.segments.map_heap()}))
    worker.serve()


main()
