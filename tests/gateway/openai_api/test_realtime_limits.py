"""How much of a client's JSON the Realtime dialect parses, keeps and sends back (sans I/O):
events over ASR_MAX_TEXT_BYTES must be appends large in their audio only, refused before
they are parsed otherwise; an append's audio is bounded in seconds whatever its format;
every field kept is OpenAI's shape, bounded."""

from __future__ import annotations

import base64
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from gateway.openai_api.realtime.config import RealtimeEventError, RealtimeSettings
from gateway.openai_api.realtime.events import (
    AudioAppended,
    BufferCleared,
    SessionUpdate,
    parse_client_event,
)
from gateway.openai_api.realtime.server_events import session_object
from shared.errors import FrameTooLargeError

MIB = 1 << 20
PCMU = RealtimeSettings(encoding="pcmu", rate=8000)
PCM24 = RealtimeSettings()  # OpenAI's default: audio/pcm at 24 kHz
PCM48 = RealtimeSettings(rate=48000)
LISTS = "<lists>"  # where a test puts JSON that json.dumps would not make


def append(audio: bytes, **more: object) -> str:
    encoded = base64.b64encode(audio).decode()
    return json.dumps({"type": "input_audio_buffer.append", "audio": encoded, **more})


def update(input_: dict[str, object], **more: object) -> str:
    session = {"type": "transcription", "audio": {"input": input_}, **more}
    return json.dumps({"type": "session.update", "session": session})


