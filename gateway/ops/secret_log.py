"""Secrets kept out of the server's log lines: a query string's ``resume`` token and API key.

uvicorn logs each request's path with its query string: the access line of an HTTP request
(``uvicorn.access``) and the ``[accepted]`` line of a WebSocket (``uvicorn.error``). Two of
our query parameters are secrets there: ``?resume=TOKEN`` takes a parked session over
(whoever reads it once after each of the victim's resumes may take the session: the
previous token works once), and ``?token=KEY`` is an API key, as browsers cannot set a
WebSocket handshake's headers. The filter writes their values as ``REDACTED`` in any
argument of those lines; every other parameter stays as it came.
"""

from __future__ import annotations

import logging
import re

from gateway.limits.access import TOKEN_QUERY_PARAMETER
from gateway.session.resume.resumes import RESUME_QUERY_PARAMETER

SECRET_PARAMETERS = (RESUME_QUERY_PARAMETER, TOKEN_QUERY_PARAMETER)
REDACTED = "REDACTED"
LOGGERS = ("uvicorn.access", "uvicorn.error")
# A parameter's value in a query string: after ``?`` or ``&``, up to the next ``&``, ``#``,
# space or quote (uvicorn writes the path inside quotes, a ``"`` in it as ``%22``).
_SECRET_VALUE = re.compile(
    r"(?P<key>[?&](?:" + "|".join(map(re.escape, SECRET_PARAMETERS)) + r")=)[^&#\s\"]*"
)


def redact(text: str) -> str:
    """``text`` with the secret parameters' values written as ``REDACTED``."""
    return _SECRET_VALUE.sub(rf"\g<key>{REDACTED}", text)


class SecretQueryFilter(logging.Filter):
    """Rewrites a record's string arguments (uvicorn passes the path as one) and, where it
    has none, its message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                redact(arg) if isinstance(arg, str) and "=" in arg else arg for arg in record.args
            )
        elif not record.args and isinstance(record.msg, str) and "=" in record.msg:
            record.msg = redact(record.msg)
        return True


def keep_secrets_out_of_logs() -> None:
    """Install the filter on uvicorn's loggers, once (safe to call again)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(each, SecretQueryFilter) for each in logger.filters):
            logger.addFilter(SecretQueryFilter())
