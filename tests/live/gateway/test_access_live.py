"""Access control against a real uvicorn: keys, origins and the per-client cap, with the
HTTP answers a real WebSocket client sees."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin, Subprotocol

from bench.common.gateway import serve
from gateway.client import ServerError, transcribe
from tests.helpers.checksums import check_online
from tests.helpers.timing import within
from tests.helpers.uvicorn_session import expect_close

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENV = {
    "ASR_MODEL": "checksum",
    "ASR_DEVICES": "cpu",
    "ASR_API_KEYS": "key-a,key-b",
    "ASR_ALLOWED_ORIGINS": "https://app.example",
    "ASR_MAX_SESSIONS_PER_CLIENT": "1",
}


async def test_keys_origins_and_the_client_cap(tmp_path: Path) -> None:
    pcm = random.Random(1).randbytes(19200 * 2)
    async with serve(ENV, tmp_path / "server.log") as server:
        with within(30):
            transcript = await transcribe(server.url, pcm, realtime=False, api_key="key-b")
            check_online(transcript.messages, pcm, 19200)

            with pytest.raises(ServerError, match="API key is required") as missing:
                await transcribe(server.url, pcm, realtime=False)
            assert missing.value.code == 401
            with pytest.raises(ServerError, match="not valid") as wrong:
                await transcribe(server.url, pcm, realtime=False, api_key="key-c")
            assert wrong.value.code == 401

            # A browser: the key in the query string, the page's origin checked.
            browser = connect(
                server.url + "?token=key-a",
                subprotocols=[Subprotocol("binary")],
                origin=Origin("https://evil.example"),
                proxy=None,
            )
            with pytest.raises(InvalidStatus) as forbidden:
                async with browser:
                    pass
            assert forbidden.value.response.status_code == 403
            assert b"not allowed" in (forbidden.value.response.body or b"")

            # One session per address: a second one from 127.0.0.1 is closed with 1008.
            first = connect(server.url + "?token=key-a", proxy=None)
            second = connect(server.url + "?token=key-a", proxy=None)
            async with first, second as refused:
                error = await expect_close(refused, 1008)
                assert "ASR_MAX_SESSIONS_PER_CLIENT" in error["message"]
