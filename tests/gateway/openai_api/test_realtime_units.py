"""The Realtime dialect's sans-I/O parts: client events parsed, the input buffer's turns,
the session's results as transcription events."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile

from gateway.audio.endpointer import EndpointSettings
from gateway.audio.g711 import G711_TABLES
from gateway.openai_api.realtime.config import RealtimeEventError, RealtimeSettings, TurnDetection
from gateway.openai_api.realtime.events import AudioAppended, SessionUpdate, parse_client_event
from gateway.openai_api.realtime.server_events import EventIds, session_object
from gateway.openai_api.realtime.transcripts import Transcripts
from gateway.openai_api.realtime.turns import (
    InputBuffer,
    Output,
    ToClient,
    ToSession,
)
from tests.helpers.realtime_audio import wav_payload

SECOND = 32000  # bytes of 16 kHz PCM
MANY = " ".join(f"w{n}" for n in range(2000))  # more hotwords than a config takes


def buffer(settings: RealtimeSettings, max_turn_bytes: int = 10 * SECOND) -> InputBuffer:
    return InputBuffer(
        settings,
        EventIds("sess_test"),
        mode="online",
        endpoint=EndpointSettings(),
        max_turn_bytes=max_turn_bytes,
        max_frame_bytes=SECOND,
    )


def client_events(outputs: list[Output]) -> list[dict[str, object]]:
    return [output.event for output in outputs if isinstance(output, ToClient)]


def session_texts(outputs: list[Output]) -> list[dict[str, object]]:
    return [
        json.loads(output.text)
        for output in outputs
        if isinstance(output, ToSession) and output.text is not None
    ]


def audio_sent(outputs: list[Output]) -> bytes:
    return b"".join(
        output.data for output in outputs if isinstance(output, ToSession) and output.data
    )


def loud(seconds: float) -> bytes:
    rng = np.random.default_rng(int(seconds * 1000))
    return (rng.standard_normal(int(seconds * 16000)) * 4000).astype("<i2").tobytes()


def quiet(seconds: float) -> bytes:
    return bytes(int(seconds * SECOND) // 2 * 2)


@pytest.mark.parametrize(("encoding", "subtype"), [("pcmu", "ULAW"), ("pcma", "ALAW")])
def test_g711_decodes_as_soundfile_does(encoding: str, subtype: str) -> None:
    """Every code a G.711 encoder makes, decoded by libsndfile and by our table."""
    ramp = np.arange(-32768, 32768, 7, dtype=np.int16)
    out = io.BytesIO()
    soundfile.write(out, ramp, 8000, subtype=subtype, format="WAV")
    codes = np.frombuffer(wav_payload(out.getvalue()), dtype=np.uint8)
    assert len(set(codes.tolist())) >= 250
    decoded, _ = soundfile.read(io.BytesIO(out.getvalue()), dtype="int16")
    assert np.array_equal(G711_TABLES[encoding][codes], decoded)  # type: ignore[index]


def test_server_vad_cuts_a_turn_after_the_pause_and_drops_a_silent_stretch() -> None:
    settings = RealtimeSettings(rate=16000, turn_detection=TurnDetection(silence_duration_ms=300))
    turns = buffer(settings, max_turn_bytes=2 * SECOND)
    outputs = turns.start()
    pcm = loud(0.6) + quiet(0.5) + quiet(3.0)
    outputs += turns.append(pcm)
    events = client_events(outputs)
    assert [event["type"] for event in events] == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
    ]
    assert events[0]["audio_start_ms"] == 0
    assert events[1]["audio_end_ms"] == 900  # 0.6 s of speech, 300 ms of pause
    # The turn; a silent one ended at the longest turn, unheard; the rest's, still open.
    texts = session_texts(outputs)
    assert [text.get("is_speaking") for text in texts] == [True, False, True, False, True]
    first, silent = texts[0]["wav_name"], texts[2]["wav_name"]
    assert events[2]["item_id"] == first
    assert turns.items[str(silent)].dropped
    assert audio_sent(outputs) == pcm[: len(audio_sent(outputs))]
    assert len(audio_sent(outputs)) >= 900 * 32 + 2 * SECOND - 960


def test_a_commit_ends_the_turn_and_the_next_opens_with_its_audio() -> None:
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    outputs = turns.start()
    with pytest.raises(RealtimeEventError) as empty:
        turns.commit("e1")
    assert (empty.value.code, empty.value.event_id) == ("input_audio_buffer_commit_empty", "e1")
    outputs += turns.append(loud(0.2)) + turns.commit(None)
    assert [text.get("is_speaking") for text in session_texts(outputs)] == [True, False]
    later = turns.append(loud(0.1))
    assert [text.get("is_speaking") for text in session_texts(later)] == [True]
    assert session_texts(later)[0]["wav_name"] != session_texts(outputs)[0]["wav_name"]


def test_clear_drops_an_open_turn_and_is_answered_when_nothing_is_open() -> None:
    turns = buffer(RealtimeSettings(rate=24000, turn_detection=None))
    opened = session_texts(turns.start())[0]["wav_name"]
    turns.append(loud(0.2))
    cleared = turns.clear()
    assert [event["type"] for event in client_events(cleared)] == ["input_audio_buffer.cleared"]
    assert session_texts(cleared) == [{"is_speaking": False}]
    assert turns.items[str(opened)].dropped
    again = turns.clear()
    assert session_texts(again) == []  # no utterance open: nothing to end


def test_hotwords_reach_the_open_utterance_and_the_next_config() -> None:
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    turns.start()
    update = parse_client_event(
        json.dumps(
            {
                "type": "session.update",
                "session": {
                    "type": "transcription",
                    "audio": {"input": {"transcription": {"prompt": "魔搭 阿里巴巴"}}},
                },
            }
        ),
        turns.settings,
    )
    assert isinstance(update, SessionUpdate)
    assert session_texts(turns.update(update.settings, update.dialect)) == [
        {"hotwords": "魔搭 阿里巴巴"}
    ]
    turns.append(loud(0.1))
    turns.commit(None)
    assert session_texts(turns.append(loud(0.1)))[0]["hotwords"] == "魔搭 阿里巴巴"


def test_a_new_rate_mid_turn_finishes_the_old_resampler_first() -> None:
    turns = buffer(RealtimeSettings(rate=8000, turn_detection=None))
    turns.start()
    sent = audio_sent(turns.append(loud(0.5)[:8000]))  # 0.5 s at 8 kHz
    update = RealtimeSettings(rate=16000, turn_detection=None)
    sent += audio_sent(turns.update(update, "ga"))
    assert len(sent) == 16000  # all of it, at 16 kHz: the filter's tail came out
    assert audio_sent(turns.append(b"\x01\x00" * 10)) == b"\x01\x00" * 10


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"type": "transcription", "audio": {"input": {"format": {"rate": 96000}}}}, "rate"),
        ({"type": "transcription", "audio": {"input": {"format": {"type": "audio/mp3"}}}}, "type"),
        (
            {"type": "transcription", "audio": {"input": {"turn_detection": {"threshold": 2}}}},
            "threshold",
        ),
        (
            {
                "type": "transcription",
                "audio": {"input": {"turn_detection": {"silence_duration_ms": -1}}},
            },
            "silence_duration_ms",
        ),
        (
            {
                "type": "transcription",
                "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": 1}}},
            },
            "eagerness",
        ),
        ({"type": "transcription", "audio": []}, "audio"),
    ],
)
def test_bad_updates_name_their_parameter(session: dict[str, object], param: str) -> None:
    with pytest.raises(RealtimeEventError) as refused:
        parse_client_event(
            json.dumps({"type": "session.update", "session": session, "event_id": "e9"}),
            RealtimeSettings(),
        )
    assert refused.value.param is not None
    assert refused.value.param.endswith(param)
    assert refused.value.event_id == "e9"


def test_an_update_sets_only_what_it_carries_and_null_turns_detection_off() -> None:
    settings = RealtimeSettings(prompt="keep", rate=16000)
    update = parse_client_event(
        json.dumps(
            {
                "type": "transcription_session.update",
                "session": {"turn_detection": None, "input_audio_format": "g711_alaw"},
            }
        ),
        settings,
    )
    assert isinstance(update, SessionUpdate)
    assert update.dialect == "beta"
    assert update.settings.turn_detection is None
    assert (update.settings.encoding, update.settings.rate) == ("pcma", 8000)
    assert update.settings.prompt == "keep"
    shown = session_object("sess_x", update.settings, "beta", 0)
    assert shown["input_audio_format"] == "g711_alaw"
    assert shown["turn_detection"] is None


def test_appends_decode_base64_strictly() -> None:
    event = parse_client_event(
        json.dumps({"type": "input_audio_buffer.append", "audio": "AAEC"}), RealtimeSettings()
    )
    assert event == AudioAppended(b"\x00\x01\x02", None)
    with pytest.raises(RealtimeEventError, match="base64"):
        parse_client_event(
            '{"type": "input_audio_buffer.append", "audio": "AA E"}', RealtimeSettings()
        )


def test_results_become_deltas_and_one_completed_per_turn() -> None:
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    item = str(session_texts(turns.start())[0]["wav_name"])
    turns.append(loud(1.0))
    turns.commit(None)
    transcripts = Transcripts(turns, text_is_delta=True)

    def frame(mode: str, text: str, final: bool) -> dict[str, object]:
        return {"mode": mode, "text": text, "wav_name": item, "is_final": final}

    assert transcripts.result(frame("2pass-online", "你好", False))[0]["delta"] == "你好"
    assert transcripts.result(frame("2pass-offline", "你好。", False)) == []
    done = transcripts.result(frame("2pass-offline", "世界。", True))
    assert [event["type"] for event in done] == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    assert done[0]["transcript"] == "你好。 世界。"  # joined as FunASR joins segments
    assert done[0]["usage"] == {"type": "duration", "seconds": 1.0}
    assert transcripts.result(frame("2pass-offline", "late", True)) == []  # item forgotten


def test_partials_resent_after_a_sentences_offline_frame_are_no_new_delta() -> None:
    """A turn of two 2pass sentences: the second's partials come before the first's
    offline frame, and again after it ("resent", for FunASR's clients); streamed once."""
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    item = committed_item(turns)
    transcripts = Transcripts(turns, text_is_delta=True)

    def frame(mode: str, text: str, final: bool = False, **extra: object) -> dict[str, object]:
        return {"mode": mode, "text": text, "wav_name": item, "is_final": final, **extra}

    deltas = [
        event.get("delta")
        for result in (
            frame("2pass-online", "你好"),
            frame("2pass-online", "世界"),
            frame("2pass-offline", "你好。"),
            frame("2pass-online", "世界", resent=True),
            frame("2pass-online", "们"),
        )
        for event in transcripts.result(result)
    ]
    assert deltas == ["你好", "世界", "们"]
    done = transcripts.result(frame("2pass-offline", "世界们。", final=True))
    assert done[0]["transcript"] == "你好。 世界们。"


def committed_item(turns: InputBuffer) -> str:
    item = str(session_texts(turns.start())[0]["wav_name"])
    turns.append(loud(1.0))
    turns.commit(None)
    return item


def online(item: str, text: str, final: bool = False) -> dict[str, object]:
    return {"mode": "online", "text": text, "wav_name": item, "is_final": final}


def test_a_running_texts_deltas_are_what_each_adds_and_completed_is_the_last() -> None:
    """An engine whose text is the pass's text so far (the checksum engine's): OpenAI's
    deltas are new text, the completed transcript the last value, never their join."""
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    item = committed_item(turns)
    transcripts = Transcripts(turns, text_is_delta=False)
    deltas = [
        event["delta"]
        for text in ("你好", "你好世界", "你好世界", "再见")  # extends, the same, revised
        for event in transcripts.result(online(item, text))
    ]
    assert deltas == ["你好", "世界", "再见"]
    done = transcripts.result(online(item, "再见了", final=True))
    assert [event.get("delta") for event in done[:1]] == ["了"]
    assert done[1]["transcript"] == "再见了"
    assert done[2]["item"]["content"][0]["transcript"] == "再见了"  # type: ignore[index]


def test_a_delta_engines_deltas_are_its_texts_and_completed_their_join() -> None:
    turns = buffer(RealtimeSettings(rate=16000, turn_detection=None))
    item = committed_item(turns)
    transcripts = Transcripts(turns, text_is_delta=True)
    deltas = [
        event["delta"]
        for text in ("你好", "你好", "世界")
        for event in transcripts.result(online(item, text))
    ]
    assert deltas == ["你好", "你好", "世界"]
    done = transcripts.result(online(item, "", final=True))
    assert done[0]["transcript"] == "你好你好世界"


SPEAKERS = "item.input_audio_transcription.speakers"


def test_speakers_asked_in_include_reach_the_config_and_the_completed_event() -> None:
    """Ours: ``include`` naming the speakers asks a 2pass turn for them (where the model
    has a speaker pool); the completed event carries each sentence's live speaker and the
    relabels that came with the turn. Not asked, or no speaker pool: nothing."""
    for include, speakers, asked in (
        ((SPEAKERS,), True, True),
        ((), True, False),
        ((SPEAKERS,), False, False),
    ):
        settings = RealtimeSettings(rate=16000, turn_detection=None, include=include)
        turns = InputBuffer(
            settings,
            EventIds("sess_test"),
            mode="2pass",
            endpoint=EndpointSettings(),
            max_turn_bytes=10 * SECOND,
            max_frame_bytes=SECOND,
        )
        turns.speakers = speakers
        (opening,) = session_texts(turns.start())
        assert (opening.get("spk") is True) is asked
    item = str(opening["wav_name"])
    turns.append(loud(1.0))
    turns.commit(None)
    transcripts = Transcripts(turns, text_is_delta=True)

    def frame(mode: str, text: str, final: bool = False, **extra: object) -> dict[str, object]:
        return {"mode": mode, "text": text, "wav_name": item, "is_final": final, **extra}

    assert transcripts.result(frame("2pass-offline", "你好。", spk=0, sentence=1)) == []
    revision = [{"sentence": 1, "spk": 1, "was": 0}]
    assert transcripts.result(frame("2pass-online", "", spk_revisions=revision)) == []
    done = transcripts.result(frame("2pass-offline", "再见。", True, spk=1, sentence=2))
    completed = done[0]
    assert completed["speakers"] == [
        {"sentence": 1, "speaker": 0},
        {"sentence": 2, "speaker": 1},
    ]
    assert completed["speaker_revisions"] == revision
