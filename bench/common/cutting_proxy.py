"""A TCP proxy for tests that cuts its connections where a plan says: after so many bytes
either way (in the middle of a WebSocket frame if need be), or after so long, with a TCP
reset or a plain FIN, so a resumable session can be dropped at chosen points, many times.

    async with cutting_proxy(server.port, [Cut(up_bytes=5000), None]) as proxy:
        ...  # connect to proxy.url; the first connection is cut, the second is not
        assert proxy.connections[0].cut_by == "up_bytes"

The proxy listens on 127.0.0.1 on a free port and opens one connection to the target per
connection it accepts. Bytes are relayed as they come, nothing is rewritten.
"""

from __future__ import annotations

import fcntl
import random
import socket
import struct
import termios
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import anyio
import anyio.abc
from anyio import BrokenResourceError, EndOfStream
from anyio.abc import SocketAttribute, SocketStream

How: TypeAlias = Literal["reset", "close"]
Trigger: TypeAlias = Literal["up_bytes", "down_bytes", "after_s"]

# How long a cut waits for the bytes it already relayed to leave the kernel: a reset
# discards whatever is still queued, and a peer that has stopped reading would never take it.
SEND_DRAIN_S = 1.0
# How long a "close" cut reads (and drops) what the peers still send after its FIN: a close
# with unread bytes in the kernel's receive queue would go out as a reset instead.
CLOSE_GRACE_S = 1.0
_SEND_POLL_S = 0.001
_RECEIVE_MAX = 65536


