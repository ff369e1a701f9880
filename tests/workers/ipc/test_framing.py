"""multiprocessing's framing, sans I/O: the decoder reads what ``Connection`` writes, cut
into any pieces, and ``encode_frame`` writes what ``Connection`` reads."""

from __future__ import annotations

import multiprocessing
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.ipc.framing import FrameDecoder, FramingError, encode_frame


def _as_connection_writes(payloads: list[bytes]) -> bytes:
    """The bytes ``Connection.send_bytes`` puts on a pipe for ``payloads``."""
    receiving, sending = multiprocessing.Pipe(duplex=False)
    read_end = receiving.fileno()
    written = bytearray()
    try:
        for payload in payloads:
            sending.send_bytes(payload)
            expected = len(encode_frame(payload))
            while expected:
                chunk = os.read(read_end, expected)
                written += chunk
                expected -= len(chunk)
    finally:
        receiving.close()
        sending.close()
    return bytes(written)


@given(
    payloads=st.lists(st.binary(max_size=3000), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=12),
)
def test_frames_cut_anywhere_come_out_whole_and_in_order(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(payload) for payload in payloads)
    decoder = FrameDecoder()
    out: list[bytes] = []
    start = 0
    for cut in sorted(min(cut, len(stream)) for cut in cuts):
        out += decoder.feed(stream[start:cut])
        start = cut
    out += decoder.feed(stream[start:])
    assert out == payloads
    assert decoder.pending_bytes == 0


def test_what_connection_writes_is_read_byte_by_byte() -> None:
    payloads = [b"", b"x", bytes(range(256)) * 80]  # the last past 16 KiB: two writes
    stream = _as_connection_writes(payloads)
    assert stream == b"".join(encode_frame(payload) for payload in payloads)
    decoder = FrameDecoder()
    out = [payload for index in range(len(stream)) for payload in decoder.feed(stream[index:][:1])]
    assert out == payloads


def test_what_encode_frame_writes_connection_reads() -> None:
    receiving, sending = multiprocessing.Pipe(duplex=False)
    try:
        os.write(sending.fileno(), encode_frame(b"hello") + encode_frame(b""))
        assert receiving.recv_bytes() == b"hello"
        assert receiving.recv_bytes() == b""
    finally:
        receiving.close()
        sending.close()


def test_a_long_length_is_read_from_its_eight_bytes() -> None:
    # Connection writes a payload of 2 GiB and more as -1 then an 8-byte length; this
    # frame says so for a short payload, which the decoder must read the same way.
    frame = struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abc"
    decoder = FrameDecoder()
    assert decoder.feed(frame[:6]) == []
    assert decoder.feed(frame[6:]) == [b"abc"]


def test_a_negative_length_is_no_frame() -> None:
    with pytest.raises(FramingError, match="-7"):
        FrameDecoder().feed(struct.pack("!i", -7))
