"""The client's control messages (gateway.deepgram.control)."""

from __future__ import annotations

import pytest

from gateway.deepgram.control import (
    CloseStream,
    Configure,
    ControlError,
    Finalize,
    KeepAlive,
    parse_control,
)


@pytest.mark.parametrize(
    ("text", "control"),
    [
        ('{"type": "KeepAlive"}', KeepAlive()),
        ('{"type": "Finalize"}', Finalize()),
        ('{"type": "Finalize", "channel": 0}', Finalize()),
        ('{"type": "CloseStream"}', CloseStream()),
        ('{"type": "Configure", "keyterms": ["LiveKit", "退款"]}', Configure(("LiveKit", "退款"))),
        ('{"type": "Configure", "features": {"numerals": true}}', Configure(None)),
    ],
)
def test_each_message(text: str, control: object) -> None:
    assert parse_control(text) == control


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not a JSON message"),
        ('{"type": "Flush"}', "unknown message type 'Flush'"),
        ("[1, 2]", "unknown message type 'None'"),
        ('{"type": "Configure", "keyterms": "LiveKit"}', "keyterms must be a list of strings"),
        ('{"type": "KeepAlive", "n": NaN}', "not a JSON message"),
    ],
)
def test_anything_else_is_a_schema_error_quoting_it(text: str, message: str) -> None:
    with pytest.raises(ControlError, match=message) as refused:
        parse_control(text)
    assert refused.value.original == text