@dataclass(frozen=True, slots=True)
class Cut:
    """How one connection ends: cut as soon as any of ``up_bytes`` (client to server bytes
    relayed), ``down_bytes`` (server to client) or ``after_s`` (seconds since the accept) is
    reached. Exactly that many bytes are relayed, however the reads fell; what comes after
    is dropped. ``hold_down``: relay nothing from the server at all (its data stays unread,
    so it backs up into the server) until the cut; with ``hold_down_after_up``, only once
    the client has sent that many bytes (past the handshake, and whatever the client waits
    for before it sends). ``how``: "reset" sends a TCP RST both ways (SO_LINGER 0), "close"
    a FIN.
    """

    up_bytes: int | None = None
    down_bytes: int | None = None
    after_s: float | None = None
    hold_down: bool = False
    how: How = "reset"
    hold_down_after_up: int | None = None

    def __post_init__(self) -> None:
        if self.up_bytes is None and self.down_bytes is None and self.after_s is None:
            raise ValueError(
                "a Cut needs up_bytes, down_bytes or after_s "
                "(None in the plan: never cut; up_bytes=0: cut at once)"
            )
        for name, value in (
            ("up_bytes", self.up_bytes),
            ("down_bytes", self.down_bytes),
            ("after_s", self.after_s),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, not {value}")
        if self.hold_down and self.up_bytes is None and self.after_s is None:
            # Nothing flows down while held, so down_bytes alone would never be reached.
            raise ValueError("hold_down needs up_bytes or after_s to end the hold")
        if self.how not in ("reset", "close"):
            raise ValueError(f'how must be "reset" or "close", not {self.how!r}')


# For the N-th accepted connection (0-based): a sequence (connections past its end are never
# cut) or a function of N. None: relay until either side closes.
Plan: TypeAlias = Sequence[Cut | None] | Callable[[int], Cut | None]


def cut_for(plan: Plan, index: int) -> Cut | None:
    """The plan's cut for connection ``index`` (0-based)."""
    if callable(plan):
        return plan(index)
    return plan[index] if index < len(plan) else None


def random_cuts(
    seed: int | str,
    count: int,
    up_range: tuple[int, int],
    *,
    down_range: tuple[int, int] | None = None,
    how: How | Literal["either"] = "reset",
) -> tuple[Cut, ...]:
    """A plan that cuts the first ``count`` connections, each after a number of client to
    server bytes drawn from ``up_range`` (inclusive; the same seed draws the same plan) and
    lets later ones through. ``down_range``: each cut also gets a server to client limit,
    whichever is reached first. ``how="either"``: reset or close, drawn per cut.

    A WebSocket handshake is a few hundred bytes up: a range above it cuts inside the session.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    for name, bounds in (("up_range", up_range), ("down_range", down_range)):
        if bounds is not None and not 0 <= bounds[0] <= bounds[1]:
            raise ValueError(f"{name} must be (lo, hi) with 0 <= lo <= hi, not {bounds}")
    rng = random.Random(seed)
    cuts = []
    for _ in range(count):
        up_bytes = rng.randint(*up_range)
        down_bytes = None if down_range is None else rng.randint(*down_range)
        cut_how: How = how if how != "either" else rng.choice(("reset", "close"))
        cuts.append(Cut(up_bytes=up_bytes, down_bytes=down_bytes, how=cut_how))
    return tuple(cuts)


def within_limit(data: bytes, relayed: int, limit: int | None) -> bytes:
    """The part of ``data`` that may still go out when ``relayed`` bytes have gone already."""
    if limit is None:
        return data
    return data[: max(limit - relayed, 0)]


@dataclass(slots=True)
class ConnectionRecord:
    """One accepted connection, updated while it lives. The counts are bytes the proxy
    handed to the kernel; for the direction a cut was counted in, exactly the limit."""

    index: int
    plan: Cut | None
    up_bytes: int = 0
    down_bytes: int = 0
    cut_by: Trigger | None = None  # None: not cut (a peer ended it, or the proxy closed)
    how: How | None = None  # how it was cut
    target_refused: bool = False  # the target refused the proxy's connection: client reset
    finished: anyio.Event = field(default_factory=anyio.Event)  # both sockets closed
    cut_at: float | None = None  # anyio.current_time() of the cut, for timing a recovery

    @property
    def cut(self) -> bool:
        return self.cut_by is not None


class CuttingProxy:
    """What ``cutting_proxy`` yields: where to connect, and what became of each connection."""

    def __init__(self, port: int, target_host: str, target_port: int, plan: Plan) -> None:
        self.port = port
        self.target_host = target_host
        self.target_port = target_port
        self.plan = plan
        self.connections: list[ConnectionRecord] = []

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    async def _serve(self, client: SocketStream) -> None:
        record = ConnectionRecord(len(self.connections), cut_for(self.plan, len(self.connections)))
        self.connections.append(record)
        try:
            async with client:
                try:
                    server = await anyio.connect_tcp(self.target_host, self.target_port)
                except OSError:
                    record.target_refused = True
                    _reset_on_close(client)
                    return
                async with server:
                    await _Relay(record, client, server).run()
        finally:
            record.finished.set()


@asynccontextmanager
async def cutting_proxy(
    target_port: int, plan: Plan = (), *, target_host: str = "127.0.0.1"
) -> AsyncIterator[CuttingProxy]:
    """A proxy on 127.0.0.1 (a free port) in front of ``target_host:target_port``, cutting
    connections as ``plan`` says. On leaving, every connection still open is closed."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tasks:
        port = listener.extra(SocketAttribute.local_port)
        proxy = CuttingProxy(port, target_host, target_port, plan)
        tasks.start_soon(listener.serve, proxy._serve)
        try:
            yield proxy
        finally:
            tasks.cancel_scope.cancel()


class _Relay:
    """Both directions of one connection, until a cut, a peer's end, or the proxy's."""

    def __init__(self, record: ConnectionRecord, client: SocketStream, server: SocketStream):
        self.record = record
        self.client = client
        self.server = server
        self.scope = anyio.CancelScope()
        self.open_directions = 2  # a held-down direction stays open until the cut
        self.peer_reset = False

    async def run(self) -> None:
        cut = self.record.plan
        with self.scope:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._pump, "up", None if cut is None else cut.up_bytes)
                if cut is None or not cut.hold_down or cut.hold_down_after_up is not None:
                    tasks.start_soon(self._pump, "down", None if cut is None else cut.down_bytes)
                if cut is not None and cut.after_s is not None:
                    tasks.start_soon(self._cut_after, cut.after_s)
        with anyio.CancelScope(shield=True):
            if self.record.how == "reset" or self.peer_reset:
                if self.record.how == "reset":
                    # Only what was relayed before the cut; a peer's reset loses it anyway.
                    await _wait_sent(self.client)
                    await _wait_sent(self.server)
                _reset_on_close(self.client)
                _reset_on_close(self.server)
            elif self.record.how == "close":
                await _close_gracefully(self.client, self.server)
            await self.client.aclose()
            await self.server.aclose()

    def _holding(self) -> bool:
        """Whether the server's data is held back now (``Cut.hold_down_after_up``)."""
        cut = self.record.plan
        if cut is None or not cut.hold_down:
            return False
        return cut.hold_down_after_up is None or self.record.up_bytes >= cut.hold_down_after_up

    def _trigger(self, trigger: Trigger) -> None:
        if self.record.cut_by is None:
            assert self.record.plan is not None
            self.record.cut_by = trigger
            self.record.how = self.record.plan.how
            self.record.cut_at = anyio.current_time()
            self.scope.cancel()

    async def _cut_after(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        self._trigger("after_s")

    async def _pump(self, direction: Literal["up", "down"], limit: int | None) -> None:
        source, sink = (
            (self.client, self.server) if direction == "up" else (self.server, self.client)
        )
        relayed = 0
        try:
            while True:
                if limit is not None and relayed >= limit:
                    self._trigger("up_bytes" if direction == "up" else "down_bytes")
                    return
                try:
                    data = await source.receive(_RECEIVE_MAX)
                except EndOfStream:
                    await sink.send_eof()  # a half-close goes on through, as TCP's would
                    break
                chunk = within_limit(data, relayed, limit)
                if direction == "down" and self._holding():
                    await anyio.sleep_forever()  # until the cut: nothing more goes down
                await sink.send(chunk)
                relayed += len(chunk)
                if direction == "up":
                    self.record.up_bytes = relayed
                else:
                    self.record.down_bytes = relayed
        except BrokenResourceError:
            # A peer reset its side (or vanished): the other peer gets a reset too.
            self.peer_reset = True
            self.scope.cancel()
            return
        self.open_directions -= 1
        if self.open_directions == 0:
            self.scope.cancel()  # both sides said EOF: nothing left to relay or wait for


def _reset_on_close(stream: SocketStream) -> None:
    """SO_LINGER 0: the socket's close sends a RST and drops whatever is still queued."""
    try:
        stream.extra(SocketAttribute.raw_socket).setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
    except OSError:
        pass  # gone already: there is nothing left to reset


def _unsent(sock: socket.socket) -> int:
    """Bytes in the socket's send queue the peer has not acknowledged (Linux's SIOCOUTQ)."""
    try:
        queued: int = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except OSError:
        return 0
    return queued


async def _wait_sent(stream: SocketStream) -> None:
    """Until what the proxy relayed has reached the peer, for at most ``SEND_DRAIN_S``."""
    # Polled: the kernel tells nobody when its send queue empties.
    sock = stream.extra(SocketAttribute.raw_socket)
    for _ in range(round(SEND_DRAIN_S / _SEND_POLL_S)):
        if _unsent(sock) == 0:
            return
        await anyio.sleep(_SEND_POLL_S)


async def _close_gracefully(*streams: SocketStream) -> None:
    """A FIN to each peer, then drop what they still send until they close too (or
    ``CLOSE_GRACE_S`` passes), so that the close goes out as a FIN and not as a reset."""

    async def drain(stream: SocketStream) -> None:
        try:
            while True:
                await stream.receive(_RECEIVE_MAX)
        except (EndOfStream, BrokenResourceError):
            pass

    for stream in streams:
        await stream.send_eof()
    with anyio.move_on_after(CLOSE_GRACE_S):
        async with anyio.create_task_group() as tasks:
            for stream in streams:
                tasks.start_soon(drain, stream)
