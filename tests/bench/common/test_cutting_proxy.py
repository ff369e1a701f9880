"""The cutting proxy against a tiny TCP target of the test's own: what each side receives,
and how each sees the connection end, for each kind of cut."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio
import pytest
from anyio import BrokenResourceError, EndOfStream
from anyio.abc import SocketAttribute, SocketStream

from bench.common.cutting_proxy import (
    Cut,
    CuttingProxy,
    cut_for,
    cutting_proxy,
    random_cuts,
    within_limit,
)
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio

End = Literal["eof", "reset"]
TEST_TIMEOUT_S = 5.0
PAYLOAD = bytes(range(256)) * 40  # 10240 bytes, each offset recognisable


@dataclass(slots=True)
class Peer:
    """What the target saw on one connection."""

    received: bytearray = field(default_factory=bytearray)
    sent: int = 0
    end: End | None = None
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass(slots=True)
class Target:
    """A TCP server that sends ``greeting`` on each connection, then echoes (``echo``) or
    just takes what comes, until EOF (then closes) or a reset."""

    greeting: bytes = b""
    echo: bool = False
    port: int = 0
    peers: list[Peer] = field(default_factory=list)
    received: anyio.Event = field(default_factory=anyio.Event)  # set at each receive

    async def handle(self, stream: SocketStream) -> None:
        peer = Peer()
        self.peers.append(peer)
        async with stream:
            try:
                if self.greeting:
                    await stream.send(self.greeting)
                    peer.sent += len(self.greeting)
                while True:
                    data = await stream.receive()
                    peer.received += data
                    if self.echo:
                        await stream.send(data)
                        peer.sent += len(data)
                    self.received.set()
                    self.received = anyio.Event()
            except EndOfStream:
                peer.end = "eof"
            except BrokenResourceError:
                peer.end = "reset"
            finally:
                peer.done.set()


@asynccontextmanager
async def serving(target: Target) -> AsyncIterator[Target]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tasks:
        target.port = listener.extra(SocketAttribute.local_port)
        tasks.start_soon(listener.serve, target.handle)
        yield target
        tasks.cancel_scope.cancel()


async def read_to_end(stream: SocketStream) -> tuple[bytes, End]:
    data = bytearray()
    while True:
        try:
            data += await stream.receive()
        except EndOfStream:
            return bytes(data), "eof"
        except BrokenResourceError:
            return bytes(data), "reset"


async def connect(proxy: CuttingProxy) -> SocketStream:
    return await anyio.connect_tcp("127.0.0.1", proxy.port)


@pytest.mark.parametrize(("how", "end"), [("reset", "reset"), ("close", "eof")])
async def test_an_up_cut_delivers_exactly_its_bytes_then_ends_both_sides(
    how: Literal["reset", "close"], end: End
) -> None:
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target()) as target,
            cutting_proxy(target.port, [Cut(up_bytes=1000, how=how)]) as proxy,
        ):
            async with await connect(proxy) as client:
                await client.send(PAYLOAD)  # one write, most likely one read: cut inside it
                assert await read_to_end(client) == (b"", end)
            await target.peers[0].done.wait()
            await proxy.connections[0].finished.wait()
    assert bytes(target.peers[0].received) == PAYLOAD[:1000]
    assert target.peers[0].end == end
    record = proxy.connections[0]
    assert (record.cut_by, record.how, record.up_bytes) == ("up_bytes", how, 1000)


@pytest.mark.parametrize(("how", "end"), [("reset", "reset"), ("close", "eof")])
async def test_a_down_cut_delivers_exactly_its_bytes_then_ends_both_sides(
    how: Literal["reset", "close"], end: End
) -> None:
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target(greeting=PAYLOAD)) as target,
            cutting_proxy(target.port, [Cut(down_bytes=1234, how=how)]) as proxy,
        ):
            async with await connect(proxy) as client:
                assert await read_to_end(client) == (PAYLOAD[:1234], end)
            await target.peers[0].done.wait()
            await proxy.connections[0].finished.wait()
    assert target.peers[0].end == end
    record = proxy.connections[0]
    assert (record.cut_by, record.how, record.down_bytes) == ("down_bytes", how, 1234)


async def test_an_up_cut_at_zero_cuts_before_anything_is_relayed() -> None:
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target(greeting=b"hello")) as target,
            cutting_proxy(target.port, [Cut(up_bytes=0)]) as proxy,
        ):
            async with await connect(proxy) as client:
                assert await read_to_end(client) == (b"", "reset")
            await target.peers[0].done.wait()
    assert (bytes(target.peers[0].received), target.peers[0].end) == (b"", "reset")


async def test_hold_down_keeps_the_servers_bytes_back_until_the_cut() -> None:
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target(echo=True)) as target,
            cutting_proxy(target.port, [Cut(up_bytes=10, hold_down=True)]) as proxy,
        ):
            async with await connect(proxy) as client:
                received = target.received
                await client.send(b"01234")
                await received.wait()  # echoed, and never relayed: the client would see it
                await client.send(b"56789-and-past-the-cut")
                assert await read_to_end(client) == (b"", "reset")
            await target.peers[0].done.wait()
    assert (bytes(target.peers[0].received), target.peers[0].sent) == (b"0123456789", 10)
    assert proxy.connections[0].down_bytes == 0


async def test_an_after_s_cut_ends_a_held_connection() -> None:
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target(greeting=b"results")) as target,
            cutting_proxy(target.port, [Cut(after_s=0.05, hold_down=True)]) as proxy,
        ):
            async with await connect(proxy) as client:
                await client.send(b"audio")
                assert await read_to_end(client) == (b"", "reset")
            await target.peers[0].done.wait()
    assert (bytes(target.peers[0].received), target.peers[0].end) == (b"audio", "reset")
    assert proxy.connections[0].cut_by == "after_s"


async def test_no_cut_relays_everything_both_ways_and_passes_a_half_close_on() -> None:
    data = PAYLOAD * 10  # 100 KiB: many reads and writes each way
    with within(TEST_TIMEOUT_S):
        async with (
            serving(Target(echo=True)) as target,
            cutting_proxy(target.port, [None]) as proxy,
        ):
            async with await connect(proxy) as client, anyio.create_task_group() as tasks:

                async def send_all() -> None:
                    for offset in range(0, len(data), 4096):
                        await client.send(data[offset : offset + 4096])
                    await client.send_eof()  # the target closes on EOF, after its echo

                tasks.start_soon(send_all)
                assert await read_to_end(client) == (data, "eof")
            await proxy.connections[0].finished.wait()
    assert (bytes(target.peers[0].received), target.peers[0].end) == (data, "eof")
    record = proxy.connections[0]
    assert (record.cut, record.up_bytes, record.down_bytes) == (False, len(data), len(data))


async def test_a_client_reset_is_passed_on_to_the_server() -> None:
    with within(TEST_TIMEOUT_S):
        async with serving(Target()) as target, cutting_proxy(target.port) as proxy:
            client = await connect(proxy)
            received = target.received
            await client.send(b"x")
            await received.wait()
            client.extra(SocketAttribute.raw_socket).setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0"
            )
            await client.aclose()
            await target.peers[0].done.wait()
    assert target.peers[0].end == "reset"
    assert not proxy.connections[0].cut


async def test_a_refused_target_resets_the_client() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = unused.getsockname()[1]
        with within(TEST_TIMEOUT_S):
            async with cutting_proxy(port) as proxy, await connect(proxy) as client:
                assert await read_to_end(client) == (b"", "reset")
    assert proxy.connections[0].target_refused


async def test_random_cuts_cut_each_connection_where_drawn_then_let_the_rest_through() -> None:
    plan = random_cuts(11, 3, (1, len(PAYLOAD) - 1))
    with within(TEST_TIMEOUT_S):
        async with serving(Target()) as target, cutting_proxy(target.port, plan) as proxy:
            for _ in range(4):
                async with await connect(proxy) as client:
                    await client.send(PAYLOAD)
                    await client.send_eof()
                    await read_to_end(client)
                await target.peers[-1].done.wait()
    expected = [cut.up_bytes for cut in plan] + [len(PAYLOAD)]
    assert [len(peer.received) for peer in target.peers] == expected
    assert [bytes(peer.received) == PAYLOAD[: len(peer.received)] for peer in target.peers] == [
        True
    ] * 4
    assert [record.cut for record in proxy.connections] == [True, True, True, False]


def test_random_cuts_are_reproducible_from_their_seed() -> None:
    plan = random_cuts("session-3", 20, (200, 5000), down_range=(0, 100), how="either")
    assert plan == random_cuts("session-3", 20, (200, 5000), down_range=(0, 100), how="either")
    assert plan != random_cuts("session-4", 20, (200, 5000), down_range=(0, 100), how="either")
    assert len(plan) == 20
    assert all(cut.up_bytes is not None and 200 <= cut.up_bytes <= 5000 for cut in plan)
    assert all(cut.down_bytes is not None and 0 <= cut.down_bytes <= 100 for cut in plan)
    assert {cut.how for cut in plan} == {"reset", "close"}
    assert cut_for(plan, 19) == plan[19]
    assert cut_for(plan, 20) is None


def test_a_plan_may_be_a_function_of_the_connections_index() -> None:
    def every_other(index: int) -> Cut | None:
        return Cut(up_bytes=index) if index % 2 == 0 else None

    assert [cut_for(every_other, index) for index in range(3)] == [
        Cut(up_bytes=0),
        None,
        Cut(up_bytes=2),
    ]


def test_within_limit_splits_a_read_at_the_cut() -> None:
    assert within_limit(b"abcdef", 0, None) == b"abcdef"
    assert within_limit(b"abcdef", 2, 5) == b"abc"
    assert within_limit(b"abcdef", 5, 5) == b""
    assert within_limit(b"ab", 0, 5) == b"ab"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Cut(),
        lambda: Cut(up_bytes=-1),
        lambda: Cut(down_bytes=10, hold_down=True),
        lambda: Cut(after_s=1, how="abort"),  # type: ignore[arg-type]
        lambda: random_cuts(1, 2, (5, 4)),
    ],
)
def test_plans_that_cannot_mean_anything_are_refused(make: object) -> None:
    assert callable(make)
    with pytest.raises(ValueError):  # noqa: PT011 (each case has its own message)
        make()
