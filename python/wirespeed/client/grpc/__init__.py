"""tritonclient.grpc's API on wirespeed's Rust gRPC client.

``import wirespeed.client.grpc as grpcclient`` in place of
``import tritonclient.grpc as grpcclient``. Each call is made in Rust by the
calling thread with the GIL released; tensors travel as raw contents, sent
from the input's buffer. Metadata and configuration come back as protobuf's
JSON mapping with ``as_json=True`` (exactly tritonclient's), and otherwise
as objects with the message's fields as attributes (docs/python.md says how
they differ from protobuf messages).
"""

from wirespeed._wirespeed import GrpcConnections as _Connections
from wirespeed._wirespeed import InferInput as _InferInput
from wirespeed._wirespeed import InferRequestedOutput as _InferRequestedOutput
from wirespeed._wirespeed import InferResult
from wirespeed.client._common import Lifecycle, infer_parameters
from wirespeed.client.utils import InferenceServerException, raise_error

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult", "InferenceServerException"]


class Message:
    """A protobuf message's fields as attributes (nested messages too,
    repeated fields as lists, maps as dicts of messages)."""

    def __init__(self, fields):
        for key, value in fields.items():
            setattr(self, key, _message(value))

    def __repr__(self):
        return "Message(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"

    def __eq__(self, other):
        return isinstance(other, Message) and vars(self) == vars(other)


def _message(value):
    if isinstance(value, dict):
        return Message(value)
    if isinstance(value, list):
        return [_message(v) for v in value]
    return value


def InferInput(name, shape, datatype):
    """An input of an infer request (tritonclient.grpc's ``InferInput``);
    ``set_data_from_numpy(array)`` sets its data."""
    return _InferInput(name, shape, datatype)


def InferRequestedOutput(name, class_count=0):
    """An output asked for (tritonclient.grpc's ``InferRequestedOutput``)."""
    return _InferRequestedOutput(name, True, class_count)


class InferenceServerClient(Lifecycle):
    """A client of one V2 server's gRPC API.

    ``url`` is ``host:port`` (as tritonclient's) or ``unix:///path/to.sock``.
    """

    def __init__(self, url, verbose=False, ssl=False, root_certificates=None, private_key=None,
                 certificate_chain=None, creds=None, keepalive_options=None, channel_args=None):
        if ssl or creds is not None:
            raise_error("TLS is not supported by wirespeed's client")
        super().__init__(_Connections(url, concurrency=8), 8)
        self._verbose = verbose

    def is_server_live(self, headers=None, client_timeout=None):
        return self._connections.is_server_live(headers, client_timeout)

    def is_server_ready(self, headers=None, client_timeout=None):
        return self._connections.is_server_ready(headers, client_timeout)

    def is_model_ready(self, model_name, model_version="", headers=None, client_timeout=None):
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.is_model_ready(model_name, model_version, headers, client_timeout)

    def get_server_metadata(self, headers=None, as_json=False, client_timeout=None):
        return self._connections.get_server_metadata(headers, as_json, client_timeout)

    def get_model_metadata(self, model_name, model_version="", headers=None, as_json=False, client_timeout=None):
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.get_model_metadata(model_name, model_version, headers, as_json, client_timeout)

    def get_model_config(self, model_name, model_version="", headers=None, as_json=False, client_timeout=None):
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.get_model_config(model_name, model_version, headers, as_json, client_timeout)

    def infer(self, model_name, inputs, model_version="", outputs=None, request_id="", sequence_id=0,
              sequence_start=False, sequence_end=False, priority=0, timeout=None, client_timeout=None,
              headers=None, compression_algorithm=None, parameters=None):
        """Runs inference; returns an :class:`InferResult`."""
        if compression_algorithm:
            raise_error("compression_algorithm is not supported by wirespeed's client")
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.infer(
            model_name, inputs, model_version, outputs, request_id,
            infer_parameters(sequence_id, sequence_start, sequence_end, priority, timeout, parameters),
            headers, client_timeout,
        )

    def async_infer(self, model_name, inputs, callback, model_version="", outputs=None, request_id="", **kwargs):
        """Starts :meth:`infer` on a worker thread; calls ``callback(result,
        error)`` with the result or the exception, as tritonclient.grpc does."""
        def run():
            try:
                result = self.infer(model_name, inputs, model_version, outputs, request_id, **kwargs)
            except InferenceServerException as error:
                callback(None, error)
            else:
                callback(result, None)

        self._submit(run)
