"""HAProxy's agent check (``agent-check`` on a server line): a TCP port that answers each
connection with one line saying how much this replica should get, then closes.

The reply is sans I/O (``agent_reply``): ``ready up N%``, where N is the share of
``ASR_MAX_SESSIONS`` still free, so that HAProxy weights replicas by their headroom (a
full one gets weight 0: no new sessions, the live ones untouched); ``drain`` once the
replica is leaving (``ASR_DRAIN_DELAY`` then the drain: weight 0, live sessions finish);
``down`` while a pool has no ready worker. A weight is applied at HAProxy's next agent
poll, with no ``fall`` count: faster than an HTTP check's 503, which takes ``fall``
failed checks to take a server out (BENCHMARKS.md measures both).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import Listener, SocketStream

logger = logging.getLogger(__name__)

SEND_TIMEOUT_S = 1.0  # a prober that does not read is dropped


@dataclass(frozen=True, slots=True)
class Capacity:
    ready: bool  # every pool has a ready worker
    draining: bool  # announced or draining
    active: int  # places taken (parked sessions too)
    places: int  # ASR_MAX_SESSIONS


def agent_reply(capacity: Capacity) -> str:
    if capacity.draining:
        return "drain\n"
    if not capacity.ready:
        return "down\n"
    free = max(0, capacity.places - capacity.active)
    # Rounded up: one free place is never weight 0, which would read as full.
    percent = -(-100 * free // capacity.places)
    return f"ready up {percent}%\n"


async def serve_agent(listener: Listener[SocketStream], capacity: Callable[[], Capacity]) -> None:
    """Answer agent checks on ``listener`` (every interface: HAProxy is usually elsewhere)."""

    async def answer(stream: SocketStream) -> None:
        async with stream:
            with anyio.move_on_after(SEND_TIMEOUT_S):
                try:
                    await stream.send(agent_reply(capacity()).encode("ascii"))
                except (anyio.BrokenResourceError, OSError):
                    pass  # the prober left first

    async with listener:
        await listener.serve(answer)
