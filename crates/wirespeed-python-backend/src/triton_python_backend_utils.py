"""triton_python_backend_utils, as wirespeed's Python worker provides it.

The parts of Triton's Python backend module that a model's `initialize`,
`execute` and `finalize` use, with Triton's names and behaviour, so that a
`model.py` written for Triton runs unchanged. Tensors are numpy arrays;
inputs view the server's shared memory and are read-only (copy one to
change it). Not provided, with a clear error when called: DLPack.
"""

import enum
import json
import struct
import sys
import threading

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

_TRITON_TO_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(triton_type_string):
    """The numpy type of a config's `data_type` (`TYPE_FP32`)."""
    if triton_type_string == "TYPE_BF16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _TRITON_TO_NUMPY[triton_type_string]


_NUMPY_TO_V2 = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}


def numpy_to_triton_type(data_type):
    """Triton's type number for a numpy type, as Triton's module gives it."""
    numbers = {
        "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5,
        "INT8": 6, "INT16": 7, "INT32": 8, "INT64": 9, "FP16": 10,
        "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
    }
    return numbers[_v2_datatype(np.dtype(data_type))]


def triton_to_numpy_type(data_type):
    """The numpy type of Triton's type number."""
    names = [None, np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8,
             np.int16, np.int32, np.int64, np.float16, np.float32, np.float64,
             np.object_]
    if data_type == 14:
        import ml_dtypes

        return ml_dtypes.bfloat16
    return names[data_type]


def _v2_datatype(dtype):
    if dtype in _NUMPY_TO_V2:
        return _NUMPY_TO_V2[dtype]
    if dtype.kind in "OSU":
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    raise TritonModelException("numpy type %s has no Triton datatype" % dtype)


# Set by the worker: sends a BLS call (a message and its tensors' bytes)
# on its socket and returns the answer, whose tensors' bytes are under
# `_PAYLOAD`; and the most bytes of tensors a call may carry.
_bls_call = None
_pool_limit = 1 << 62
_PAYLOAD = "$payload"
# Set by the worker: the instance's name, as Triton's errors give it.
_model_instance_name = ""
# Set by the worker: sends one response of a decoupled model's request
# (`_send_response(stream, response_or_None, final)`), and says whether a
# request's client has left (`_is_cancelled(stream)`).
_send_response = None
_is_cancelled = None


def _raw_bytes(array, datatype):
    """A tensor's raw bytes, as the V2 binary extension lays them out: the
    array itself (contiguous) where it is not BYTES, sent from where it
    lies."""
    if datatype == "BYTES":
        parts = []
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode()
            parts.append(struct.pack("<I", len(data)) + data)
        return b"".join(parts)
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _from_raw(raw, datatype, shape):
    """The array of `raw` bytes of `datatype` in `shape`: a view of them
    (`raw` is the answer's own), elements of BYTES copied out."""
    if datatype == "BYTES":
        view = memoryview(raw)
        items = []
        at = 0
        while at < len(view):
            (n,) = struct.unpack_from("<I", view, at)
            items.append(bytes(view[at + 4 : at + 4 + n]))
            at += 4 + n
        return np.array(items, dtype=np.object_).reshape(shape)
    return np.frombuffer(raw, dtype=triton_string_to_numpy("TYPE_" + datatype)).reshape(shape)


def serialize_byte_tensor(input_tensor):
    """A BYTES tensor in Triton's raw form (each element's 4-byte length,
    then the element), as a one-dimensional uint8 array."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    parts = []
    for item in np.nditer(input_tensor, flags=["refs_ok"], order="C"):
        value = item.item()
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, bytes):
            value = str(value).encode("utf-8")
        parts.append(struct.pack("<I", len(value)))
        parts.append(value)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """The elements of a BYTES tensor's raw form, as an object array."""
    data = bytes(encoded_tensor)
    out = []
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    return np.array(out, dtype=np.object_)


def get_input_config_by_name(model_config, name):
    """The config of input `name`, or None."""
    for tensor in model_config.get("input", []):
        if tensor["name"] == name:
            return tensor
    return None


