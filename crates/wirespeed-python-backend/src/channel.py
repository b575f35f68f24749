"""The wire of wirespeed's Python worker (`worker.py`): the socket to the
server (frames: a JSON message and the bytes of the tensors it carries, as
`wire.rs` lays them out), the two shared-memory segments a request's
tensors lie in and the one its BLS calls' tensors cross, with the raw
form of BYTES tensors. The server sends
this program and `worker.py` after it as one program (`process.rs`
`WORKER`), so what is defined here is the worker's too.
"""

import json
import mmap
import os
import socket
import struct
import time
import weakref

SOCKET_FD, INPUT_FD, OUTPUT_FD, CALL_FD, HEAP_FD = 3, 4, 5, 6, 7
# A payload this small goes in the message's own write.
INLINE_PAYLOAD = 1 << 16
ALIGN = 64
# The bytes read from the socket at a time when less would do: a
# request's frame and then some.
READ_AHEAD = 1 << 16

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
    return table


def bf16():
    """numpy's BF16 from ml_dtypes, or None when it is not installed.
    Imported at the first BF16 tensor, not at start: the import costs a
    worker 3.3 MiB of memory that a model without BF16 never uses."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


# A frame's head: a mark, the JSON message's length, then the length of
# the payload that follows it (the bytes of the tensors the message places:
# a BLS call's inputs and its answer's outputs, a decoupled response's
# outputs, a loaded model's files). The mark finds a reader that lost its
# place at once, rather than after it took garbage for a length.
HEAD = struct.Struct("<4sIQ")
MARK = b"wsF1"
# The key under which `recv` hands over a message's payload.
PAYLOAD = "$payload"


class FrameError(Exception):
    """The server's side of the socket sent something that is not a frame."""


# A frame's message, read and written by `json`'s C scanner and encoder
# called directly: `json.loads` and `json.dumps` wrap them in Python
# (making the encoder anew for each message), which took half of a small
# request's JSON time in the worker.
_DECODER = json.JSONDecoder()


def decode_message(body):
    """The message of a frame's `body` (UTF-8 JSON bytes)."""
    text = body.decode("utf-8")
    try:
        message, end = _DECODER.scan_once(text, 0)
    except StopIteration:
        message, end = None, -1
    if end != len(text):
        # Whitespace around it, or not JSON: `json`'s own reading, with
        # its own error.
        return _DECODER.decode(text)
    return message


def _unencodable(value):
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


try:
    from json.encoder import c_make_encoder as _c_make_encoder
except ImportError:  # a Python built without `_json`
    _c_make_encoder = None
if _c_make_encoder is not None:
    # Compact, ASCII, NaN allowed: `json.dumps(message, separators=(",",
    # ":"))`.
    _ENCODE = _c_make_encoder(
        None, _unencodable, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )

    def encode_message(message):
        """A frame's message as UTF-8 JSON bytes."""
        return "".join(_ENCODE(message, 0)).encode()
else:

    def encode_message(message):
        """A frame's message as UTF-8 JSON bytes."""
        return json.dumps(message, separators=(",", ":")).encode()


class Channel:
    """The socket to the server: frames of a JSON message and its payload.
    Sends are locked: a decoupled model's threads send responses at once."""

    def __init__(self, fd):
        import threading

        self.sock = socket.socket(fileno=fd)
        # What was read from the socket and not yet taken: a request's
        # frame (its head and message) comes in one read rather than two.
        self.buffer = bytearray(READ_AHEAD)
        self.start = 0
        self.end = 0
        self.lock = threading.Lock()
        self.lingering = None

    def linger(self, seconds):
        """Polls the socket for a while before a blocking read: under load
        the next request is sent as this one's answer is read, and a
        worker that went to sleep would wait for the kernel to wake it
        (tens of microseconds on a busy machine) for each request."""
        import select

        if self.end > self.start:
            return
        end = time.perf_counter() + seconds
        # Made once: only the worker's loop lingers (`readable`, which a
        # model's threads may call at once, makes its own).
        poll = self.lingering
        if poll is None:
            poll = self.lingering = select.poll()
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

        if self.end > self.start:
            return True
        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        return bool(poll.poll(0))

    def recv(self):
        """The next message, its payload (when it has one) under
        `PAYLOAD` (a uint8 array, or a bytearray without numpy); None when
        the server is gone."""
        if not self._ahead(HEAD.size):
            return None
        mark, length, size = HEAD.unpack_from(self.buffer, self.start)
        if mark != MARK:
            raise FrameError(
                "the server sent %r where a frame begins"
                % bytes(self.buffer[self.start : self.start + HEAD.size])
            )
        self.start += HEAD.size
        if length <= len(self.buffer):
            if not self._ahead(length):
                return None
            body = self.buffer[self.start : self.start + length]
            self.start += length
        else:
            # A message larger than the buffer (a load's files): read
            # into its own.
            body = bytearray(length)
            if not self._fill(body):
                return None
        message = decode_message(body)
        if size:
            # Fresh pages, not zeroed first (a bytearray would write the
            # whole of a gigabyte before the socket writes it again).
            payload = np.empty(size, dtype=np.uint8) if np is not None else bytearray(size)
            if not self._fill(payload):
                return None
            message[PAYLOAD] = payload
        return message

    def _ahead(self, n):
        """Whether the buffer holds `n` (at most its size) unread bytes,
        reading as much as the socket has until it does; False when the
        server is gone first."""
        if self.end - self.start >= n:
            return True
        if self.start + n > len(self.buffer):
            # Too near the end: what is unread moves to the front.
            unread = self.end - self.start
            self.buffer[:unread] = self.buffer[self.start : self.end]
            self.start, self.end = 0, unread
        view = memoryview(self.buffer)
        try:
            while self.end - self.start < n:
                got = self.sock.recv_into(view[self.end :])
                if got == 0:
                    return False
                self.end += got
        finally:
            view.release()
        return True

    def _fill(self, buf):
        """Fills `buf`: first with what the buffer holds unread, then from
        the socket; False when the server is gone first."""
        view = memoryview(buf).cast("B")
        got = min(self.end - self.start, len(view))
        view[:got] = self.buffer[self.start : self.start + got]
        self.start += got
        while got < len(view):
            n = self.sock.recv_into(view[got:], min(len(view) - got, 1 << 24))
            if n == 0:
                return False
            got += n
        return True

    def send(self, message, payload=()):
        """Sends `message`, then `payload`: bytes, or a list of buffers
        (numpy arrays among them, sent from where they lie)."""
        if isinstance(payload, (bytes, bytearray, memoryview)):
            payload = [payload]
        views = [buffer_view(part) for part in payload]
        size = sum(view.nbytes for view in views)
        body = encode_message(message)
        with self.lock:
            if size <= INLINE_PAYLOAD:
                self.sock.sendall(b"".join([HEAD.pack(MARK, len(body), size), body, *views]))
                return
            self.sock.sendall(HEAD.pack(MARK, len(body), size) + body)
            for view in views:
                self.sock.sendall(view)


