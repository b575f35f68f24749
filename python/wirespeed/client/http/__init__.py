"""tritonclient.http's API on wirespeed's Rust client.

``import wirespeed.client.http as httpclient`` in place of
``import tritonclient.http as httpclient``: ``InferenceServerClient``,
``InferInput``, ``InferRequestedOutput`` and ``InferResult`` behave as
tritonclient's (docs/python.md lists what is covered). Each call is made by
the calling thread in Rust with the GIL released, on a kept-open connection;
a JSON answer is decoded while it downloads, and output arrays own the
decoded buffers.
"""

import json
from urllib.parse import quote

from wirespeed._wirespeed import (
    HttpClient as _HttpClient,
    InferInput,
    InferRequestedOutput,
    InferResult,
)
from wirespeed.client._common import Lifecycle, infer_parameters
from wirespeed.client.utils import InferenceServerException, raise_error

__all__ = [
    "InferenceServerClient",
    "InferInput",
    "InferRequestedOutput",
    "InferResult",
    "InferAsyncRequest",
    "InferenceServerException",
]


def _unsupported(name, value):
    if value:
        raise_error(f"{name} is not supported by wirespeed's client")


def _check_headers(headers):
    if headers is not None and not isinstance(headers, dict):
        raise_error("headers must be a dict")
    return headers


class InferAsyncRequest:
    """A request started by :meth:`InferenceServerClient.async_infer`."""

    def __init__(self, future, verbose=False):
        self._future = future
        self._verbose = verbose

    def get_result(self, block=True, timeout=None):
        """The :class:`InferResult`; None if not ``block`` and not done."""
        if not block and not self._future.done():
            return None
        return self._future.result(timeout=timeout)


class InferenceServerClient(Lifecycle):
    """A client of one V2 server over HTTP/1.1.

    ``url`` is ``host:port`` (as tritonclient's), ``http://host:port`` or
    ``unix:///path/to.sock``. ``concurrency`` connections are kept open for
    calls from several threads and for :meth:`async_infer`.
    """

    def __init__(
        self,
        url,
        verbose=False,
        concurrency=1,
        connection_timeout=60.0,
        network_timeout=60.0,
        max_greenlets=None,
        ssl=False,
        ssl_options=None,
        ssl_context_factory=None,
        insecure=False,
    ):
        if ssl:
            raise_error("TLS is not supported by wirespeed's client; use http or a Unix socket")
        connections = _HttpClient(
            url,
            connection_timeout=connection_timeout,
            network_timeout=network_timeout,
            concurrency=concurrency,
        )
        super().__init__(connections, concurrency)
        self._verbose = verbose

    # Health and metadata.

    def is_server_live(self, headers=None, query_params=None):
        _unsupported("query_params", query_params)
        return self._connections.is_server_live(_check_headers(headers))

    def is_server_ready(self, headers=None, query_params=None):
        _unsupported("query_params", query_params)
        return self._connections.is_server_ready(_check_headers(headers))

    def is_model_ready(self, model_name, model_version="", headers=None, query_params=None):
        _unsupported("query_params", query_params)
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.is_model_ready(model_name, model_version, _check_headers(headers))

    def get_server_metadata(self, headers=None, query_params=None):
        _unsupported("query_params", query_params)
        return self._connections.get_server_metadata(_check_headers(headers))

    def get_model_metadata(self, model_name, model_version="", headers=None, query_params=None):
        _unsupported("query_params", query_params)
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.get_model_metadata(model_name, model_version, _check_headers(headers))

    def get_model_config(self, model_name, model_version="", headers=None, query_params=None):
        _unsupported("query_params", query_params)
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.get_model_config(model_name, model_version, _check_headers(headers))

    # Triton's extensions, as plain JSON calls.

    def _call(self, method, path, body=None, headers=None, query_params=None):
        _unsupported("query_params", query_params)
        data = None if body is None else json.dumps(body).encode()
        status, value = self._connections.request(method, path, data, _check_headers(headers))
        if status != 200:
            message = value.get("error") if isinstance(value, dict) else None
            raise InferenceServerException(
                msg=message or f"the server answered {status}", status=str(status)
            )
        return value

    def get_model_repository_index(self, headers=None, query_params=None):
        return self._call("POST", "/v2/repository/index", {}, headers, query_params)

    def load_model(self, model_name, headers=None, query_params=None, config=None, files=None):
        _unsupported("files", files)
        body = {} if config is None else {"parameters": {"config": config}}
        self._call("POST", f"/v2/repository/models/{quote(model_name)}/load", body, headers, query_params)

    def unload_model(self, model_name, headers=None, query_params=None, unload_dependents=False):
        body = {"parameters": {"unload_dependents": unload_dependents}}
        self._call("POST", f"/v2/repository/models/{quote(model_name)}/unload", body, headers, query_params)

    def get_inference_statistics(self, model_name="", model_version="", headers=None, query_params=None):
        if model_name == "":
            path = "/v2/models/stats"
        elif model_version == "":
            path = f"/v2/models/{quote(model_name)}/stats"
        else:
            path = f"/v2/models/{quote(model_name)}/versions/{model_version}/stats"
        return self._call("GET", path, None, headers, query_params)

    def get_system_shared_memory_status(self, region_name="", headers=None, query_params=None):
        path = "/v2/systemsharedmemory" + (f"/region/{quote(region_name)}" if region_name else "") + "/status"
        return self._call("GET", path, None, headers, query_params)

    def register_system_shared_memory(self, name, key, byte_size, offset=0, headers=None, query_params=None):
        body = {"key": key, "offset": offset, "byte_size": byte_size}
        self._call("POST", f"/v2/systemsharedmemory/region/{quote(name)}/register", body, headers, query_params)

    def unregister_system_shared_memory(self, name="", headers=None, query_params=None):
        path = "/v2/systemsharedmemory" + (f"/region/{quote(name)}" if name else "") + "/unregister"
        self._call("POST", path, {}, headers, query_params)

    # Inference.

    def infer(
        self,
        model_name,
        inputs,
        model_version="",
        outputs=None,
        request_id="",
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        headers=None,
        query_params=None,
        request_compression_algorithm=None,
        response_compression_algorithm=None,
        parameters=None,
    ):
        """Runs inference; returns an :class:`InferResult`.

        Raises :class:`InferenceServerException` with the server's message
        and HTTP status when the server refuses the request.
        """
        _unsupported("query_params", query_params)
        _unsupported("request_compression_algorithm", request_compression_algorithm)
        _unsupported("response_compression_algorithm", response_compression_algorithm)
        if type(model_version) != str:
            raise_error("model version must be a string")
        return self._connections.infer(
            model_name,
            inputs,
            model_version,
            outputs,
            request_id,
            infer_parameters(sequence_id, sequence_start, sequence_end, priority, timeout, parameters),
            _check_headers(headers),
        )

    def async_infer(self, model_name, inputs, model_version="", outputs=None, request_id="", **kwargs):
        """Starts :meth:`infer` on one of ``concurrency`` threads; returns an
        :class:`InferAsyncRequest`."""
        future = self._submit(self.infer, model_name, inputs, model_version, outputs, request_id, **kwargs)
        return InferAsyncRequest(future, self._verbose)