def nested_lists(size: int) -> str:
    """``size`` characters of empty lists: about 28 bytes of Python objects each."""
    return "[" + ",".join(["[]"] * (size // 3)) + "]"


def peak_bytes(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
    except (FrameTooLargeError, RealtimeEventError):
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


# -- events over ASR_MAX_TEXT_BYTES ------------------------------------------------------


def test_a_4_mib_update_of_nested_lists_is_refused_before_it_is_parsed() -> None:
    """What kept +105 MiB for a session's life: megabytes of empty lists in an object we
    echoed. It never reaches the JSON parser now (which would build ~100 MiB for it)."""
    text = update({"noise_reduction": {"type": "near_field", "x": LISTS}})
    text = text.replace(f'"{LISTS}"', nested_lists(4 * MIB))
    assert len(text) > 4 * MIB
    # At 48 kHz an append may be as long: the lists, not the length, are refused.
    with pytest.raises(FrameTooLargeError, match="ASR_MAX_TEXT_BYTES"):
        parse_client_event(text, PCM48)
    assert peak_bytes(lambda: parse_client_event(text, PCM48)) < MIB
    # At 24 kHz no event may be that long at all.
    with pytest.raises(FrameTooLargeError, match="2162688 characters"):
        parse_client_event(text, PCM24)
    assert peak_bytes(lambda: parse_client_event(text, PCM24)) < MIB


def test_an_append_with_nested_lists_beside_its_audio_is_refused_unparsed() -> None:
    text = append(b"\x00\x01" * 10, x=LISTS).replace(f'"{LISTS}"', nested_lists(MIB))
    with pytest.raises(FrameTooLargeError, match="ASR_MAX_TEXT_BYTES"):
        parse_client_event(text, PCM24)
    assert peak_bytes(lambda: parse_client_event(text, PCM24)) < MIB // 2


def test_any_other_event_over_max_text_bytes_closes_as_too_large() -> None:
    text = json.dumps({"type": "input_audio_buffer.clear", "pad": "x" * 70_000})
    with pytest.raises(FrameTooLargeError, match=r"input_audio_buffer\.append"):
        parse_client_event(text, PCM24)
    small = json.dumps({"type": "input_audio_buffer.clear", "pad": "x" * 60_000})
    assert parse_client_event(small, PCM24) == BufferCleared(None)


def test_a_large_append_is_taken_with_its_event_id() -> None:
    audio = bytes(range(256)) * 1000  # 256 kB: 5.3 s of 24 kHz PCM16
    event = parse_client_event(append(audio, event_id="client_1"), PCM24)
    assert event == AudioAppended(audio, "client_1")


# -- an append's audio, in seconds --------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "most"),
    [
        (PCMU, MIB // 4),  # 32.768 s of 8 kHz G.711: one byte a sample
        (PCM24, MIB * 3 // 2),  # 32.768 s of 24 kHz PCM16
        (PCM48, MIB * 3),
        (RealtimeSettings(rate=16000), MIB),  # ASR_MAX_FRAME_BYTES itself
    ],
    ids=["pcmu-8k", "pcm16-24k", "pcm16-48k", "pcm16-16k"],
)
def test_an_append_carries_at_most_a_frames_seconds_in_any_format(
    settings: RealtimeSettings, most: int
) -> None:
    """The default ASR_MAX_FRAME_BYTES (1 MiB) is 32.768 s of 16 kHz PCM: as many seconds
    in the session's format, not as many base64 characters (393 s of G.711 were)."""
    assert parse_client_event(append(bytes(most)), settings) == AudioAppended(bytes(most), None)
    with pytest.raises(FrameTooLargeError, match=r"32\.768 s"):
        parse_client_event(append(bytes(most + 2)), settings)


# -- fields kept: OpenAI's shapes, bounded -----------------------------------------------


def parsed(text: str) -> RealtimeSettings:
    event = parse_client_event(text, PCM24)
    assert isinstance(event, SessionUpdate)
    return event.settings


def refused(text: str) -> RealtimeEventError:
    with pytest.raises(RealtimeEventError) as error:
        parse_client_event(text, PCM24)
    return error.value


def test_noise_reduction_keeps_its_type_only() -> None:
    settings = parsed(update({"noise_reduction": {"type": "far_field", "extra": [[], {}]}}))
    shown: Any = session_object("sess_x", settings, "ga", 0)
    assert shown["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    beta = parse_client_event(
        json.dumps(
            {
                "type": "transcription_session.update",
                "session": {"input_audio_noise_reduction": {"type": "near_field"}},
            }
        ),
        PCM24,
    )
    assert isinstance(beta, SessionUpdate)
    shown = session_object("sess_x", beta.settings, "beta", 0)
    assert shown["input_audio_noise_reduction"] == {"type": "near_field"}
    assert parsed(update({"noise_reduction": None})).noise_reduction is None


@pytest.mark.parametrize("value", [{"type": "loud"}, {}, {"type": ["near_field"]}, "near_field"])
def test_noise_reduction_of_another_shape_is_refused(value: object) -> None:
    error = refused(update({"noise_reduction": value}))
    assert error.param is not None
    assert error.param.startswith("session.audio.input.noise_reduction")


def test_include_takes_openais_value_once() -> None:
    value = "item.input_audio_transcription.logprobs"
    assert parsed(update({}, include=[value] * 50)).include == (value,)
    error = refused(update({}, include=[value, "item.everything"]))
    assert (error.code, error.param) == ("invalid_value", "session.include")


@pytest.mark.parametrize(
    ("transcription", "param"),
    [
        ({"model": "m" * 257}, "model"),
        ({"language": "z" * 36}, "language"),
        ({"model": "\ud800"}, "model"),  # a lone surrogate: no text frame carries it
        ({"keywords": ["ok", "\udfff"]}, "keywords"),
    ],
    ids=["model", "language", "model-surrogate", "keyword-surrogate"],
)
def test_texts_are_bounded_and_sendable(transcription: dict[str, object], param: str) -> None:
    error = refused(update({"transcription": transcription}))
    assert error.code == "invalid_value"
    assert error.param == f"session.audio.input.transcription.{param}"


def test_texts_within_bounds_are_kept_and_echoed() -> None:
    transcription = {
        "model": "m" * 256,
        "language": "zh-Hans-CN",
        "keywords": ["魔搭"] * 256,
        "prompt": "阿里巴巴",
    }
    settings = parsed(update({"transcription": transcription}))
    shown: Any = session_object("sess_x", settings, "ga", 0)
    echoed = shown["audio"]["input"]["transcription"]
    assert echoed == {**transcription, "keywords": ["魔搭"] * 256}


def test_a_long_prompt_and_many_keywords_are_taken_their_hotwords_capped() -> None:
    """OpenAI bounds neither: the event's own cap (ASR_MAX_TEXT_BYTES) bounds what is kept,
    and the hotwords are the first that fit a FunASR config."""
    transcription = {
        "prompt": " " * 20_000 + "词 " + "长" * 40,  # text long, one word, one too long
        "keywords": [f"k{n}" for n in range(300)],
    }
    settings = parsed(update({"transcription": transcription}))
    assert settings.prompt == transcription["prompt"]
    assert len(settings.keywords) == 300
    words = settings.hotwords.split(" ")
    assert (len(words), words[0], words[-1]) == (256, "k0", "k255")
    only_prompt = parsed(update({"transcription": {"prompt": transcription["prompt"]}}))
    assert only_prompt.hotwords == "词"


@pytest.mark.parametrize("event_id", ["e" * 513, "\ud800"], ids=["long", "surrogate"])
def test_an_event_id_that_cannot_be_sent_back_is_refused(event_id: str) -> None:
    error = refused(json.dumps({"type": "input_audio_buffer.clear", "event_id": event_id}))
    assert (error.code, error.param, error.event_id) == ("invalid_value", "event_id", None)
