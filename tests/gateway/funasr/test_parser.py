"""The sans-I/O parser of FunASR's protocol (``gateway.funasr.parser``): frames in, events
out, in FunASR's message order; every fault a ``ProtocolError`` or ``FrameTooLargeError``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.funasr.config import CONFIG_KEYS, SessionConfig, parse_config
from gateway.funasr.parser import (
    AudioReceived,
    ConfigReceived,
    ConfigUpdated,
    EndOfUtterance,
    EndWithoutUtterance,
    ParserState,
    ProtocolParser,
)
from shared.errors import FrameTooLargeError, GatewayError, ProtocolError

END = json.dumps({"is_speaking": False})


def streaming_parser(**fields: object) -> ProtocolParser:
    parser = ProtocolParser()
    parser.receive_text(json.dumps({"mode": "online", **fields}))
    return parser


def failed_parser() -> ProtocolParser:
    parser = ProtocolParser()
    with pytest.raises(ProtocolError):
        parser.receive_bytes(b"\x00\x00")
    return parser


# --- Config messages -------------------------------------------------------------------


def test_config_message_starts_an_utterance() -> None:
    parser = ProtocolParser()
    events = parser.receive_text(
        json.dumps(
            {
                "mode": "online",
                "chunk_size": [0, 8, 4],
                "chunk_interval": 5,
                "encoder_chunk_look_back": 2,
                "decoder_chunk_look_back": 1,
                "wav_name": "demo",
                "wav_format": "pcm",
                "audio_fs": 16000,
                "is_speaking": True,
                "hotwords": "阿里巴巴 20",
                "itn": False,
            }
        )
    )
    expected = SessionConfig(
        mode="online",
        chunk_size=(0, 8, 4),
        chunk_interval=5,
        encoder_chunk_look_back=2,
        decoder_chunk_look_back=1,
        wav_name="demo",
        hotwords=("阿里巴巴", "20"),
        itn=False,
    )
    assert events == [ConfigReceived(expected)]
    assert parser.state is ParserState.STREAMING
    assert parser.config == expected


def test_is_speaking_true_alone_is_a_config_with_defaults() -> None:
    parser = ProtocolParser()
    assert parser.receive_text('{"is_speaking": true}') == [ConfigReceived(SessionConfig())]


def test_unknown_fields_are_ignored() -> None:
    parser = ProtocolParser()
    events = parser.receive_text('{"mode": "offline", "svs_lang": "auto", "extra": [1, {}]}')
    assert events == [ConfigReceived(SessionConfig(mode="offline"))]


@pytest.mark.parametrize("chunk_size", ["5,10,5", " 5, 10 ,5 "])
def test_chunk_size_may_be_a_comma_separated_string(chunk_size: str) -> None:
    parser = streaming_parser(chunk_size=chunk_size)
    assert parser.config is not None
    assert parser.config.chunk_size == (5, 10, 5)


def test_config_and_end_with_nothing_open_set_the_next_utterance_and_end_nothing() -> None:
    parser = ProtocolParser()
    events = parser.receive_text('{"mode": "offline", "is_speaking": false, "is_end": true}')
    assert events == [EndWithoutUtterance(True, SessionConfig(mode="offline"))]
    assert parser.state is ParserState.AWAITING_CONFIG
    events = parser.receive_text('{"is_speaking": true}')
    assert events == [ConfigReceived(SessionConfig(mode="offline"))]


def test_config_after_end_starts_a_new_utterance() -> None:
    parser = streaming_parser()
    parser.receive_text(END)
    events = parser.receive_text('{"wav_name": "second", "is_speaking": true}')
    assert events == [ConfigReceived(SessionConfig(mode="online", wav_name="second"))]
    assert parser.state is ParserState.STREAMING


def test_the_html5_pages_stop_frame_ends_the_utterance_and_keeps_its_config() -> None:
    parser = streaming_parser(chunk_size=[5, 10, 5], wav_name="h5", chunk_interval=10)
    stop = {"chunk_size": [5, 10, 5], "wav_name": "h5", "is_speaking": False}
    events = parser.receive_text(json.dumps({**stop, "chunk_interval": 10, "mode": "2pass"}))
    assert events == [EndOfUtterance(acknowledge=False)]
    assert parser.state is ParserState.ENDED
    assert parser.config is not None
    assert parser.config.mode == "online"  # the utterance's own, to its end
    assert parser.next_config.mode == "2pass"  # the next utterance's


def test_a_config_mid_utterance_updates_the_name_and_hotwords_at_once() -> None:
    parser = streaming_parser(wav_name="a", hotwords="甲")
    events = parser.receive_text('{"wav_name": "b", "hotwords": "乙 丙", "is_speaking": true}')
    expected = SessionConfig(mode="online", wav_name="b", hotwords=("乙", "丙"))
    assert events == [ConfigUpdated(expected)]
    assert parser.config == parser.session_config == expected
    assert parser.state is ParserState.STREAMING


def test_a_config_mid_utterance_keeps_the_running_streams_shape_until_the_next() -> None:
    parser = streaming_parser(chunk_size=[5, 10, 5])
    events = parser.receive_text('{"mode": "offline", "chunk_size": [0, 8, 4]}')
    assert events == []  # nothing that can change under the running stream
    assert parser.config is not None
    assert (parser.config.mode, parser.config.chunk_size) == ("online", (5, 10, 5))
    parser.receive_text(END)
    (started,) = parser.receive_text('{"is_speaking": true}')
    assert started == ConfigReceived(SessionConfig(mode="offline", chunk_size=(0, 8, 4)))


@pytest.mark.parametrize(
    "fields", [{"mode": "streaming"}, {"audio_fs": 4000}, {"wav_format": "mp3"}]
)
def test_a_field_that_cannot_be_honoured_is_refused_mid_utterance_too(
    fields: dict[str, object],
) -> None:
    parser = streaming_parser()
    with pytest.raises(ProtocolError):
        parser.receive_text(json.dumps({**fields, "is_speaking": False}))
    assert parser.state is ParserState.FAILED


# --- Malformed text frames -------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "{", "mode=online", "{'mode': 'online'}", '{"a": NaN}'])
def test_text_that_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(ProtocolError, match="not valid JSON"):
        ProtocolParser().receive_text(text)


@pytest.mark.parametrize("text", ["[]", "1", '"mode"', "null", "true"])
def test_json_that_is_not_an_object_is_refused(text: str) -> None:
    with pytest.raises(ProtocolError, match="not a JSON object"):
        ProtocolParser().receive_text(text)


def test_deeply_nested_json_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="nested too deeply"):
        ProtocolParser().receive_text('{"x": ' + "[" * 30000 + "]" * 30000 + "}")


def test_integer_with_too_many_digits_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not valid JSON"):
        ProtocolParser().receive_text('{"chunk_interval": ' + "9" * 5000 + "}")


def test_object_that_is_neither_config_nor_end_is_refused() -> None:
    with pytest.raises(ProtocolError, match="neither a config nor an end message"):
        ProtocolParser().receive_text('{"hello": "world"}')


@pytest.mark.parametrize("text", ['{"is_finished": false}', '{"is_speaking": true}', "{}"])
def test_a_frame_that_changes_nothing_mid_utterance_is_no_event(text: str) -> None:
    parser = streaming_parser()
    assert parser.receive_text(text) == []
    assert parser.state is ParserState.STREAMING


def test_text_over_the_limit_is_too_large() -> None:
    parser = ProtocolParser(max_text_bytes=100)
    with pytest.raises(FrameTooLargeError):
        parser.receive_text(json.dumps({"wav_name": "x" * 100}))
    assert parser.state is ParserState.FAILED


def test_text_limit_counts_utf8_bytes_not_characters() -> None:
    text = json.dumps({"wav_name": "语" * 30}, ensure_ascii=False)  # 43 chars, 103 bytes
    with pytest.raises(FrameTooLargeError):
        ProtocolParser(max_text_bytes=100).receive_text(text)


def test_text_exactly_at_the_limit_is_accepted() -> None:
    text = json.dumps({"wav_name": "语" * 30}, ensure_ascii=False)
    parser = ProtocolParser(max_text_bytes=len(text.encode()))
    assert len(parser.receive_text(text)) == 1


# --- Audio -----------------------------------------------------------------------------


def test_audio_while_streaming_is_passed_on() -> None:
    parser = streaming_parser()
    assert parser.receive_bytes(b"\x01\x02\x03\x04") == [AudioReceived(b"\x01\x02\x03\x04")]


def test_empty_binary_frame_yields_no_event() -> None:
    assert streaming_parser().receive_bytes(b"") == []


def test_audio_before_config_is_refused() -> None:
    parser = ProtocolParser()
    with pytest.raises(ProtocolError, match="audio before the config message"):
        parser.receive_bytes(b"\x00\x00")
    assert parser.state is ParserState.FAILED


def test_audio_after_end_is_refused() -> None:
    parser = streaming_parser()
    parser.receive_text(END)
    with pytest.raises(ProtocolError, match="audio after the end of the utterance"):
        parser.receive_bytes(b"\x00\x00")


def test_binary_frame_over_the_limit_is_too_large() -> None:
    parser = ProtocolParser(max_frame_bytes=1024)
    parser.receive_text('{"is_speaking": true}')
    with pytest.raises(FrameTooLargeError):
        parser.receive_bytes(bytes(1026))
    assert parser.state is ParserState.FAILED


def test_binary_frame_exactly_at_the_limit_is_accepted() -> None:
    parser = ProtocolParser(max_frame_bytes=1024)
    parser.receive_text('{"is_speaking": true}')
    assert parser.receive_bytes(bytes(1024)) == [AudioReceived(bytes(1024))]


def test_odd_byte_is_carried_to_the_next_frame() -> None:
    parser = streaming_parser()
    assert parser.receive_bytes(b"\x01\x02\x03") == [AudioReceived(b"\x01\x02")]
    assert parser.receive_bytes(b"\x04") == [AudioReceived(b"\x03\x04")]


def test_single_byte_frame_yields_no_event() -> None:
    assert streaming_parser().receive_bytes(b"\x01") == []


def test_end_in_the_middle_of_a_sample_is_refused() -> None:
    parser = streaming_parser()
    parser.receive_bytes(b"\x01\x02\x03")
    with pytest.raises(ProtocolError, match="middle of a 16-bit sample"):
        parser.receive_text(END)


def test_bytes_received_counts_the_current_utterance() -> None:
    parser = streaming_parser()
    parser.receive_bytes(b"\x00" * 3)
    parser.receive_bytes(b"\x00" * 5)
    assert parser.bytes_received == 8
    parser.receive_text(END)
    assert parser.bytes_received == 8
    parser.receive_text('{"is_speaking": true}')
    assert parser.bytes_received == 0


# --- End messages ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ['{"is_speaking": false}', '{"is_finished": true}', '{"is_end": true}']
)
def test_end_message_ends_the_utterance(text: str) -> None:
    parser = streaming_parser()
    assert parser.receive_text(text) == [EndOfUtterance(acknowledge="is_end" in text)]
    assert parser.state is ParserState.ENDED


def test_is_end_asks_for_the_acknowledgement() -> None:
    # FunASR's Python client (@3c58cb5) ends every file with exactly this.
    parser = streaming_parser()
    events = parser.receive_text('{"is_speaking": false, "is_end": true}')
    assert events == [EndOfUtterance(acknowledge=True)]


def test_end_before_config_is_only_acknowledged() -> None:
    assert ProtocolParser().receive_text(END) == [EndWithoutUtterance(False, SessionConfig())]
    parser = ProtocolParser()
    assert parser.receive_text('{"is_end": true}') == [EndWithoutUtterance(True, SessionConfig())]


def test_second_end_is_only_acknowledged() -> None:
    # funasr-client's close() sends {"is_speaking": false} again after the final result.
    parser = streaming_parser(wav_name="f")
    parser.receive_text(END)
    expected = SessionConfig(mode="online", wav_name="f")
    assert parser.receive_text(END) == [EndWithoutUtterance(False, expected)]
    events = parser.receive_text('{"is_speaking": false, "is_end": true}')
    assert events == [EndWithoutUtterance(True, expected)]
    assert parser.state is ParserState.ENDED


# --- After an error --------------------------------------------------------------------


def test_failed_parser_refuses_text() -> None:
    with pytest.raises(ProtocolError, match="already broke the protocol"):
        failed_parser().receive_text('{"is_speaking": true}')


def test_failed_parser_refuses_bytes() -> None:
    with pytest.raises(ProtocolError, match="already broke the protocol"):
        failed_parser().receive_bytes(b"\x00\x00")


def test_failed_parser_refuses_with_protocol_error_after_frame_too_large() -> None:
    parser = ProtocolParser(max_text_bytes=10)
    with pytest.raises(FrameTooLargeError):
        parser.receive_text('{"is_speaking": true}')
    with pytest.raises(ProtocolError):
        parser.receive_text("{}")


# --- Properties ------------------------------------------------------------------------


@given(st.data())
def test_any_split_of_even_audio_yields_the_same_bytes(data: st.DataObject) -> None:
    pcm = data.draw(st.binary(max_size=64).map(lambda b: b[: len(b) // 2 * 2]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(pcm)), max_size=10)))
    parser = streaming_parser()
    events = []
    for start, end in zip([0, *cuts], [*cuts, len(pcm)], strict=True):
        events += parser.receive_bytes(pcm[start:end])
    received = [event for event in events if isinstance(event, AudioReceived)]
    assert len(received) == len(events)
    assert all(event.pcm and len(event.pcm) % 2 == 0 for event in received)
    assert b"".join(event.pcm for event in received) == pcm
    assert parser.receive_text(END) == [EndOfUtterance()]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
_field_names = st.sampled_from(
    [*sorted(CONFIG_KEYS), "is_speaking", "is_finished", "is_end", "unknown"]
)
_objects = st.dictionaries(_field_names, _json_values | st.just(True) | st.just(False))
_frames = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    _objects.map(json.dumps),
    st.just(END),
    st.just('{"is_speaking": true}'),
)


@given(st.lists(_frames, max_size=12))
def test_any_input_raises_only_gateway_errors(frames: list[str | bytes]) -> None:
    parser = ProtocolParser(max_frame_bytes=32, max_text_bytes=200)
    for frame in frames:
        try:
            if isinstance(frame, bytes):
                events = parser.receive_bytes(frame)
            else:
                events = parser.receive_text(frame)
        except GatewayError:
            assert parser.state is ParserState.FAILED
            continue
        for event in events:
            if isinstance(event, AudioReceived):
                assert event.pcm
                assert len(event.pcm) % 2 == 0


def test_timing_is_an_opt_in_boolean_kept_across_utterances() -> None:
    assert SessionConfig().timing is False
    parser = streaming_parser(timing=True)
    assert parser.config is not None
    assert parser.config.timing is True
    parser.receive_text(END)
    parser.receive_text(json.dumps({"is_speaking": True}))
    assert parser.config.timing is True
    with pytest.raises(ProtocolError, match="timing"):
        parse_config({"timing": 1})


def test_wav_format_pcm_in_any_case_is_accepted() -> None:
    # FunASR's HTML5 client sends "PCM" when it streams a WAV file.
    parser = ProtocolParser()
    (event,) = parser.receive_text('{"mode": "online", "wav_format": "PCM"}')
    assert isinstance(event, ConfigReceived)
    assert event.config.wav_format == "pcm"
