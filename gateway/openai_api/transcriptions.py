"""Placeholder until the file endpoint lands (being written now)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.metrics import GatewayMetrics
from gateway.serving import Serving


async def create_transcription(
    serving: Serving | None, request: Request, metrics: GatewayMetrics
) -> Response:
    return JSONResponse({"error": {"message": "not yet", "type": "server_error"}}, 501)


async def list_models(serving: Serving | None, request: Request) -> Response:
    return JSONResponse({"object": "list", "data": []})
