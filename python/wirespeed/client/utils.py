"""tritonclient.utils' helpers: datatypes, BYTES serialization, the exception."""

import struct

import numpy as np

__all__ = [
    "InferenceServerException",
    "raise_error",
    "np_to_triton_dtype",
    "triton_to_np_dtype",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
]


class InferenceServerException(Exception):
    """A failed call: the server's error message and HTTP status, or the
    client's own error (status None)."""

    def __init__(self, msg, status=None, debug_details=None):
        super().__init__(msg)
        self._msg = msg
        self._status = status
        self._debug_details = debug_details

    def __str__(self):
        msg = super().__str__() if self._msg is None else self._msg
        if self._status is not None:
            msg = "[" + self._status + "] " + msg
        return msg

    def message(self):
        """The message."""
        return self._msg

    def status(self):
        """The HTTP status, as a string, or None."""
        return self._status

    def debug_details(self):
        """More details, when there are."""
        return self._debug_details


def raise_error(msg):
    raise InferenceServerException(msg=msg) from None


_NP_TO_TRITON = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}


def np_to_triton_dtype(np_dtype):
    """The V2 datatype of a numpy dtype, or None."""
    dtype = np.dtype(np_dtype)
    if dtype in _NP_TO_TRITON:
        return _NP_TO_TRITON[dtype]
    if dtype == np.object_ or dtype.type == np.bytes_:
        return "BYTES"
    if "bfloat16" in str(dtype):
        return "BF16"
    return None


def triton_to_np_dtype(dtype):
    """The numpy dtype of a V2 datatype, or None."""
    for np_dtype, name in _NP_TO_TRITON.items():
        if name == dtype:
            return np_dtype.type
    if dtype == "BYTES":
        return np.object_
    if dtype == "BF16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return None


def serialize_byte_tensor(input_tensor):
    """The raw form of a BYTES tensor: each element as a 4-byte little-endian
    length and its bytes, in C order; a 0-d object array holding them."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        raise_error("cannot serialize bytes tensor: invalid datatype")
    parts = []
    for obj in np.nditer(input_tensor, flags=["refs_ok"], order="C"):
        item = obj.item()
        if not isinstance(item, bytes):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(item)
    return np.array(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor):
    """The elements of a raw BYTES tensor, as a 1-d object array of bytes."""
    strs = []
    offset = 0
    data = bytes(encoded_tensor)
    while offset < len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        strs.append(data[offset : offset + length])
        offset += length
    return np.array(strs, dtype=np.object_)
