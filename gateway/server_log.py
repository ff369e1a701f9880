"""The server's log lines for a client's mistakes: one line each, never a traceback.

uvicorn's WebSocket protocol (``websockets-sansio``, what ``--ws auto`` picks) logs a text
frame that is not UTF-8 with ``logger.exception``: an ERROR and a full traceback, for a
mistake any client can make as often as it likes. It then closes the connection with 1007
(RFC 6455) itself, before the app sees the frame, so the app cannot answer it otherwise.
The filter keeps the line and drops the traceback, at WARNING.
"""

from __future__ import annotations

import logging

UVICORN_LOGGER = "uvicorn.error"
# uvicorn's messages for what a client did, as it logs them (exactly).
CLIENT_FAULTS = frozenset({"Invalid UTF-8 sequence received from client."})


class ClientFaultFilter(logging.Filter):
    """Turns a client fault that uvicorn logs with a traceback into one WARNING line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is not None and record.msg in CLIENT_FAULTS:
            record.exc_info = None
            record.exc_text = None
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        return True


def quiet_client_faults() -> None:
    """Install the filter on uvicorn's logger, once (safe to call for every connection)."""
    logger = logging.getLogger(UVICORN_LOGGER)
    if not any(isinstance(each, ClientFaultFilter) for each in logger.filters):
        logger.addFilter(ClientFaultFilter())
