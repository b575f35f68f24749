"""The extension module: the classes the typed package re-exports."""

from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from wirespeed import DecodeError as DecodeError
from wirespeed import Request as Request
from wirespeed import decode_request as decode_request
from wirespeed import encode_response as encode_response
from wirespeed.trees import Model as Model
from wirespeed.trees import load as load

__version__: str

class InferInput:
    """One input of an infer request (tritonclient's ``InferInput``)."""

    def __init__(self, name: str, shape: Sequence[int], datatype: str) -> None: ...
    def name(self) -> str: ...
    def datatype(self) -> str: ...
    def shape(self) -> list[int]: ...
    def set_shape(self, shape: Sequence[int]) -> "InferInput": ...
    def set_data_from_numpy(self, input_tensor: np.ndarray, binary_data: bool = True) -> "InferInput":
        """Copies the array once into the request: as raw bytes after the
        JSON (``binary_data``, the default; always over gRPC) or in it."""
    def set_shared_memory(self, region_name: str, byte_size: int, offset: int = 0) -> "InferInput": ...

class InferRequestedOutput:
    """An output asked for (tritonclient's ``InferRequestedOutput``)."""

    def __init__(self, name: str, binary_data: bool = True, class_count: int = 0) -> None: ...
    def name(self) -> str: ...
    def set_shared_memory(self, region_name: str, byte_size: int, offset: int = 0) -> None: ...
    def unset_shared_memory(self) -> None: ...

class InferResult:
    """The answer to an infer call (tritonclient's ``InferResult``)."""

    @staticmethod
    def from_response_body(response_body: bytes, verbose: bool = False, header_length: Optional[int] = None,
                           content_encoding: Optional[str] = None) -> "InferResult":
        """An answer body read by the caller's own HTTP code."""

    def as_numpy(self, name: str) -> Optional[np.ndarray]:
        """The output as an array that owns the decoded buffer; None
        without such an output."""
    def get_output(self, name: str, as_json: bool = False) -> Any: ...
    def get_response(self, as_json: bool = False) -> Any:
        """HTTP: the answer's JSON as a dict. gRPC: the message's fields as
        attributes, or with ``as_json`` protobuf's JSON mapping as a dict."""

class HttpClient:
    """Kept-open HTTP/1.1 connections to one server (the engine of
    ``wirespeed.client.http``)."""

    def __init__(self, url: str, connection_timeout: float = 60.0, network_timeout: float = 60.0,
                 concurrency: int = 1) -> None: ...
    def close(self) -> None: ...
    def is_server_live(self, headers: Optional[Mapping[str, str]] = None) -> bool: ...
    def is_server_ready(self, headers: Optional[Mapping[str, str]] = None) -> bool: ...
    def is_model_ready(self, model_name: str, model_version: str = "",
                       headers: Optional[Mapping[str, str]] = None) -> bool: ...
    def get_server_metadata(self, headers: Optional[Mapping[str, str]] = None) -> Any: ...
    def get_model_metadata(self, model_name: str, model_version: str = "",
                           headers: Optional[Mapping[str, str]] = None) -> Any: ...
    def get_model_config(self, model_name: str, model_version: str = "",
                         headers: Optional[Mapping[str, str]] = None) -> Any: ...
    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None) -> tuple[int, Any]: ...
    def infer(self, model_name: str, inputs: Sequence[InferInput], model_version: str = "",
              outputs: Optional[Sequence[InferRequestedOutput]] = None, request_id: str = "",
              parameters: Optional[Mapping[str, Union[bool, int, float, str]]] = None,
              headers: Optional[Mapping[str, str]] = None, binary_data_output: bool = True) -> InferResult: ...

class GrpcConnections:
    """Kept-open gRPC connections to one server (the engine of
    ``wirespeed.client.grpc``)."""

    def __init__(self, url: str, concurrency: int = 1) -> None: ...
    def close(self) -> None: ...
    def is_server_live(self, headers: Optional[Mapping[str, str]] = None,
                       client_timeout: Optional[float] = None) -> bool: ...
    def is_server_ready(self, headers: Optional[Mapping[str, str]] = None,
                        client_timeout: Optional[float] = None) -> bool: ...
    def is_model_ready(self, model_name: str, model_version: str = "",
                       headers: Optional[Mapping[str, str]] = None,
                       client_timeout: Optional[float] = None) -> bool: ...
    def get_server_metadata(self, headers: Optional[Mapping[str, str]] = None, as_json: bool = False,
                            client_timeout: Optional[float] = None) -> Any: ...
    def get_model_metadata(self, model_name: str, model_version: str = "",
                           headers: Optional[Mapping[str, str]] = None, as_json: bool = False,
                           client_timeout: Optional[float] = None) -> Any: ...
    def get_model_config(self, model_name: str, model_version: str = "",
                         headers: Optional[Mapping[str, str]] = None, as_json: bool = False,
                         client_timeout: Optional[float] = None) -> Any: ...
    def infer(self, model_name: str, inputs: Sequence[InferInput], model_version: str = "",
              outputs: Optional[Sequence[InferRequestedOutput]] = None, request_id: str = "",
              parameters: Optional[Mapping[str, Union[bool, int, float, str]]] = None,
              headers: Optional[Mapping[str, str]] = None,
              client_timeout: Optional[float] = None) -> InferResult: ...
