"""The Python worker's side of its socket (`channel.py`), run in this
Python: each message it reads is what `json.loads` reads, each it writes
the bytes `json.dumps(..., separators=(",", ":"))` writes (the worker
calls `json`'s C scanner and encoder directly), and frames are read
whole however the bytes arrive: one byte at a time, several frames in one
read, a message longer than the read-ahead, payloads after them."""

import json
import math
import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

SOURCE = ROOT / "crates" / "wirespeed-python-backend" / "src" / "channel.py"


@pytest.fixture(scope="module")
def channel():
    """channel.py's names, as the worker has them."""
    names = {"__name__": "wirespeed_channel"}
    exec(compile(Path(SOURCE).read_text(), str(SOURCE), "exec"), names)
    return names


MESSAGES = [
    {"op": "infer", "size": 65536, "inputs": [["INPUT0", "FP32", [4], 0, 16]], "outputs": ["OUTPUT0"],
     "parameters": {}},
    {"op": "load", "text": "caf\u00e9 \u65e5\u672c \U0001f600", "escaped": "tab\t\"quote\"\\ \u0001",
     "numbers": [0, -1, 2**63 - 1, -(2**63), 1.5, 1e300, -0.0, 3.141592653589793], "flags": [True, False, None]},
    {"nested": {"a": [[], {}, [{"b": []}]]}, "": ""},
    [],
    "a string",
    12,
]


@pytest.mark.parametrize("message", MESSAGES)
def test_a_message_reads_and_writes_as_json_does(channel, message):
    reference = json.dumps(message, separators=(",", ":")).encode()
    assert channel["encode_message"](message) == reference
    assert channel["decode_message"](bytearray(reference)) == json.loads(reference)
    # What the server writes: serde_json's compact form, non-ASCII as UTF-8.
    utf8 = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    assert channel["decode_message"](bytearray(utf8)) == json.loads(utf8)


def test_not_a_number_is_written_as_json_writes_it(channel):
    message = {"x": [math.nan, math.inf, -math.inf]}
    assert channel["encode_message"](message) == json.dumps(message, separators=(",", ":")).encode()


def test_what_json_refuses_is_refused_with_its_error(channel):
    with pytest.raises(TypeError, match="Object of type ndarray is not JSON serializable"):
        channel["encode_message"]({"x": np.zeros(2)})
    for body in [b'{"op": "infer"} x', b"", b"{", b'{"a": }', b"\xff"]:
        with pytest.raises(ValueError) as ours:
            channel["decode_message"](bytearray(body))
        with pytest.raises(ValueError) as theirs:
            json.loads(body.decode("utf-8"))
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value) == str(theirs.value)
    # Whitespace around a message is JSON's, and read.
    assert channel["decode_message"](bytearray(b' \n{"a": 1}\t')) == {"a": 1}


def frame(channel, message, payload=b""):
    body = json.dumps(message).encode()
    return struct.pack("<4sIQ", channel["MARK"], len(body), len(payload)) + body + payload


def test_frames_are_read_whole_however_the_bytes_arrive(channel):
    big = {"op": "load", "modules": {"m": "x" * (3 * channel["READ_AHEAD"])}}
    payload = bytes(range(256)) * 1000
    frames = [
        ({"op": "infer", "n": 1}, b""),
        ({"op": "cancel", "id": 7}, b""),
        (big, b""),
        ({"op": "bls_result", "n": 2}, payload),
        ({"op": "infer", "n": 3}, b"\x01"),
        ({"op": "stop"}, b""),
    ]
    stream = b"".join(frame(channel, m, p) for m, p in frames)
    for pieces in ([stream], [stream[i : i + 1] for i in range(200)] + [stream[200:]],
                   [stream[i : i + 4093] for i in range(0, len(stream), 4093)]):
        ours, theirs = socket.socketpair()
        reader = channel["Channel"](ours.detach())

        def write():
            for piece in pieces:
                theirs.sendall(piece)

        writer = threading.Thread(target=write)
        writer.start()
        for message, sent in frames:
            got = reader.recv()
            carried = got.pop(channel["PAYLOAD"], None)
            assert got == message
            assert (bytes(carried) if carried is not None else b"") == sent
        writer.join()
        # Every frame was taken: nothing is left to read, and a closed
        # socket reads as the server gone.
        assert not reader.readable()
        theirs.close()
        assert reader.recv() is None
        reader.sock.close()


def test_a_frame_read_ahead_is_readable_before_the_socket_is(channel):
    ours, theirs = socket.socketpair()
    reader = channel["Channel"](ours.detach())
    theirs.sendall(frame(channel, {"op": "infer"}) + frame(channel, {"op": "cancel"}))
    assert reader.recv() == {"op": "infer"}
    # The second frame came in the first read: the socket has nothing
    # more, and the channel still says a message is there.
    assert reader.readable()
    assert reader.recv() == {"op": "cancel"}
    assert not reader.readable()
    theirs.close()
    reader.sock.close()


def test_a_frame_that_does_not_begin_with_the_mark_is_refused(channel):
    ours, theirs = socket.socketpair()
    reader = channel["Channel"](ours.detach())
    theirs.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    with pytest.raises(channel["FrameError"], match="where a frame begins"):
        reader.recv()
    theirs.close()
    reader.sock.close()


def test_a_call_goes_in_the_lowest_gap_between_held_answers(channel, monkeypatch):
    """The call segment's places (`CallSegment.place` and `lend`): over
    random calls, with answers held and dropped at random, a call's bytes
    never overlap an answer still held, it starts at the lowest aligned
    place they fit (a brute-force search says which), the room it is given
    ends where the next held answer begins, and an answer's place is held
    exactly as long as an array viewing it lives."""
    import os
    import random

    fd = os.memfd_create("test-calls")
    os.ftruncate(fd, 1 << 16)
    monkeypatch.setitem(channel, "CALL_FD", fd)
    segment = channel["CallSegment"]()
    align = channel["ALIGN"]
    rng = random.Random(7)
    views = []
    try:
        for _ in range(400):
            size = rng.choice([1, 100, 4096, 70_000, 300_000])
            spans = sorted(segment.held.values())
            at, room, held = segment.place(size)
            free = lambda p, n: all(p + n <= s or p >= e for s, e in spans)  # noqa: E731
            assert at % align == 0 and free(at, size), (at, size, spans)
            assert all(not free(p, size) for p in range(0, at, align)), (at, size, spans)
            assert held >= max((e for _, e in spans), default=0)
            if room is None:
                assert all(e <= at for _, e in spans)
            else:
                assert room >= size and (at + room) in [s for s, _ in spans]
            segment.write([np.full(size, 5, dtype=np.uint8)], at)
            answer = segment.lend(at, size)
            assert answer.nbytes == size and (answer == 5).all()
            # A view of it alone may keep the place.
            views.append(answer[size // 2:] if rng.random() < 0.5 else answer)
            del answer
            while views and rng.random() < 0.5:
                views.pop(rng.randrange(len(views)))
            assert len(segment.held) == len(views)
        views.clear()
        assert segment.held == {}
        assert segment.place(10) == (0, None, 0)
    finally:
        views.clear()
        os.close(fd)