def get_output_config_by_name(model_config, name):
    """The config of output `name`, or None."""
    for tensor in model_config.get("output", []):
        if tensor["name"] == name:
            return tensor
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether the model's configuration makes it decoupled."""
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


def get_input_tensor_by_name(inference_request, name):
    """The request's input `name`, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    """The response's output `name`, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


class TritonError(Exception):
    """An error a model returns in a response (`InferenceResponse(error=...)`)
    or raises: its message alone, with Triton's status for its code
    (INTERNAL, the default, 500; UNKNOWN, INVALID_ARG, ALREADY_EXISTS and
    CANCELLED 400; NOT_FOUND 404; UNAVAILABLE 503; UNSUPPORTED 501)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code


class TritonModelException(Exception):
    """Raised by this module when a model uses it wrongly."""

    def message(self):
        return str(self)


def _typed(argument, value, kinds):
    """Triton's typed arguments: a TypeError names the argument."""
    if isinstance(value, bool) and kinds in (int, (int, str)):
        return
    if not isinstance(value, kinds):
        raise TypeError("incompatible argument '%s': %s" % (argument, type(value).__name__))


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)`."""

    def __init__(self, name, data, *args):
        # Triton's arguments are typed (pybind11): a wrong type is a
        # TypeError, as there.
        if not isinstance(name, str):
            raise TypeError("Tensor(): the name must be a str, not %s" % type(name).__name__)
        if not isinstance(data, np.ndarray):
            raise TypeError(
                "Tensor '%s': the data must be a numpy array, not %s" % (name, type(data).__name__)
            )
        self._name = name
        self._data = data

    @classmethod
    def _arrived(cls, name, data):
        """An input of a request the server sent: its name a str and its
        data an array already, so not checked again."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._data = data
        return tensor

    def name(self):
        return self._name

    def as_numpy(self):
        return self._data

    def shape(self):
        return list(self._data.shape)

    def triton_dtype(self):
        return numpy_to_triton_type(self._data.dtype)

    def is_cpu(self):
        return True

    def to_dlpack(self):
        raise TritonModelException("DLPack tensors are not supported by wirespeed's Python worker")

    @staticmethod
    def from_dlpack(name, capsule):
        raise TritonModelException("DLPack tensors are not supported by wirespeed's Python worker")


class InferenceRequest:
    """One request, as `execute` receives it."""

    def __init__(self, inputs, requested_output_names, model_name, request_id="",
                 correlation_id=0, flags=0, parameters=None, model_version=-1,
                 timeout=0, preferred_memory=None, trace=None, **kwargs):
        # Triton's arguments are typed (pybind11): a wrong type is a
        # TypeError; a list holding None, Triton's own error.
        _typed("inputs", inputs, list)
        _typed("requested_output_names", requested_output_names, list)
        for name in requested_output_names:
            _typed("requested_output_names", name, str)
        _typed("model_name", model_name, (str, bytes, np.bytes_))
        _typed("request_id", request_id, str)
        _typed("correlation_id", correlation_id, (int, str))
        _typed("flags", flags, int)
        _typed("model_version", model_version, int)
        _typed("timeout", timeout, int)
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    "Input tensor for request with id '%s' and model name '%s' should not be "
                    "empty." % (request_id, model_name if isinstance(model_name, str) else "")
                )
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._set(list(inputs), list(requested_output_names), request_id, correlation_id, flags,
                  parameters or {}, model_name, model_version, int(timeout or 0))

    @classmethod
    def _arrived(cls, inputs, requested_output_names, request_id, correlation_id, flags, parameters):
        """A request the server sent, for `execute`: made of values of the
        types the constructor checks (lists the request owns, `_arrived`
        tensors), so not checked again."""
        request = cls.__new__(cls)
        request._set(inputs, requested_output_names, request_id, correlation_id, flags,
                     parameters, "", -1, 0)
        return request

    def _set(self, inputs, requested_output_names, request_id, correlation_id, flags,
             parameters, model_name, model_version, timeout):
        self._inputs = inputs
        self._requested = requested_output_names
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._parameters = parameters
        self._model_name = model_name
        self._model_version = model_version
        # A BLS call's own timeout, in microseconds (0: none).
        self._timeout = timeout
        # The server's number of a decoupled model's request: its stream.
        self._stream = None
        self._sender = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._requested

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        """The request's timeout in microseconds (0: none), as given."""
        return self._timeout

    def set_release_flags(self, flags):
        """Triton's request rescheduling: with
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE the request comes back to
        `execute` once this call of it returns (an iterative sequence's
        next step, or a request the model is not done with)."""
        _typed("flags", flags, int)
        self._release_flags = flags

    def _rescheduled(self):
        """Whether the model asked for this request again (and the ask,
        taken)."""
        again = bool(self._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return again

    def parameters(self):
        # Compact, as Triton's JSON writer gives it.
        return json.dumps(self._parameters, separators=(",", ":"))

    def is_cancelled(self):
        """Whether the client has left: the model may stop (and answer
        with `TritonError.CANCELLED`, or stop sending)."""
        return _is_cancelled is not None and _is_cancelled(self._stream)

    def get_response_sender(self):
        """The sender of this request's responses: a decoupled model's
        stream, or, for a model that is not decoupled, the one response
        (`execute` then returns None for this request)."""
        if self._sender is None:
            if self._stream is None:
                self._sender = _OneResponseSender()
            else:
                self._sender = InferenceResponseSender(self._stream)
        return self._sender

    def exec(self, decoupled=False):
        """Calls model `model_name` with this request (BLS): through the
        server, as any request to it, before this request's deadline. Its
        failure is the response's error, as in Triton."""
        if _bls_call is None:
            raise TritonModelException("BLS (calling model '%s') needs the server" % self._model_name)
        inputs = []
        payload = []
        size = 0
        for tensor in self._inputs:
            array = np.asarray(tensor.as_numpy())
            datatype = _v2_datatype(array.dtype)
            raw = _raw_bytes(array, datatype)
            inputs.append([tensor.name(), datatype, list(array.shape), size, len(raw)])
            payload.append(raw)
            size += len(raw)
        if size > _pool_limit:
            # The tensors do not fit the pool: the call's error, as Triton
            # answers it; nothing is sent.
            failed = InferenceResponse(error=TritonError(
                "Failed to increase the shared memory pool size for key '%s' to %d bytes: "
                "the tensors of one BLS call may take %d bytes (half the server's memory)"
                % (_model_instance_name, size, _pool_limit)))
            return iter([failed]) if decoupled else failed
        version = None
        try:
            if self._model_version is not None and int(self._model_version) > 0:
                version = str(int(self._model_version))
        except (TypeError, ValueError):
            version = str(self._model_version)
        model = self._model_name
        if isinstance(model, (bytes, np.bytes_)):
            model = bytes(model).decode()
        reply = _bls_call({
            "op": "bls",
            "model": str(model),
            "version": version,
            "inputs": inputs,
            "outputs": self._requested,
            "parameters": self._parameters,
            "decoupled": bool(decoupled),
            "timeout_us": self._timeout,
        }, payload)
        if not decoupled:
            return _bls_response(reply)
        # Every response of the callee's stream, the last the one that
        # carried the final flag (an empty one when the callee sent the
        # flag alone), as Triton's iterator gives them.
        if reply.get("error") is not None:
            return iter([_bls_response(reply)])
        answers = reply.get("responses") or []
        # Their tensors lie in the one answer's payload.
        responses = [_bls_response(r, reply.get(_PAYLOAD)) for r in answers]
        if not answers or not answers[-1].get("final"):
            responses.append(InferenceResponse())
        return iter(responses)

    async def async_exec(self, decoupled=False):
        """`exec`, awaitable: the call waits in a thread of its own, so the
        model's other coroutines run meanwhile."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


class PreferredMemory:
    """Where a BLS call's outputs should be: always the CPU here (no GPU),
    so accepted and of no effect."""

    def __init__(self, preferred_memory_type=TRITONSERVER_MEMORY_CPU, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


def is_model_ready(model_name, model_version=""):
    """Whether the server serves `model_name` (in `model_version`, the
    served one when empty) and it is ready."""
    if _bls_call is None:
        raise TritonModelException("is_model_ready needs the server")
    reply = _bls_call({
        "op": "bls",
        "model": str(model_name),
        "version": str(model_version) if model_version not in ("", None, -1) else None,
        "ready_only": True,
    })
    return bool(reply.get("ready"))


def load_model(model_name, config="", files=None):
    """Loads (or loads again) a model from a model's code, as the
    repository API does: its configuration as JSON (`config`) and its
    files (`{"file:1/model.py": bytes}`) when given. Raises on failure."""
    _typed("model_name", model_name, str)
    _typed("config", config, str)
    if files is not None:
        _typed("files", files, dict)
    placed = {}
    payload = []
    size = 0
    for path, content in (files or {}).items():
        _typed("files", path, str)
        _typed("files", content, (bytes, bytearray))
        placed[path] = [size, len(content)]
        payload.append(content)
        size += len(content)
    _model_control({"control": "load", "model": model_name, "config": config, "files": placed}, payload)


def unload_model(model_name, unload_dependents=False):
    """Stops serving a model, from a model's code (the repository API's
    unload). Raises on failure."""
    _typed("model_name", model_name, str)
    _typed("unload_dependents", unload_dependents, bool)
    _model_control({"control": "unload", "model": model_name})


def _model_control(message, payload=()):
    if _bls_call is None:
        raise TritonModelException("model control (%s) needs the server" % message["model"])
    reply = _bls_call(dict(message, op="bls"), payload)
    if reply.get("error") is not None:
        raise TritonModelException(reply["error"])


def _bls_response(reply, payload=None):
    """One answer of a BLS call as an InferenceResponse, its tensors in
    `payload` (the reply's own when None)."""
    if reply.get("error") is not None:
        return InferenceResponse(error=TritonError(reply["error"], reply.get("code", TritonError.INTERNAL)))
    if payload is None:
        payload = reply.get(_PAYLOAD)
    payload = memoryview(payload if payload is not None else b"")
    return InferenceResponse(output_tensors=[
        Tensor(name, _from_raw(payload[offset : offset + length], datatype, shape))
        for name, datatype, shape, offset, length in reply["outputs"]
    ])


def _check_send(response, flags):
    """The arguments of a `send`, checked as Triton's response sender
    checks them."""
    if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
        raise TritonModelException("Unable to send response. Unsupported flag provided.")
    if flags == 0 and response is None:
        raise TritonModelException(
            "Inference Response object must be provided when the response flags is set to zero."
        )
    if response is not None and not isinstance(response, InferenceResponse):
        raise TritonModelException(
            "send() takes a pb_utils.InferenceResponse, not %s" % type(response).__name__
        )


class InferenceResponseSender:
    """Sends a decoupled model's responses to one request, from `execute`
    or from any thread; `send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)`
    (with or without a last response) ends them. A send waits while the
    client reads slower than the model writes."""

    def __init__(self, stream):
        self._stream = stream
        self._closed = False

    def send(self, response=None, flags=0):
        _check_send(response, flags)
        if self._closed:
            raise TritonModelException(
                "Unable to send response. Response sender has been closed."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if final:
            self._closed = True
        _send_response(self._stream, response, final)

    def is_cancelled(self):
        return _is_cancelled(self._stream)


# The condition of every `_OneResponseSender._answered` sender.
_ANSWERED = threading.Condition()


class _OneResponseSender:
    """The response sender of a model that is not decoupled: its one
    response, kept for the worker to answer once the final flag comes
    (before `execute` returns, or after, from a thread or a task of the
    model's), with Triton's rules (one response, and the final flag only
    after it)."""

    def __init__(self):
        self.response = None
        self._sent = 0
        self._closed = False
        self._done = threading.Condition()

    @classmethod
    def _answered(cls, response):
        """The sender of a request whose `execute` returned `response` and
        never asked for its sender: as if the worker had sent the response
        with the final flag through a new one, which cannot fail, and
        closed to any later `send` all the same. Nothing waits on it, so it
        shares one condition with the others."""
        sender = cls.__new__(cls)
        sender.response = response
        sender._sent = 1
        sender._closed = True
        sender._done = _ANSWERED
        return sender

    def send(self, response=None, flags=0):
        _check_send(response, flags)
        if response is not None and self._sent > 0:
            raise TritonModelException(
                "Unable to send response. Non-decoupled model cannot send more than one response."
            )
        if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL and self._sent == 0:
            raise TritonModelException(
                "Unable to send response. Non-decoupled model cannot send complete final "
                "before sending a response."
            )
        if self._closed:
            raise TritonModelException(
                "Unable to send response. Response sender has been closed."
            )
        with self._done:
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            if response is not None:
                self.response = response
            self._sent += 1
            self._done.notify_all()

    def _wait(self, seconds):
        """Waits up to `seconds` for the final flag; whether it came."""
        with self._done:
            if not self._closed:
                self._done.wait(seconds)
            return self._closed

    def is_cancelled(self):
        return _is_cancelled is not None and _is_cancelled(None)


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    def __init__(self, output_tensors=(), error=None, parameters=None):
        _typed("output_tensors", output_tensors, (list, tuple))
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException("Output tensor of an InferenceResponse should not be empty.")
        self._outputs = list(output_tensors)
        if isinstance(error, str):
            error = TritonError(error)
        self._error = error

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class ModelConfig:
    """The configuration `auto_complete_config` completes: Triton's JSON of
    the model's configuration, of which the maximum batch size, the inputs
    and outputs, the scheduler and the transaction policy may be set. An
    input or output already configured must agree with what is added."""

    def __init__(self, model_config):
        if isinstance(model_config, (str, bytes)):
            model_config = json.loads(model_config)
        self._model_config = model_config
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def _name(self):
        return self._model_config.get("name", "")

    def as_dict(self):
        return self._model_config

    def max_batch_size(self):
        return self._model_config["max_batch_size"]

    def set_max_batch_size(self, max_batch_size):
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size %d, but in auto-complete-config "
                "function for model '%s' specified max_batch_size %d"
                % (configured, self._name(), max_batch_size)
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    "Configuration specified scheduling_choice as '%s', but auto-complete-config "
                    "function for model '%s' tries to set scheduling_choice as 'dynamic_batching'"
                    % (other, self._name())
                )
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model '%s' "
                    "contains property other than 'decoupled'" % self._name()
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if policy.get("decoupled", transaction_policy_dict["decoupled"]) != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model '%s', "
                    "which is already set to '%s'" % (self._name(), policy["decoupled"])
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]

    def _add(self, kind, tensor, allowed):
        name = tensor.get("name")
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    "%s '%s' in auto-complete-config function for model '%s' contains property "
                    "other than %s." % (kind, name, self._name(),
                                        ", ".join("'%s'" % a for a in allowed[:-1]) + " and '%s'" % allowed[-1])
                )
        if name is None:
            raise ValueError(
                "%s in auto-complete-config function for model '%s' is missing 'name' property."
                % (kind, self._name())
            )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    "%s '%s' in auto-complete-config function for model '%s' is missing '%s' property."
                    % (kind, name, self._name(), key)
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            if current.get("data_type", "TYPE_INVALID") not in ("TYPE_INVALID", tensor["data_type"]):
                raise ValueError(
                    "unable to load model '%s', configuration expects datatype %s for %s '%s', "
                    "model provides %s" % (self._name(), current["data_type"], kind, name, tensor["data_type"])
                )
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    "model '%s', tensor '%s': the model expects dims %s but the model "
                    "configuration specifies dims %s" % (self._name(), name, tensor["dims"], current["dims"])
                )
            current.update(tensor)
            return
        self._model_config[kind].append(dict(tensor))

    def add_input(self, input):
        self._add("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add("output", output, ["name", "data_type", "dims"])


# In Triton these classes are the stub's C extension's, and their names
# say so where a model (or Triton's own error text) prints a type.
for _class in (TritonError, TritonModelException, Tensor, InferenceRequest, PreferredMemory,
               InferenceResponseSender, _OneResponseSender, InferenceResponse):
    _class.__module__ = "c_python_backend_utils"
del _class
