from __future__ import annotations

import struct

import pytest

from shared.messages import (
    MAX_HOTWORD_CHARS,
    MAX_HOTWORDS,
    MAX_HOTWORDS_BYTES,
    MAX_SPEECH_REGIONS,
    SPOKEN_LANGUAGES,
    StreamOptions,
)
from workers.ipc.wire import (
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


@pytest.mark.parametrize("itn", [True, False])
def test_open_carries_whether_the_stream_wants_itn(itn: bool) -> None:
    options = StreamOptions(hotwords=("阿里巴巴",), itn=itn)
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 3, options=options).pack())
    assert decoded.options == options


@pytest.mark.parametrize("language", SPOKEN_LANGUAGES)
@pytest.mark.parametrize("model_itn", [True, False])
def test_open_carries_the_language_and_the_models_own_itn(language: str, model_itn: bool) -> None:
    options = StreamOptions(itn=not model_itn, language=language, model_itn=model_itn)
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 3, options=options).pack())
    assert decoded.options == options


@pytest.mark.parametrize("final_decode", [True, False])
def test_open_carries_whether_a_final_decode_is_asked(final_decode: bool) -> None:
    options = StreamOptions(final_decode=final_decode)
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 3, options=options).pack())
    assert decoded.options == options


def test_an_open_with_a_language_past_the_list_is_refused() -> None:
    packed = bytearray(CommandHeader(CommandKind.OPEN, 3).pack())
    packed[2] = len(SPOKEN_LANGUAGES)
    with pytest.raises(ValueError, match="language"):
        CommandHeader.unpack(bytes(packed))


def test_stream_options_refuse_a_language_sensevoice_does_not_take() -> None:
    with pytest.raises(ValueError, match="language"):
        StreamOptions(language="fr")


@pytest.mark.parametrize(
    "hotwords",
    [
        pytest.param((), id="none"),
        pytest.param(("ASR",), id="ascii"),
        pytest.param(("阿里巴巴", "达摩院", "Zürich", "🎤麦克风"), id="non-ascii"),
        pytest.param(("http://127.0.0.1:9/x", "/etc/hostname.txt"), id="url-and-path-as-words"),
    ],
)
def test_open_carries_hotwords_after_its_header(hotwords: tuple[str, ...]) -> None:
    options = StreamOptions(chunk_size=(5, 10, 5), hotwords=hotwords)
    packed = CommandHeader(CommandKind.OPEN, 3, options=options).pack()
    payload = " ".join(hotwords).encode("utf-8")
    assert packed[HEADER_SIZE:] == payload  # one message: header, then the words
    decoded = CommandHeader.unpack(packed)
    assert decoded.options == options
    assert decoded.length == len(payload)


def test_the_largest_hotword_set_round_trips() -> None:
    # 127 words of 32 four-byte characters, 127 spaces and "a": exactly the byte budget.
    words = ("🎤" * MAX_HOTWORD_CHARS,) * 127 + ("a",)
    assert len(" ".join(words).encode("utf-8")) == MAX_HOTWORDS_BYTES
    options = StreamOptions(hotwords=words)
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 1, options=options).pack())
    assert decoded.options == options


def test_open_carries_speech_regions_after_the_hotwords() -> None:
    regions = tuple((start, start + 900) for start in range(0, 3_600_000, 1000))
    options = StreamOptions(hotwords=("阿里", "巴巴"), speech_regions=regions)
    packed = CommandHeader(CommandKind.OPEN, 3, options=options).pack()
    assert len(packed) == HEADER_SIZE + len("阿里 巴巴".encode()) + 8 * len(regions)
    assert CommandHeader.unpack(packed).options == options


def test_the_most_speech_regions_round_trip_and_one_more_is_refused() -> None:
    regions = tuple((2 * n, 2 * n + 1) for n in range(MAX_SPEECH_REGIONS))
    options = StreamOptions(speech_regions=regions)
    decoded = CommandHeader.unpack(CommandHeader(CommandKind.OPEN, 1, options=options).pack())
    assert decoded.options == options
    with pytest.raises(ValueError, match="at most 16384"):
        StreamOptions(
            speech_regions=(*regions, (2 * MAX_SPEECH_REGIONS, 2 * MAX_SPEECH_REGIONS + 1))
        )


