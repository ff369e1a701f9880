"""Placeholder until the realtime endpoint lands (being written now)."""

from __future__ import annotations

from starlette.websockets import WebSocket

from gateway.metrics import GatewayMetrics
from gateway.serving import Serving


async def serve_realtime(
    serving: Serving | None, websocket: WebSocket, metrics: GatewayMetrics
) -> None:
    await websocket.close(1011)
