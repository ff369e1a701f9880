"""The event loop the live tests run the gateway under.

uvicorn's ``--loop auto`` (its default, the README's serve command) runs uvloop where it is
installed, and ``uvicorn[standard]`` installs it: uvloop is what users get. It behaves
differently from asyncio where the gateway meets the operating system: every descriptor it
polls is made non-blocking (a worker's results pipe among them), accepts past a full
descriptor table are dropped. So the live tests run the gateway under uvloop: a real
uvicorn by its default, the app in process by :class:`GatewayClient`, a pool by the
``anyio_backend`` of ``tests/live/conftest.py``. asyncio (``--loop asyncio``, and what a
gateway embedded in another asyncio program gets) is run by the fast lane, by the pool's
pipe tests (:data:`BOTH_LOOPS`), and by the gateways started with each ``--loop`` in turn
(:data:`UVICORN_LOOPS`: dropped connections, file uploads, a full descriptor table). Every
live test under both would double the live lane (about 6 more minutes here).
"""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp

USERS_LOOP: tuple[str, dict[str, Any]] = ("asyncio", {"use_uvloop": True})
BOTH_LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [pytest.param(USERS_LOOP, id="uvloop"), pytest.param("asyncio", id="asyncio")],
)


# uvicorn's --loop for the few gateways started under each loop in turn.
UVICORN_LOOPS = pytest.mark.parametrize("uvicorn_loop", ["uvloop", "asyncio"])


class GatewayClient(TestClient):
    """Starlette's ``TestClient`` with the app (and its worker pools) on uvloop."""

    def __init__(self, app: ASGIApp, **kwargs: Any) -> None:
        super().__init__(app, backend="asyncio", backend_options=USERS_LOOP[1], **kwargs)
