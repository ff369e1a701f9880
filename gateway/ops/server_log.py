"""The server's log lines for a client's mistakes: one line each, never a traceback.

Two mistakes any client can make as often as it likes are logged with a traceback by the
server under us, before the app sees anything, so the app cannot answer them otherwise:

- a text frame that is not UTF-8: uvicorn's WebSocket protocol (``websockets-sansio``,
  what ``--ws auto`` picks) logs it with ``logger.exception`` (an ERROR and a traceback),
  then closes the connection with 1007 (RFC 6455) itself;
- a handshake header with a byte that is not ASCII where websockets (15) parses it: it
  reads such a byte as a lone surrogate, which it cannot encode again. In
  ``Sec-WebSocket-Protocol`` (or ``Upgrade``, ``Connection``, ``Sec-WebSocket-Version``,
  ``Sec-WebSocket-Extensions``) its ``ServerProtocol.accept`` puts the header in the
  text of its 400 and fails to encode that (``UnicodeEncodeError``); uvicorn lets the
  error out of ``data_received``, and the event loop logs it on the ``asyncio`` logger as
  a fatal transport error, three chained tracebacks long, and drops the connection
  unanswered. In ``Sec-WebSocket-Key`` the key's own encoding fails: a 500, logged on
  uvicorn's logger as ``opening handshake failed`` with a traceback.

The filter keeps one line for each, at WARNING: the client's mistake, escaped.
"""

from __future__ import annotations

import logging

from websockets.exceptions import InvalidHandshake

UVICORN_LOGGER = "uvicorn.error"
ASYNCIO_LOGGER = "asyncio"
# uvicorn's messages for what a client did, as it logs them (exactly).
CLIENT_FAULTS = frozenset({"Invalid UTF-8 sequence received from client."})
HANDSHAKE_FAILED = "opening handshake failed"  # websockets', on uvicorn's logger
UNANSWERED_HANDSHAKE = "WebSocket handshake dropped unanswered: a header is not ASCII (%s)"
REFUSED_HANDSHAKE = "WebSocket handshake refused with 500: a header is not ASCII (%s)"
MAX_DETAIL_CHARS = 200


class ClientFaultFilter(logging.Filter):
    """Turns a client fault that the server under us logs with a traceback into one
    WARNING line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.exc_info, tuple):
            return True
        error = record.exc_info[1]
        if record.msg in CLIENT_FAULTS:
            _one_warning(record)
        elif (refused := _unencodable_refusal(error)) is not None:
            _one_warning(record, UNANSWERED_HANDSHAKE, refused)
        elif record.msg == HANDSHAKE_FAILED and isinstance(error, UnicodeEncodeError):
            _one_warning(record, REFUSED_HANDSHAKE, error)
        return True


def _unencodable_refusal(error: BaseException | None) -> InvalidHandshake | None:
    """The invalid handshake that websockets was refusing when it raised ``error``."""
    if isinstance(error, UnicodeEncodeError) and isinstance(error.__context__, InvalidHandshake):
        return error.__context__
    return None


def _one_warning(
    record: logging.LogRecord, message: str | None = None, error: BaseException | None = None
) -> None:
    """The record as one WARNING line: its own message, or ``message`` with ``error``."""
    if message is not None:
        # What websockets could not encode, escaped: a log file may be strict UTF-8.
        detail = str(error).encode("ascii", "backslashreplace").decode("ascii")
        record.msg = message
        record.args = (detail[:MAX_DETAIL_CHARS],)
    record.exc_info = None
    record.exc_text = None
    record.stack_info = None
    record.levelno = logging.WARNING
    record.levelname = logging.getLevelName(logging.WARNING)


def quiet_client_faults() -> None:
    """Install the filter on uvicorn's logger and asyncio's, once (safe to call again)."""
    for name in (UVICORN_LOGGER, ASYNCIO_LOGGER):
        logger = logging.getLogger(name)
        if not any(isinstance(each, ClientFaultFilter) for each in logger.filters):
            logger.addFilter(ClientFaultFilter())
