"""A handshake header with a byte that is not ASCII, against a real uvicorn (``uvicorn
gateway.app:app``, its own choice of WebSocket protocol): websockets, under uvicorn,
fails on it before the app sees the request. The server's log holds one line for it, no
traceback, and the server goes on serving."""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from websockets.sync.client import connect

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import END, checksum, config
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CASES = [
    # The issue's: three chained tracebacks (about 50 lines) a handshake, and no answer.
    pytest.param("Sec-WebSocket-Protocol", b"real\xfftime", b"", id="subprotocol"),
    pytest.param("Sec-WebSocket-Extensions", b"permessage-deflate\xff", b"", id="extensions"),
    pytest.param("Sec-WebSocket-Version", b"13\xff", b"", id="version"),
    pytest.param("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ\xff=", b"HTTP/1.1 500", id="key"),
]


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    async with serve({"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"}, log) as server:
        yield server


def raw_handshake(port: int, header: str, value: bytes) -> bytes:
    """A WebSocket handshake with ``header: value`` (any bytes); what the server answers
    before it closes the connection."""
    headers = {
        "Host": f"127.0.0.1:{port}".encode(),
        "Upgrade": b"websocket",
        "Connection": b"Upgrade",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)),
        "Sec-WebSocket-Version": b"13",
        header: value,
    }
    request = b"GET / HTTP/1.1\r\n"
    request += b"".join(name.encode() + b": " + each + b"\r\n" for name, each in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request + b"\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def one_session(server: Gateway) -> str:
    """A whole FunASR session: its final text."""
    pcm = bytes(range(256)) * 100
    with connect(server.url, compression=None, proxy=None) as ws:
        ws.send(config())
        ws.send(pcm)
        ws.send(END)
        while not (result := json.loads(ws.recv(timeout=20))).get("is_final"):
            pass
    assert result["text"] == checksum(pcm)
    return str(result["text"])


def connection_line(line: str) -> bool:
    """uvicorn's own lines for a connection: open, accepted or rejected, closed."""
    words = ("connection open", "connection closed", "connection rejected", '"WebSocket /"')
    return line.startswith("INFO:") and any(each in line for each in words)


@pytest.mark.parametrize(("header", "value", "answer"), CASES)
async def test_a_header_that_is_not_ascii_logs_one_line_and_the_server_serves_on(
    live: Gateway, header: str, value: bytes, answer: bytes
) -> None:
    before = len(live.output().splitlines())
    with within(30):
        got = await anyio.to_thread.run_sync(raw_handshake, live.port, header, value)
        assert got.startswith(answer)
        await anyio.to_thread.run_sync(one_session, live)  # the server serves on
    new = live.output().splitlines()[before:]
    ours = [line for line in new if not connection_line(line)]
    assert len(ours) == 1, new
    assert "a header is not ASCII" in ours[0]
    assert "Traceback" not in "\n".join(new)
    assert not [line for line in new if line.startswith("ERROR")], new


async def test_resume_tokens_and_api_keys_in_a_query_stay_out_of_the_log(live: Gateway) -> None:
    import httpx

    secret_token, secret_key = "resume-secret-7f3a", "key-secret-91c2"
    resume_url = f"{live.url}?resume={secret_token}&last_result=0"
    with connect(resume_url, compression=None, proxy=None) as ws:
        frame = json.loads(ws.recv(timeout=20))  # a malformed token: refused, after [accepted]
    assert frame["type"] == "error"
    async with httpx.AsyncClient(base_url=live.http, trust_env=False) as http:
        await http.get(f"/readyz?model=x&token={secret_key}")
    with within(10):
        while "token=REDACTED" not in live.output():  # noqa: ASYNC110 (another process)
            await anyio.sleep(0.05)
    log = live.output()
    assert secret_token not in log
    assert secret_key not in log
    assert '"WebSocket /?resume=REDACTED&last_result=0" [accepted]' in log
    assert "/readyz?model=x&token=REDACTED HTTP/1.1" in log
