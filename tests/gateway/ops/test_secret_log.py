"""The resume token and the API key of a query string are written as REDACTED in uvicorn's
lines; every other parameter, and every other line, stays as it was."""

from __future__ import annotations

import logging

import pytest

from gateway.ops.secret_log import SecretQueryFilter, redact


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("/?resume=abc.def-1", "/?resume=REDACTED"),
        ("/?model=zh&resume=abc&last_result=3", "/?model=zh&resume=REDACTED&last_result=3"),
        ("/metrics?token=k3y", "/metrics?token=REDACTED"),
        ("/?token=a&resume=b", "/?token=REDACTED&resume=REDACTED"),
        ("/?resume=", "/?resume=REDACTED"),
        ("/?notresume=a&xtoken=b", "/?notresume=a&xtoken=b"),  # other names whole
        ("/readyz?model=resume", "/readyz?model=resume"),
    ],
)
def test_only_the_secrets_values_are_redacted(line: str, kept: str) -> None:
    assert redact(line) == kept


def _filtered(msg: str, *args: object) -> str:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, msg, args, None)
    assert SecretQueryFilter().filter(record)
    return record.getMessage()


def test_uvicorns_access_and_websocket_lines_lose_the_secret() -> None:
    access = _filtered(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/readyz?token=k3y", "1.1", 200
    )
    assert access == '127.0.0.1:5 - "GET /readyz?token=REDACTED HTTP/1.1" 200'
    accepted = _filtered('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", "/?resume=t0k")
    assert accepted == '127.0.0.1:5 - "WebSocket /?resume=REDACTED" [accepted]'
    assert _filtered("plain ?resume=t0k") == "plain ?resume=REDACTED"
