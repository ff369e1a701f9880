from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import anyio
import pytest

from gateway.ops.signals import HANDLED_SIGNALS, SignalDrain
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio


class FakeServer:
    """Stands in for uvicorn's Server: ``handle_exit`` is its signal handler."""

    def __init__(self) -> None:
        self.should_exit = False
        self.signals: list[int] = []

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        self.should_exit = True


@pytest.fixture
def server() -> Iterator[FakeServer]:
    server = FakeServer()
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in HANDLED_SIGNALS}
    try:
        yield server
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def test_the_first_signal_only_wakes_the_drain(server: FakeServer) -> None:
    with SignalDrain() as drain:
        assert drain.installed
        signal.raise_signal(signal.SIGTERM)
        with within(5):
            await drain.received.wait()
        assert drain.signal == signal.SIGTERM
        assert not server.should_exit
        drain.hand_over()
        # The server goes on with its shutdown, but has no signal to re-raise at its end.
        assert server.should_exit
        assert server.signals == []
    assert signal.getsignal(signal.SIGTERM) == server.handle_exit


async def test_a_second_signal_goes_straight_to_the_server(server: FakeServer) -> None:
    with SignalDrain():
        signal.raise_signal(signal.SIGINT)
        assert server.signals == []
        signal.raise_signal(signal.SIGINT)
        assert server.signals == [signal.SIGINT]


async def test_a_plain_function_handler_is_called_on_hand_over() -> None:
    calls: list[int] = []

    def handler(sig: int, frame: FrameType | None) -> None:
        calls.append(sig)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with SignalDrain() as drain:
            signal.raise_signal(signal.SIGTERM)
            assert calls == []
            drain.hand_over()
            assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_default_handlers_are_left_alone() -> None:
    # Python's own defaults, set here: a suite started in the background (nohup, &)
    # inherits SIGINT ignored.
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with SignalDrain() as drain:
            assert not drain.installed
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            drain.hand_over()  # no signal came: nothing to do
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


async def test_nothing_is_wrapped_off_the_main_thread(server: FakeServer) -> None:
    drain = SignalDrain()
    await anyio.to_thread.run_sync(drain.install)
    assert not drain.installed
    assert signal.getsignal(signal.SIGTERM) == server.handle_exit