def buffer_view(part):
    """A byte view of `part` (bytes, or an array of any type and layout)."""
    if np is not None and isinstance(part, np.ndarray):
        if part.dtype.hasobject:
            raise TypeError("an object array has no bytes to send")
        try:
            # The buffer protocol's cast: a third of the time of numpy's
            # reshape and view, which a small output's answer paid.
            return memoryview(part).cast("B")
        except (TypeError, ValueError, BufferError, NotImplementedError):
            # What the protocol does not describe (bfloat16) or will not
            # cast (not contiguous, a zero in the shape): numpy's way.
            part = np.ascontiguousarray(part)
            return memoryview(part.reshape(-1).view(np.uint8))
    return memoryview(part).cast("B")


class Segments:
    """The two shared-memory segments: inputs (read-only here) and outputs."""

    def __init__(self):
        self.inputs = None
        self.input_size = 0
        self.outputs = None
        self.output_size = os.fstat(OUTPUT_FD).st_size
        self.heap = None

    def map_heap(self):
        """Maps the server's shared heap (`shared_heap.rs`), whole and
        read-only (only the pages the worker reads take page tables):
        whether it could. The server sends inputs there only to a worker
        that did; a worker given no heap, or one whose address space is
        limited below it (`ulimit -v`), reads every input from its
        segment."""
        try:
            os.fstat(HEAP_FD)
            self.heap = mmap.mmap(HEAP_FD, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, OverflowError):
            self.heap = None
        return self.heap is not None

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


class CallSegment:
    """The segment a model's calls of other models (BLS) cross, one call at
    a time: the call's tensors written into it, the answer's tensors
    written there by the server (`segment.rs` `CallSegment`) and read in
    place (Triton's Python backend copies them out of its pool). It stays
    grown between calls, as that pool does, so a large tensor is copied
    into pages already in place rather than through the socket into
    fresh ones.

    An answer's place stays the model's while an array views it: a call
    goes in the lowest gap between the answers still held that its
    tensors fit, and the server writes the answer there when it fits
    too, else past them all."""

    def __init__(self):
        self.map = None
        self.size = 0
        # The answers a model still holds: (start, end) by lease number,
        # each taken out when the last array viewing it goes.
        self.held = {}
        self.leases = 0

    def _mapped(self, size=0):
        """The segment, at least `size` bytes long: grown (at least
        doubled) when shorter, mapped again when either side grew it."""
        current = os.fstat(CALL_FD).st_size
        if size > current:
            current = max(size, current * 2)
            os.ftruncate(CALL_FD, current)
        if self.map is None or current != self.size:
            # The old map goes when nothing views it any more.
            self.map = mmap.mmap(CALL_FD, current)
            self.size = current
        return self.map

    def place(self, size):
        """Where a call of `size` bytes goes: its start, the room there
        for the answer (None: the rest of the segment), and where the held
        answers end."""
        # A lease may end on any thread: the spans are copied at once.
        spans = sorted(list(self.held.values()))
        top = aligned(max((end for _, end in spans), default=0))
        at = 0
        for start, end in spans:
            if start - at >= size:
                return at, start - at, top
            at = max(at, aligned(end))
        return at, None, top

    def write(self, parts, at=0):
        """Writes `parts` (buffers) one after the other from `at`."""
        views = [buffer_view(part) for part in parts]
        segment = self._mapped(at + sum(view.nbytes for view in views))
        for view in views:
            segment[at : at + view.nbytes] = view
            at += view.nbytes

    def lend(self, at, size):
        """The answer's `size` bytes from `at`, in place: an array its
        tensors view, whose place is held until the last of them goes."""
        segment = self._mapped()
        if at + size > self.size:
            raise FrameError("an answer of %d bytes at %d in a call segment of %d" % (size, at, self.size))
        if np is None:
            return bytearray(segment[at : at + size])
        view = np.frombuffer(segment, dtype=np.uint8, count=size, offset=at)
        lease = self.leases
        self.leases += 1
        self.held[lease] = (at, at + size)
        weakref.finalize(view, self.held.pop, lease, None).atexit = False
        return view


def aligned(n):
    """`n` rounded up to `ALIGN` (`segment.rs` `aligned`)."""
    return -(-n // ALIGN) * ALIGN


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
