from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.funasr.results import (
    Label,
    Partials,
    WholeText,
    end_acknowledgement,
    error_message,
    result_message,
)
from shared.messages import Decoded, StreamResult


def test_result_has_funasrs_fields() -> None:
    text = result_message(mode="2pass-online", text="你好", wav_name="demo", is_final=False)
    assert json.loads(text) == {
        "mode": "2pass-online",
        "text": "你好",
        "wav_name": "demo",
        "is_final": False,
    }


def test_result_keeps_non_ascii_text_unescaped() -> None:
    assert "你好" in result_message(mode="online", text="你好", wav_name="w", is_final=True)


def test_is_final_is_a_json_boolean() -> None:
    text = result_message(mode="offline", text="", wav_name="w", is_final=True)
    assert json.loads(text)["is_final"] is True


def test_extra_fields_are_added() -> None:
    text = result_message(
        mode="2pass-offline",
        text="今天天气好。",
        wav_name="w",
        is_final=False,
        extra={"timestamp": "[[100,200]]", "compute_ms": 12.5},
    )
    message = json.loads(text)
    assert message["timestamp"] == "[[100,200]]"
    assert message["compute_ms"] == 12.5
    assert message["mode"] == "2pass-offline"


@pytest.mark.parametrize("field", ["mode", "text", "wav_name", "is_final"])
def test_extra_may_not_replace_a_funasr_field(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        result_message(mode="online", text="a", wav_name="w", is_final=False, extra={field: 1})


def test_extra_with_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON"):
        result_message(
            mode="online", text="a", wav_name="w", is_final=False, extra={"rtf": float("nan")}
        )


def test_error_message_shape() -> None:
    assert json.loads(error_message(1008, "audio before the config message", "online", "a")) == {
        "type": "error",
        "code": 1008,
        "message": "audio before the config message",
        # What FunASR's clients read off every frame: a result with no text, not final.
        "mode": "online",
        "text": "",
        "wav_name": "a",
        "is_final": False,
    }


def test_end_acknowledgement_shape() -> None:
    assert json.loads(end_acknowledgement(mode="2pass", wav_name="a.wav")) == {
        "mode": "2pass",
        "text": "",
        "wav_name": "a.wav",
        "is_final": True,
        "is_end": True,
    }
    failed = json.loads(end_acknowledgement(mode="offline", wav_name="b", error="it died"))
    assert (failed["is_final"], failed["is_end"], failed["error"]) == (False, True, "it died")


def test_error_message_keeps_non_ascii_unescaped() -> None:
    assert "音频" in error_message(1011, "音频")


# -- a pass's results become frames --------------------------------------------------------


def result(text: str, is_final: bool = False, **fields: Any) -> StreamResult:
    """A result of ``text``; ``fields`` are the payload's (``timestamps=``...) or the
    result's own (``queue_ms=``...)."""
    own = {
        name: fields.pop(name)
        for name in ("queue_ms", "compute_ms", "batch_size")
        if name in fields
    }
    return StreamResult(1, 0, Decoded(text, **fields), is_final, **own)


def test_a_streaming_pass_sends_each_partial_with_text_and_always_its_final() -> None:
    frames = Partials("online", Label("online", "w"), final=True, timing=False)
    assert frames.push(result(""), worker=0) == []
    (partial,) = frames.push(result("你"), worker=0)
    assert json.loads(partial)["is_final"] is False
    (final,) = frames.push(result("", is_final=True), worker=1)
    message = json.loads(final)
    assert (message["mode"], message["text"], message["is_final"]) == ("online", "", True)
    assert message["worker"] == 1
    assert frames.finish() == []


def test_a_2pass_streaming_pass_is_never_final() -> None:
    frames = Partials("2pass-online", Label("2pass", "w"), final=False, timing=False)
    assert frames.push(result("", is_final=True), worker=0) == []
    (frame,) = frames.push(result("好", is_final=True), worker=0)
    assert json.loads(frame)["is_final"] is False


def test_with_timing_every_result_is_a_frame() -> None:
    frames = Partials("2pass-online", Label("2pass", "w"), final=False, timing=True)
    assert len(frames.push(result(""), worker=0)) == 1


def test_with_timing_a_chunks_result_says_where_its_audio_ends_in_the_utterance() -> None:
    # A 2pass sentence that starts 1 s (32000 bytes) into the utterance, 600 ms chunks.
    frames = Partials(
        "2pass-online",
        Label("2pass", "w"),
        final=False,
        timing=True,
        chunk_bytes=19200,
        origin_bytes=32000,
    )
    (second_chunk,) = frames.push(StreamResult(1, 1, Decoded("好"), False), worker=0)
    assert json.loads(second_chunk)["audio_end_ms"] == 1000 + 2 * 600
    (rest,) = frames.push(StreamResult(1, 2, Decoded(), True), worker=0)
    assert "audio_end_ms" not in json.loads(rest)  # the final piece is not a whole chunk
    untimed = Partials("online", Label("online", "w"), final=True, timing=False)
    (plain,) = untimed.push(result("你"), worker=0)
    assert "audio_end_ms" not in json.loads(plain)


def test_a_whole_decode_is_one_frame_with_the_sums_of_its_pieces() -> None:
    frames = WholeText(
        "offline", Label("offline", "w"), final=True, offsets_ms=[0], text_is_delta=True
    )
    assert frames.push(result("今天", queue_ms=1.0, compute_ms=2.0), worker=0) == []
    assert frames.push(result("好", True, queue_ms=3.0, compute_ms=4.0), worker=0) == []
    (frame,) = frames.finish()
    message = json.loads(frame)
    assert (message["mode"], message["text"], message["is_final"]) == ("offline", "今天好", True)
    assert (message["queue_ms"], message["compute_ms"]) == (4.0, 6.0)
    assert "timestamp" not in message


def test_a_running_text_is_taken_from_the_final_result() -> None:
    frames = WholeText(
        "2pass-offline", Label("2pass", "w"), final=False, offsets_ms=[0], text_is_delta=False
    )
    frames.push(result("ab"), worker=0)
    frames.push(result("abc", True), worker=0)
    (frame,) = frames.finish()
    assert json.loads(frame)["text"] == "abc"
    assert json.loads(frame)["is_final"] is False


def test_segments_are_joined_and_their_timestamps_moved_to_where_each_starts() -> None:
    frames = WholeText(
        "offline", Label("offline", "w"), final=True, offsets_ms=[0, 60_000], text_is_delta=True
    )
    frames.push(result("first", True, timestamps=((0, 100),)), worker=0)
    frames.push(result("", True), worker=1)  # a silent segment adds no space
    (frame,) = frames.finish()
    message = json.loads(frame)
    assert message["text"] == "first"
    assert message["timestamp"] == "[[0,100]]"


def test_three_segments_texts_and_timestamps() -> None:
    frames = WholeText(
        "offline", Label("offline", "w"), final=True, offsets_ms=[0, 500, 900], text_is_delta=True
    )
    for index, text in enumerate(("a", "b", "c")):
        frames.push(result(text, True, timestamps=((10, 20),)), worker=index)
    message = json.loads(frames.finish()[0])
    assert message["text"] == "a b c"
    assert message["timestamp"] == "[[10,20],[510,520],[910,920]]"
    assert message["worker"] == 2  # the last segment's


def test_the_name_on_frames_is_the_labels_at_the_time_they_are_made() -> None:
    label = Label("online", "before")
    frames = Partials("online", label, final=True, timing=False)
    label.wav_name = "after"
    assert json.loads(frames.push(result("x"), worker=0)[0])["wav_name"] == "after"
