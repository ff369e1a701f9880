from __future__ import annotations

import json

import pytest

from gateway.results import end_acknowledgement, error_message, result_message


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