@pytest.mark.parametrize(
    "regions",
    [((5, 5),), ((10, 20), (15, 30)), ((20, 30), (0, 10)), ((-1, 5),), ((0, 2**32),)],
    ids=["empty", "overlapping", "out-of-order", "negative", "past-uint32"],
)
def test_stream_options_refuse_speech_regions_out_of_order_or_empty(
    regions: tuple[tuple[int, int], ...],
) -> None:
    with pytest.raises(ValueError, match="speech regions are in order"):
        StreamOptions(speech_regions=regions)


def _open_with_payload(payload: bytes, length: int | None = None, regions: int = 0) -> bytes:
    header = bytearray(CommandHeader(CommandKind.OPEN, 3).pack())
    struct.pack_into("<I", header, 16, len(payload) if length is None else length)
    struct.pack_into("<H", header, 38, regions)
    return bytes(header) + payload


@pytest.mark.parametrize(
    ("data", "match"),
    [
        pytest.param(_open_with_payload(b"\xff\xfe"), "not UTF-8", id="not-utf8"),
        pytest.param(_open_with_payload("阿".encode()[:2]), "not UTF-8", id="cut-mid-character"),
        pytest.param(_open_with_payload(b"a  b"), "1..32", id="empty-word"),
        pytest.param(_open_with_payload(b"a "), "1..32", id="trailing-separator"),
        pytest.param(_open_with_payload(b"x" * 33), "1..32", id="word-too-long"),
        pytest.param(_open_with_payload(b"a\tb"), "whitespace", id="tab-inside"),
        pytest.param(_open_with_payload(b" ".join([b"w"] * 257)), "256", id="too-many"),
        pytest.param(_open_with_payload(b"abc", length=5), "3 bytes after", id="short"),
        pytest.param(_open_with_payload(b"abc", length=2), "3 bytes after", id="long"),
        pytest.param(CommandHeader(CommandKind.CLOSE, 3).pack() + b"x", "CLOSE", id="not-open"),
        pytest.param(b"\x01" * 39, "at least 40", id="truncated-header"),
        pytest.param(_open_with_payload(b"abcd", regions=1), "1 speech regions in 4", id="regions"),
        pytest.param(
            _open_with_payload(struct.pack("<II", 9, 3), regions=1),
            "in order",
            id="region-ends-first",
        ),
    ],
)
def test_a_malformed_open_payload_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CommandHeader.unpack(data)


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


def test_stream_options_bound_the_hotwords() -> None:
    words = tuple(f"w{i}" for i in range(MAX_HOTWORDS))
    assert StreamOptions(hotwords=words).hotwords == words
    assert StreamOptions(hotwords=("x" * MAX_HOTWORD_CHARS,)).hotwords
    refused = [
        ((*words, "one-more"), "at most 256"),
        (("x" * (MAX_HOTWORD_CHARS + 1),), "1..32"),
        (("",), "1..32"),
        (("two words",), "whitespace"),
        (("全角\u3000空格",), "whitespace"),  # funasr's str.split() would cut it in two
        (("line\nbreak",), "whitespace"),
        (("\ud800",), "not valid Unicode"),
        (("🎤" * MAX_HOTWORD_CHARS,) * 127 + ("ab",), "bytes of UTF-8"),  # one byte over
    ]
    for hotwords, match in refused:
        with pytest.raises(ValueError, match=match):
            StreamOptions(hotwords=hotwords)


@pytest.mark.parametrize("hotwords", [["a", "b"], "ab", ("a", 1)])
def test_stream_options_take_hotwords_as_a_tuple_of_strings(hotwords: object) -> None:
    with pytest.raises(ValueError, match="hotword"):
        StreamOptions(hotwords=hotwords)  # type: ignore[arg-type]
