"""How the server ends a WebSocket it has accepted: the acknowledgements still owed, our
error frame, the close frame with the error's code, all within a grace period."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.funasr.results import Label, end_acknowledgement, error_message
from gateway.session import transport
from shared.errors import GatewayError

CLOSE_GRACE_S = 5.0  # to send the error frame and the close frame to a slow client
MAX_REASON_BYTES = 123  # a close frame's reason must fit in a control frame


def close_reason(message: str) -> str:
    """``message`` cut to what a close frame can carry, on a character boundary."""
    return message.encode("utf-8")[:MAX_REASON_BYTES].decode("utf-8", "ignore")


async def close_with_error(
    websocket: WebSocket,
    error: GatewayError,
    *,
    mode: str = "2pass",
    wav_name: str = "",
    owed_acknowledgements: Sequence[Label] = (),
    pending_frames: Sequence[str] = (),
) -> None:
    """Send our error frame, then close with the error's code; a gone client is fine.

    ``owed_acknowledgements``: ends the client sent with ``is_end`` and still waits to have
    acknowledged; each is answered first, failed (FunASR's Python client then raises the
    error at once, rather than waiting out its timeout). ``pending_frames``: results the
    session had for the client and not yet sent; they go first, since they were decoded."""
    code = error.close_code
    with anyio.move_on_after(CLOSE_GRACE_S, shield=True) as grace:
        try:
            for frame in pending_frames:
                await websocket.send_text(frame)
            for owed in owed_acknowledgements:
                await websocket.send_text(
                    end_acknowledgement(mode=owed.mode, wav_name=owed.wav_name, error=error.message)
                )
            await websocket.send_text(error_message(code, error.message, mode, wav_name))
            await websocket.close(code, close_reason(error.message))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client left first, or the connection is already closed
        await transport.drained(websocket)
    if grace.cancelled_caught:
        # A client that reads nothing: our frames would wait behind its unread results
        # for as long as TCP keeps the connection, and the server with them.
        transport.abort(websocket)
