"""FunASR result frames as Deepgram's messages (gateway.deepgram.results), fed the frames a
2pass session sends, on a stream cut into utterances by its audio."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gateway.audio.endpointer import EndpointSettings
from gateway.deepgram.params import ListenParams
from gateway.deepgram.results import ListenResults, ModelInfo
from gateway.deepgram.stream import ListenStream

INFO = ModelInfo("req-1", "uuid-1", "zh", "paraformer-onnx")
SPEECH = (np.random.default_rng(3).standard_normal(16000) * 4000).astype("<i2").tobytes()
PAUSE = bytes(2 * 16000)  # a second of silence
# Speech, then the 300 ms pause that ends its utterance: 30 ms frames, the one that holds the
# speech's last samples counted as speech, so the cut is at 44 frames, 1.32 s.
CUT_S = 1.32
ENDED = SPEECH + bytes(int(CUT_S * 32000) - len(SPEECH))


def _session(**params: object) -> tuple[ListenStream, ListenResults]:
    listen = ListenParams(**params)  # type: ignore[arg-type]
    stream = ListenStream(
        listen,
        mode="2pass",
        model="zh",
        endpoint=EndpointSettings(),
        max_utterance_bytes=60 * 32000,
        max_frame_bytes=1 << 20,
    )
    stream.start()
    return stream, ListenResults(stream, listen, INFO, text_is_delta=True)


def _frame(
    wav_name: str, mode: str, text: str, *, final: bool = False, **extra: object
) -> dict[str, object]:
    return {"wav_name": wav_name, "mode": mode, "text": text, "is_final": final, **extra}


def _transcript(message: dict[str, object]) -> object:
    channel: Any = message["channel"]
    return channel["alternatives"][0]["transcript"]


def test_partials_then_a_final_sentence_timed_by_its_tokens_and_ended_by_a_pause() -> None:
    stream, results = _session(interim_results=True, punctuate=True)
    stream.take_audio(ENDED)  # the pause ends utterance u1 where the audio ends
    (u1,) = stream.utterances.values()
    assert u1.ending == "pause"
    assert results.result(_frame("u1", "2pass-online", "你好", audio_end_ms=600)) == [
        {
            "type": "Results",
            "channel_index": [0, 1],
            "duration": 0.6,  # the audio its chunk covers; no token times: spread over it
            "start": 0.0,
            "is_final": False,
            "speech_final": False,
            "channel": {
                "alternatives": [
                    {
                        "transcript": "你好",
                        "confidence": 0.0,
                        "words": [
                            {
                                "word": "你",
                                "start": 0.0,
                                "end": 0.3,
                                "confidence": 0.0,
                                "punctuated_word": "你",
                            },
                            {
                                "word": "好",
                                "start": 0.3,
                                "end": 0.6,
                                "confidence": 0.0,
                                "punctuated_word": "好",
                            },
                        ],
                    }
                ]
            },
            "metadata": {
                "request_id": "req-1",
                "model_info": {"name": "zh", "version": "asr-gateway", "arch": "paraformer-onnx"},
                "model_uuid": "uuid-1",
            },
        }
    ]
    times = json.dumps([[100, 400], [400, 900]])
    (final,) = results.result(_frame("u1", "2pass-offline", "你好。", final=True, timestamp=times))
    assert (final["is_final"], final["speech_final"], final["from_finalize"]) == (True, True, False)
    assert (final["start"], final["duration"]) == (0.0, CUT_S)
    alternative = final["channel"]["alternatives"][0]  # type: ignore[index]
    assert alternative["transcript"] == "你好。"
    assert [(w["punctuated_word"], w["start"], w["end"]) for w in alternative["words"]] == [
        ("你", 0.1, 0.4),
        ("好。", 0.4, 0.9),
    ]
    assert results.answered


def test_without_punctuate_the_transcript_is_bare_words_and_interims_are_not_sent() -> None:
    stream, results = _session()
    stream.take_audio(SPEECH)
    stream.finalize()
    assert results.result(_frame("u1", "2pass-online", "Hello")) == []  # no interim_results
    (final,) = results.result(_frame("u1", "2pass-offline", "Hello, World!", final=True))
    assert final["channel"]["alternatives"][0]["transcript"] == "hello world"  # type: ignore[index]
    assert (final["speech_final"], final["from_finalize"]) == (False, True)


def test_an_utterance_end_once_decoding_is_past_the_last_final_word_with_none_since() -> None:
    stream, results = _session(interim_results=True, utterance_end_ms=1000)
    stream.take_audio(ENDED)
    results.result(_frame("u1", "2pass-offline", "好", final=True, timestamp="[[200, 800]]"))
    assert results.tick() == []  # decoded to 1.32 s: 0.52 s past the word's end
    stream.take_audio(bytes(3 * 32000))
    assert results.tick() == []  # the audio taken is far past it, but not decoded yet
    # u2's first chunk decoded, no word in it: decoding is 1.12 s past the last word.
    assert results.result(_frame("u2", "2pass-online", "", audio_end_ms=600)) == [
        {"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": 0.8}
    ]
    assert results.result(_frame("u2", "2pass-online", "", audio_end_ms=1200)) == []  # once


def test_a_word_after_the_last_final_one_puts_the_utterance_end_off() -> None:
    stream, results = _session(interim_results=True, utterance_end_ms=1000)
    stream.take_audio(ENDED)
    results.result(_frame("u1", "2pass-offline", "好", final=True, timestamp="[[200, 800]]"))
    stream.take_audio(SPEECH + PAUSE)
    (interim,) = results.result(_frame("u2", "2pass-online", "再", audio_end_ms=600))
    assert interim["type"] == "Results"
    assert results.result(_frame("u2", "2pass-online", "", audio_end_ms=1200)) == []


def test_a_finalize_with_nothing_open_is_answered_after_the_utterances_before_it() -> None:
    stream, results = _session()
    stream.take_audio(ENDED)  # u1 ended by the pause, its final still to come
    assert stream.finalize() == []  # nothing open
    assert results.finalize_unopened() == []  # owed, behind u1's final
    messages = results.result(_frame("u1", "2pass-offline", "好", final=True))
    shown = [(m["from_finalize"], _transcript(m)) for m in messages]
    assert shown == [(False, "好"), (True, "")]


def test_a_finalize_with_nothing_open_and_nothing_owed_is_answered_at_once() -> None:
    stream, results = _session()
    stream.take_audio(ENDED)  # ended by the pause; nothing open now
    results.result(_frame("u1", "2pass-offline", "好", final=True))
    assert stream.finalize() == []
    (answer,) = results.finalize_unopened()
    assert (answer["is_final"], answer["from_finalize"], answer["start"]) == (True, True, CUT_S)


def test_with_diarize_a_final_sentences_words_carry_its_speaker() -> None:
    """A 2pass-offline frame's live speaker (``spk``) goes on each of its words, as
    Deepgram puts one on every word; interim words and a revision frame carry none."""
    stream, results = _session(interim_results=True, diarize=True)
    stream.take_audio(ENDED)
    interim = results.result(_frame("u1", "2pass-online", "你好", audio_end_ms=600))
    assert all("speaker" not in w for m in interim for w in _words(m))
    revision = _frame("u1", "2pass-online", "", spk_revisions=[{"sentence": 1, "spk": 1}])
    assert results.result(revision) == []
    (final,) = results.result(_frame("u1", "2pass-offline", "你好。", final=True, spk=2))
    assert [w["speaker"] for w in _words(final)] == [2, 2]


def _words(message: dict[str, object]) -> list[dict[str, object]]:
    channel: Any = message["channel"]
    words: list[dict[str, object]] = channel["alternatives"][0]["words"]
    return words


def test_diarize_asks_the_session_for_speakers_only_where_they_are_served() -> None:
    def asks(mode: str, speakers: bool, diarize: bool) -> bool:
        stream = ListenStream(
            ListenParams(diarize=diarize),
            mode=mode,  # type: ignore[arg-type]
            model="zh",
            endpoint=EndpointSettings(),
            max_utterance_bytes=60 * 32000,
            max_frame_bytes=1 << 20,
            speakers=speakers,
        )
        configs = [json.loads(m.text) for m in stream.start() if m.text]
        return any(config.get("spk") is True for config in configs)

    assert asks("2pass", speakers=True, diarize=True)
    assert not asks("2pass", speakers=False, diarize=True)  # no speaker model
    assert not asks("2pass", speakers=True, diarize=False)
    assert not asks("online", speakers=True, diarize=True)  # no sentences decoded whole


def test_a_named_speaker_goes_on_the_words_where_the_stream_lets_it() -> None:
    """``spk_name`` (the server's known speaker) as ``speaker_name`` on each word (ours),
    unless ``known_speaker`` leaves that name out."""
    for allowed, shown in ((None, "alice"), (("alice",), "alice"), (("bob",), None)):
        stream, results = _session(diarize=True, known_speakers=allowed)
        stream.take_audio(ENDED)
        frame = _frame("u1", "2pass-offline", "你好。", final=True, spk=0, spk_name="alice")
        (final,) = results.result(frame)
        assert [w.get("speaker_name") for w in _words(final)] == [shown, shown]
