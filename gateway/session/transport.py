"""The connection under an ASGI WebSocket, where the server lets us reach it.

ASGI gives an app no way to abort a connection, or to know whether what it sent has left
the process. Both matter for a client that reads nothing: our close frame then waits
behind unread results in the server's write buffer, and a server that closes the
transport waits for that buffer to drain, which it never does (TCP keeps probing a zero
window for as long as the peer answers). uvicorn's protocol objects (every ``--ws``
implementation) are the owners of the ``receive`` callable they hand the app and hold the
asyncio (or uvloop) transport; from there we can watch the write buffer and abort. Under
another server, or Starlette's TestClient, there is no transport to find: nothing is done.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import anyio
from starlette.websockets import WebSocket

FLUSH_POLL_S = 0.02  # how often to look at the write buffer while waiting for it to drain


@runtime_checkable
class Transport(Protocol):
    """What we use of an asyncio / uvloop transport."""

    def abort(self) -> None: ...

    def get_write_buffer_size(self) -> int: ...


def transport_of(websocket: WebSocket) -> Transport | None:
    """The transport under ``websocket``, if the server lets us reach it (uvicorn does)."""
    receive = getattr(websocket, "_receive", None)
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    return transport if isinstance(transport, Transport) else None


async def drained(websocket: WebSocket) -> None:
    """Return once what was sent on ``websocket`` has left the server's write buffer (for
    the kernel to deliver); at once if its transport cannot be reached."""
    transport = transport_of(websocket)
    # Polled: a transport tells its protocol only of the high and low water marks.
    while transport is not None and transport.get_write_buffer_size() > 0:  # noqa: ASYNC110
        await anyio.sleep(FLUSH_POLL_S)


async def let_go(websocket: WebSocket, grace: float) -> None:
    """Give what was sent ``grace`` seconds to leave the server's write buffer, then abort
    the connection if it has not: the server can then close it (a client that reads
    nothing would keep it open for as long as TCP does)."""
    with anyio.move_on_after(grace, shield=True) as scope:
        await drained(websocket)
    if scope.cancelled_caught:
        abort(websocket)


def abort(websocket: WebSocket) -> bool:
    """Drop the connection now, unsent data and all (the peer gets a TCP reset); whether
    there was a transport to abort."""
    transport = transport_of(websocket)
    if transport is None:
        return False
    transport.abort()
    return True


class ClosedUnderUs(Exception):
    """The server closed the connection itself (a protocol error of the client's, or no
    pong within its ``--ws-ping-timeout``) and sends nothing more."""


class ConnectionLost(Exception):
    """The connection is gone (uvicorn's ``ClientDisconnected``)."""


async def send_within(websocket: WebSocket, text: str, timeout: float) -> bool:
    """Send ``text``; False if it could not be sent within ``timeout`` seconds (a client
    that reads nothing). ``ClosedUnderUs`` or ``ConnectionLost`` when there is no sending."""
    try:
        with anyio.move_on_after(timeout) as scope:
            await websocket.send_text(text)
    except RuntimeError:
        raise ClosedUnderUs from None
    except OSError:
        raise ConnectionLost from None
    return not scope.cancelled_caught
