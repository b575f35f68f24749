from typing import Any, Mapping, Optional, Union

import numpy as np

__version__: str

class DecodeError(ValueError):
    """A body that is not a valid V2 infer request."""

    category: str
    """'syntax', 'schema', 'type', 'range', 'shape', 'limit' or 'binary'."""
    offset: int
    """The byte of the body where the error is."""
    input: Optional[str]
    """The input concerned, if any."""

class Request:
    """A decoded V2 infer request."""

    inputs: dict[str, np.ndarray]
    """The inputs by name; each array owns the decoder's buffer (no copy).
    BYTES inputs are object arrays of ``bytes``."""
    id: Optional[str]
    parameters: dict[str, Union[bool, int, float, str]]
    outputs: list[dict[str, Any]]
    """The outputs asked for: ``{"name": ..., "parameters": {...}}``."""

def decode_request(
    body: Union[bytes, bytearray, memoryview],
    header_length: Optional[int] = None,
    *,
    strict: bool = False,
    max_elements: Optional[int] = None,
) -> Request:
    """Decodes a V2 infer request.

    ``header_length`` (the ``Inference-Header-Content-Length`` header) says
    where the JSON ends and the binary tensor data begins. The GIL is released
    while decoding. ``strict`` refuses NaN and Infinity; ``max_elements``
    bounds the elements over all inputs (32 Mi by default).

    Raises :class:`DecodeError` for a body that is not a valid request.
    """

def encode_response(
    outputs: Mapping[str, np.ndarray],
    *,
    model_name: str,
    model_version: str = "",
    id: Optional[str] = None,
    parameters: Optional[Mapping[str, Union[bool, int, float, str]]] = None,
    binary: bool = False,
) -> tuple[bytes, Optional[int]]:
    """Encodes a V2 infer response: ``(body, header_length)``.

    With ``binary``, outputs follow the JSON as raw bytes (Triton's binary
    extension) and ``header_length`` is the JSON's length, to send as the
    ``Inference-Header-Content-Length`` header; otherwise it is None.
    """

def encode_error(message: str) -> bytes:
    """The V2 error body, ``{"error": message}``, for a 4xx or 5xx answer."""
