from __future__ import annotations

import zlib

import numpy as np

from shared.messages import StreamOptions
from workers.engines.base import ChunkItem
from workers.engines.checksum.engine import ChecksumEngine, checksum_text


def _item(stream: int, seq: int, values: list[int], final: bool = False) -> ChunkItem:
    return ChunkItem(stream, seq, np.array(values, dtype=np.int16), final)


def test_checksum_text_format() -> None:
    assert checksum_text(3, 0xAB) == "3:000000ab"


def test_results_are_running_count_and_crc() -> None:
    engine = ChecksumEngine()
    engine.open_stream(1, StreamOptions())
    outputs = engine.feed([_item(1, 0, [1, -2]), _item(1, 1, [3], final=True)])
    first = np.array([1, -2], dtype="<i2").tobytes()
    whole = np.array([1, -2, 3], dtype="<i2").tobytes()
    assert [o.text for o in outputs] == [
        f"2:{zlib.crc32(first):08x}",
        f"3:{zlib.crc32(whole):08x}",
    ]
    assert [o.final for o in outputs] == [False, True]
    assert engine.active_streams == 0


def test_streams_are_independent() -> None:
    engine = ChecksumEngine()
    engine.open_stream(1, StreamOptions())
    engine.open_stream(2, StreamOptions())
    a, b = engine.feed([_item(1, 0, [5]), _item(2, 0, [5, 5])])
    assert a.text.startswith("1:")
    assert b.text.startswith("2:")


def test_unknown_stream_is_an_error_for_that_item() -> None:
    (output,) = ChecksumEngine().feed([_item(9, 0, [1])])
    assert output.error is not None
    assert "not open" in output.error


def test_close_and_expire_drop_state() -> None:
    engine = ChecksumEngine()
    engine.open_stream(1, StreamOptions())
    engine.open_stream(2, StreamOptions())
    engine.close_stream(1)
    engine.close_stream(1)
    assert engine.active_streams == 1
    assert engine.expire_idle(now=1e12, idle_timeout_s=1.0) == [2]
    assert engine.active_streams == 0
