"""The wire of wirespeed's Python worker (`worker.py`): the socket to the
server (length-prefixed JSON messages) and the two shared-memory segments
the tensors lie in, with the raw form of BYTES tensors. The server sends
this program and `worker.py` after it as one program (`process.rs`
`WORKER`), so what is defined here is the worker's too.
"""

import json
import mmap
import os
import socket
import struct
import time

SOCKET_FD, INPUT_FD, OUTPUT_FD = 3, 4, 5
ALIGN = 64

try:
    import numpy as np
except ImportError as e:  # reported to the server as a load failure
    np = None
    NUMPY_ERROR = e


def dtypes():
    table = {
        "BOOL": np.dtype(np.bool_),
        "UINT8": np.dtype(np.uint8),
        "UINT16": np.dtype("<u2"),
        "UINT32": np.dtype("<u4"),
        "UINT64": np.dtype("<u8"),
        "INT8": np.dtype(np.int8),
        "INT16": np.dtype("<i2"),
        "INT32": np.dtype("<i4"),
        "INT64": np.dtype("<i8"),
        "FP16": np.dtype("<f2"),
        "FP32": np.dtype("<f4"),
        "FP64": np.dtype("<f8"),
        "BYTES": np.dtype(np.object_),
    }
    try:
        import ml_dtypes

        table["BF16"] = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return table


class Channel:
    """The socket to the server: length-prefixed JSON messages. Sends are
    locked: a decoupled model's threads send responses at once."""

    def __init__(self, fd):
        import threading

        self.sock = socket.socket(fileno=fd)
        self.head = bytearray(4)
        self.lock = threading.Lock()

    def linger(self, seconds):
        """Polls the socket for a while before a blocking read: under load
        the next request is sent as this one's answer is read, and a
        worker that went to sleep would wait for the kernel to wake it
        (tens of microseconds on a busy machine) for each request."""
        import select

        end = time.perf_counter() + seconds
        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        while time.perf_counter() < end:
            if poll.poll(0):
                return
            # The core goes to whatever else is runnable on it (the
            # server's threads, a neighbour) before the next look.
            os.sched_yield()

    def readable(self):
        """Whether a message has come (a read would not wait)."""
        import select

        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        return bool(poll.poll(0))

    def recv(self):
        if not self._fill(self.head):
            return None
        (length,) = struct.unpack("<I", self.head)
        body = bytearray(length)
        if not self._fill(body):
            return None
        return json.loads(body)

    def _fill(self, buf):
        view = memoryview(buf)
        got = 0
        while got < len(buf):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                return False
            got += n
        return True

    def send(self, message, raw=b""):
        """Sends `message`, then `raw` bytes (its `raw` key says how many)."""
        body = json.dumps(message, separators=(",", ":")).encode()
        with self.lock:
            self.sock.sendall(struct.pack("<I", len(body)) + body + raw)


class Segments:
    """The two shared-memory segments: inputs (read-only here) and outputs."""

    def __init__(self):
        self.inputs = None
        self.input_size = 0
        self.outputs = None
        self.output_size = os.fstat(OUTPUT_FD).st_size

    def input_map(self, size):
        if size > self.input_size:
            # A new map for the grown segment; arrays a model kept from
            # earlier requests keep the old one alive until they go.
            self.inputs = mmap.mmap(INPUT_FD, size, access=mmap.ACCESS_READ)
            self.input_size = size
        return self.inputs

    def output_map(self, size):
        if size > self.output_size or self.outputs is None:
            if size > self.output_size:
                grown = max(size, self.output_size * 2, 1 << 16)
                os.ftruncate(OUTPUT_FD, grown)
                self.output_size = grown
            if self.outputs is not None:
                self.outputs.close()
            self.outputs = mmap.mmap(OUTPUT_FD, self.output_size)
        return self.outputs


def read_bytes(buffer, offset, length, count):
    """A BYTES tensor's elements from their raw form: 4-byte lengths."""
    out = np.empty(count, dtype=np.object_)
    view = memoryview(buffer)[offset : offset + length]
    at = 0
    for i in range(count):
        (n,) = struct.unpack_from("<I", view, at)
        out[i] = bytes(view[at + 4 : at + 4 + n])
        at += 4 + n
    return out


def bytes_raw(array):
    """The raw form of a BYTES tensor: each element's length, then it."""
    parts = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)
