from __future__ import annotations

import pytest

from shared.messages import StreamOptions
from shared.wire import (
    FLAG_FINAL,
    HEADER_SIZE,
    NO_SLOT,
    CommandHeader,
    CommandKind,
    SlabLayout,
)


def test_header_is_forty_bytes() -> None:
    assert HEADER_SIZE == 40
    assert len(CommandHeader(CommandKind.STOP, 0).pack()) == HEADER_SIZE


def test_audio_header_round_trips() -> None:
    header = CommandHeader(
        CommandKind.AUDIO,
        stream_id=0xFFFFFFFF,
        seq=7,
        slot=63,
        length=19200,
        flags=FLAG_FINAL,
        sent_ns=123456789012345,
    )
    decoded = CommandHeader.unpack(header.pack())
    assert decoded == header
    assert decoded.final


def test_open_header_carries_options() -> None:
    options = StreamOptions(
        chunk_size=(5, 10, 5), encoder_chunk_look_back=0, decoder_chunk_look_back=0
    )
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 3, options=options).pack())
    assert decoded.kind is CommandKind.OPEN
    assert decoded.options == options


def test_only_open_headers_decode_options() -> None:
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.CLOSE, 3).pack())
    assert decoded.options is None
    assert decoded.slot == NO_SLOT
    assert not decoded.final


def test_unknown_kind_is_rejected() -> None:
    data = bytearray(CommandHeader(CommandKind.STOP, 0).pack())
    data[0] = 99
    with pytest.raises(ValueError, match="99"):
        CommandHeader.unpack(bytes(data))


def test_slab_layout_bounds() -> None:
    layout = SlabLayout(slot_bytes=100, slot_count=4)
    assert layout.size == 400
    assert layout.bounds(0, 100) == slice(0, 100)
    assert layout.bounds(3, 10) == slice(300, 310)


@pytest.mark.parametrize(("slot", "length"), [(-1, 10), (4, 10), (0, 101), (1, -2)])
def test_slab_layout_refuses_out_of_range(slot: int, length: int) -> None:
    with pytest.raises(ValueError, match=r"slot|length"):
        SlabLayout(slot_bytes=100, slot_count=4).bounds(slot, length)


@pytest.mark.parametrize(("slot_bytes", "slot_count"), [(0, 1), (3, 1), (2, 0)])
def test_slab_layout_refuses_bad_shapes(slot_bytes: int, slot_count: int) -> None:
    with pytest.raises(ValueError, match="slot"):
        SlabLayout(slot_bytes, slot_count)


def test_stream_options_validate() -> None:
    assert StreamOptions(chunk_size=(0, 10, 5)).chunk_samples == 9600
    with pytest.raises(ValueError, match="chunk length"):
        StreamOptions(chunk_size=(0, 0, 5))
    with pytest.raises(ValueError, match="look-back"):
        StreamOptions(encoder_chunk_look_back=-1)
