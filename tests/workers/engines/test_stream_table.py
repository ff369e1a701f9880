"""The stream table every engine keeps its streams in: one behaviour for all of them."""

from __future__ import annotations

import numpy as np

from shared.messages import Decoded
from workers.engines.base import ChunkItem
from workers.engines.table import StreamTable

AUDIO = np.zeros(4, dtype=np.int16)


def _item(stream_id: int, seq: int, final: bool = False) -> ChunkItem:
    return ChunkItem(stream_id, seq, AUDIO, final)


def test_each_piece_is_answered_in_order_and_a_final_one_drops_its_stream() -> None:
    table = StreamTable[list[int]]()
    table.open(1, [])
    table.open(2, [])

    def decode(seen: list[int], item: ChunkItem) -> Decoded:
        seen.append(item.seq)
        return Decoded(f"{item.stream_id}:{seen}", segments=((item.seq, -1),))

    outputs = table.step([_item(1, 0), _item(2, 0), _item(1, 1, final=True)]).each(decode)
    assert [(o.stream_id, o.seq, o.text, o.final) for o in outputs] == [
        (1, 0, "1:[0]", False),
        (2, 0, "2:[0]", False),
        (1, 1, "1:[0, 1]", True),
    ]
    assert outputs[2].decoded.segments == ((1, -1),)
    assert 1 not in table
    assert 2 in table
    assert len(table) == 1


def test_a_piece_of_a_stream_not_held_is_an_error() -> None:
    table = StreamTable[None]()
    (output,) = table.step([_item(7, 3)]).each(lambda state, item: Decoded("never"))
    assert (output.stream_id, output.seq, output.final) == (7, 3, True)
    assert output.error is not None
    assert "not open" in output.error


def test_a_failing_stream_loses_its_state_and_every_piece_left_in_the_step() -> None:
    table = StreamTable[None]()
    table.open(1, None)
    table.open(2, None)

    def decode(state: None, item: ChunkItem) -> Decoded:
        if item.stream_id == 1:
            raise RuntimeError("boom")
        return Decoded("fine")

    outputs = table.step([_item(1, 0), _item(2, 0), _item(1, 1)]).each(decode)
    assert [(o.stream_id, o.error) for o in outputs] == [
        (1, "engine error: RuntimeError: boom"),
        (2, None),
        (1, "engine error: RuntimeError: boom"),
    ]
    assert 1 not in table
    assert 2 in table


def test_a_batched_step_answers_as_its_calls_complete() -> None:
    table = StreamTable[str]()
    table.open(1, "one")
    table.open(2, "two")
    step = table.step([_item(1, 0), _item(2, 0, final=True)])
    assert [(index, state) for index, _, state in step.pending()] == [(0, "one"), (1, "two")]
    step.fail(1, "the call failed")
    assert [index for index, _, _ in step.pending()] == [1]
    step.answer(1, Decoded("two's text"))
    assert [(o.text, o.error) for o in step.outputs()] == [
        ("", "the call failed"),
        ("two's text", None),
    ]
    assert len(table) == 0


def test_streams_not_fed_for_the_idle_timeout_expire_and_close_is_safe_twice() -> None:
    table = StreamTable[None]()
    table.open(1, None)
    table.open(2, None)
    table.close(2)
    table.close(2)
    assert table.expire_idle(now=0.0, idle_timeout_s=1.0) == []
    assert table.expire_idle(now=1e12, idle_timeout_s=1.0) == [1]
    assert len(table) == 0
