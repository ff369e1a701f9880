from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.chunker import ChunkCutter


@pytest.mark.parametrize("chunk_bytes", [0, -2])
def test_chunk_size_must_be_positive(chunk_bytes: int) -> None:
    with pytest.raises(ValueError, match="chunk_bytes"):
        ChunkCutter(chunk_bytes)


def test_exact_chunk_is_returned_at_once() -> None:
    assert ChunkCutter(4).push(b"abcd") == [b"abcd"]


def test_short_input_is_held_back() -> None:
    cutter = ChunkCutter(4)
    assert cutter.push(b"abc") == []
    assert cutter.buffered == 3


def test_chunk_completes_across_pushes() -> None:
    cutter = ChunkCutter(4)
    cutter.push(b"ab")
    assert cutter.push(b"cdef") == [b"abcd"]
    assert cutter.buffered == 2


def test_long_input_yields_every_whole_chunk_in_order() -> None:
    cutter = ChunkCutter(3)
    assert cutter.push(b"abcdefghij") == [b"abc", b"def", b"ghi"]
    assert cutter.buffered == 1


def test_chunks_are_bytes() -> None:
    cutter = ChunkCutter(2)
    cutter.push(b"a")
    assert all(type(chunk) is bytes for chunk in cutter.push(b"bcd"))


def test_chunks_do_not_change_when_more_is_pushed() -> None:
    cutter = ChunkCutter(2)
    chunks = cutter.push(b"abc")
    cutter.push(b"xyz")
    assert chunks == [b"ab"]


def test_flush_returns_the_remainder_and_clears_it() -> None:
    cutter = ChunkCutter(4)
    cutter.push(b"abcdef")
    assert cutter.flush() == b"ef"
    assert cutter.buffered == 0
    assert cutter.flush() == b""


def test_push_after_flush_starts_a_fresh_chunk() -> None:
    cutter = ChunkCutter(4)
    cutter.push(b"ab")
    cutter.flush()
    assert cutter.push(b"wxyz") == [b"wxyz"]


def test_empty_push_yields_nothing() -> None:
    cutter = ChunkCutter(4)
    assert cutter.push(b"") == []
    assert cutter.buffered == 0


@given(st.integers(1, 16), st.lists(st.binary(max_size=40), max_size=20))
def test_any_framing_gives_the_chunks_of_the_whole(chunk_bytes: int, frames: list[bytes]) -> None:
    cutter = ChunkCutter(chunk_bytes)
    chunks = [chunk for frame in frames for chunk in cutter.push(frame)]
    remainder = cutter.flush()
    whole = b"".join(frames)
    cut = len(whole) - len(whole) % chunk_bytes
    assert chunks == [whole[i : i + chunk_bytes] for i in range(0, cut, chunk_bytes)]
    assert remainder == whole[cut:]
