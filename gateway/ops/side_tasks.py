"""Tasks beside serving (the agent check, the drain on a signal): a fault in one is its own.

They run in the lifespan's task group, where an exception would end serving: every
session closed with 1012, the pools stopped, while uvicorn goes on answering HTTP. So each
runs under ``keep_running``: an exception is logged with its traceback, and the task
starts again after a pause that doubles up to ``MOST_PAUSE_S`` (a task that fails at once,
every time, logs one traceback a minute); the pause starts over once the task has run that
long without failing. Cancellation, the lifespan's end, passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

logger = logging.getLogger(__name__)

FIRST_PAUSE_S = 1.0
MOST_PAUSE_S = 60.0


async def keep_running(
    name: str,
    task: Callable[[], Awaitable[None]],
    *,
    first_pause_s: float = FIRST_PAUSE_S,
    most_pause_s: float = MOST_PAUSE_S,
) -> None:
    """Run ``task`` until it returns, again after each exception it raises."""
    pause = first_pause_s
    while True:
        started = anyio.current_time()
        try:
            await task()
            return
        except Exception:
            if anyio.current_time() - started >= most_pause_s:
                pause = first_pause_s
            logger.exception("%s failed; starting it again in %g s (serving goes on)", name, pause)
        await anyio.sleep(pause)
        pause = min(2 * pause, most_pause_s)
