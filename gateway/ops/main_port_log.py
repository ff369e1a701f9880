"""The main port's failed accepts under asyncio's loop (``--loop asyncio``), at a bounded rate.

When the descriptor table is full (EMFILE, ENFILE; or ENOBUFS, ENOMEM), asyncio's accept
loop reports every failed ``accept()`` to the loop's exception handler, with a traceback,
and tries again up to the listen backlog times (uvicorn's is 2048) before pausing a second:
about 5,000 reports a second, 17 log lines each, for as long as the table stays full
(measured: RELIABILITY.md, "Operating-system limits"). Serving survives it; the log, its
disk and its reader may not. ``bounded_accept_reports`` routes those reports through a
``RepeatedFault`` while the app serves, and every other report to the handler that was
there.

uvloop (uvicorn's default where it is installed) never reports these: libuv accepts the
connection into a descriptor it keeps in reserve and closes it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.ops.fault_log import RepeatedFault

logger = logging.getLogger(__name__)

# asyncio's message (selector_events._accept_connection), exactly.
OUT_OF_RESOURCES = "socket.accept() out of system resource"
RETRY_S = 1.0  # asyncio's constants.ACCEPT_RETRY_DELAY
# asyncio says nothing when an accept succeeds again; no report for this long says so.
QUIET_S = 2 * RETRY_S


@contextmanager
def bounded_accept_reports() -> Iterator[None]:
    """Call in the running loop; the handler that was there is put back on leaving."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    fault = RepeatedFault("main port: accept", "main port: accepting again")
    over: asyncio.TimerHandle | None = None

    def ended() -> None:
        line = fault.succeeded(loop.time() - QUIET_S)
        if line is not None:
            logger.info(line)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        nonlocal over
        if context.get("message") != OUT_OF_RESOURCES:
            if previous is None:
                loop.default_exception_handler(context)
            else:
                previous(loop, context)
            return
        line = fault.failed(loop.time(), str(context.get("exception")), RETRY_S)
        if line is not None:
            logger.warning(line)
        if over is not None:
            over.cancel()
        over = loop.call_later(QUIET_S, ended)

    loop.set_exception_handler(handle)
    try:
        yield
    finally:
        if over is not None:
            over.cancel()
        if loop.get_exception_handler() is handle:
            loop.set_exception_handler(previous)
