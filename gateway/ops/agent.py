"""HAProxy's agent check (``agent-check`` on a server line): a TCP port that answers each
connection with one line saying how much this replica should get, then closes.

The reply is sans I/O (``agent_reply``): ``ready up N%``, where N is the share of
``ASR_MAX_SESSIONS`` still free, so that HAProxy weights replicas by their headroom (a
full one gets weight 0: no new sessions, the live ones untouched); ``drain`` once the
replica is leaving (``ASR_DRAIN_DELAY`` then the drain: weight 0, live sessions finish);
``down`` while a pool has no ready worker. A weight is applied at HAProxy's next agent
poll, with no ``fall`` count: faster than an HTTP check's 503, which takes ``fall``
failed checks to take a server out (BENCHMARKS.md measures both).

The port listens where the server does (``python -m gateway --host``) unless
``ASR_AGENT_HOST`` says otherwise; bare uvicorn does not tell its app its host, so there it
is ``DEFAULT_HOST``, the loopback, like uvicorn's own default. A failed accept (the
descriptor table full) is retried, and logged at a bounded rate (``gateway.ops.fault_log``):
HAProxy's probe waits in the kernel's backlog meanwhile and is answered once it is over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import SocketListener, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

from gateway.ops.fault_log import RepeatedFault

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
SEND_TIMEOUT_S = 1.0  # a prober that does not read is dropped
# After a failed accept (the descriptor table full: EMFILE, ENFILE; ENOBUFS): the probe
# waits in the kernel's backlog meanwhile, and is answered within this once the fault ends.
ACCEPT_RETRY_S = 0.1


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


async def serve_agent(
    listener: MultiListener[SocketStream], capacity: Callable[[], Capacity]
) -> None:
    """Answer agent checks on each of ``listener``'s sockets until cancelled. A failed
    accept is retried (``ACCEPT_RETRY_S``), never the end of serving; the listener stays
    the caller's to close."""
    async with anyio.create_task_group() as group:
        for each in listener.listeners:
            assert isinstance(each, SocketListener)  # what create_tcp_listener makes
            group.start_soon(_accept, each, capacity, group)


async def _accept(
    listener: SocketListener, capacity: Callable[[], Capacity], answers: TaskGroup
) -> None:
    fault = RepeatedFault("agent port: accept", "agent port: accepting again")
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            line = fault.failed(anyio.current_time(), str(exc), ACCEPT_RETRY_S)
            if line is not None:
                logger.warning(line)
            await anyio.sleep(ACCEPT_RETRY_S)
            continue
        line = fault.succeeded(anyio.current_time())
        if line is not None:
            logger.info(line)
        answers.start_soon(_answer, stream, capacity)


async def _answer(stream: SocketStream, capacity: Callable[[], Capacity]) -> None:
    async with stream:
        with anyio.move_on_after(SEND_TIMEOUT_S):
            try:
                await stream.send(agent_reply(capacity()).encode("ascii"))
            except (anyio.BrokenResourceError, OSError):
                pass  # the prober left first
