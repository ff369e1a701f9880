"""The fallback drain under bare ``uvicorn gateway.app:app``: hold back uvicorn's SIGTERM
and SIGINT handling until live sessions have drained.

``python -m gateway`` does not need this: its server overrides uvicorn's ``handle_exit``
and drains first (``gateway.ops.server``). Bare uvicorn gives an ASGI app no say in its
shutdown; it installs its handlers with ``signal.signal`` before the app's lifespan starts,
and on a signal closes every WebSocket with 1012 at once. So the lifespan wraps its
handlers: the first signal only wakes the app's drain (see ``gateway.app``), which calls
``hand_over`` once the live sessions are done or the drain timeout has passed; uvicorn then
shuts down as usual. A second signal goes straight to uvicorn's handler (a second Ctrl-C
forces the exit, as uvicorn does). This relies on how uvicorn installs, and re-raises, its
signals (``hand_over`` sets its ``should_exit``), which uvicorn does not document.

Signals can only be handled in the main thread: elsewhere (Starlette's ``TestClient``, a
server run from a thread) ``install`` does nothing and the server's handling is untouched.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

import anyio

logger = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

SignalHandler = Callable[[int, FrameType | None], object]


class SignalDrain:
    """Wraps the server's handlers of SIGINT and SIGTERM while the app is serving."""

    def __init__(self) -> None:
        self.received = anyio.Event()
        self.signal: int | None = None
        self._originals: dict[int, SignalHandler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def installed(self) -> bool:
        return bool(self._originals)

    def install(self) -> None:
        """Wrap the server's handlers; call on the event loop, in the lifespan startup."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = asyncio.get_running_loop()
        for sig in HANDLED_SIGNALS:
            current = signal.getsignal(sig)
            # Only a server's own Python handler is ours to wrap: SIG_DFL and SIG_IGN are
            # not callable, and Python's default SIGINT handler would raise KeyboardInterrupt
            # in whatever code the event loop happens to run.
            if not callable(current) or current is signal.default_int_handler:
                continue
            self._originals[sig] = current
            signal.signal(sig, self._handle)
        if not self._originals:
            logger.info("no server signal handler to wrap: shutdown will not drain sessions")

    def restore(self) -> None:
        """Put the server's handlers back; safe to call twice."""
        originals, self._originals = self._originals, {}
        for sig, original in originals.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, original)

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        if self.signal is not None:
            # A second signal: stop waiting, as the server would on its first.
            self._call_original(sig, frame)
            return
        self.signal = sig
        assert self._loop is not None
        # A signal handler runs between two bytecodes of whatever the main thread was
        # doing, possibly inside the event loop itself: only schedule, never act here.
        self._loop.call_soon_threadsafe(self.received.set)

    def hand_over(self) -> None:
        """Let the server proceed with its shutdown, as if the signal arrived just now."""
        sig = self.signal
        if sig is None:
            return
        original = self._originals.get(sig)
        server = getattr(original, "__self__", None)
        if server is not None and hasattr(server, "should_exit"):
            # uvicorn's Server. Its handler would also record the signal and re-raise it
            # once shut down, so the process would die of SIGTERM (exit 143); after a
            # drain the shutdown is a clean one, and the process exits 0.
            server.should_exit = True
        elif original is not None:
            original(sig, None)

    def _call_original(self, sig: int, frame: FrameType | None) -> None:
        original = self._originals.get(sig)
        if original is not None:
            original(sig, frame)

    def __enter__(self) -> SignalDrain:
        self.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()
