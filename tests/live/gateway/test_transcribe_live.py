"""POST /v1/transcribe against a real uvicorn: bodies far over the cap are refused with the
server's memory and temporary directory bounded by the cap, not by the body."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest
import soundfile

from bench.common.gateway import Gateway, serve
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 1 << 20  # ASR_TRANSCRIBE_MAX_BYTES
BODY = 64 << 20  # what the client sends: 64 times the cap
GROWTH = 16 << 20  # the most the server's peak RSS may grow by for one refused body
CHUNK = bytes(64 << 10)
BOUNDARY = b"b0undary"


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def open_files_under(pid: int, folder: Path) -> set[str]:
    """The files the process holds open under ``folder``; unlinked temporary files too
    (their link reads ``/folder/#123 (deleted)``), which no directory listing shows."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith(str(folder)):
            found.add(target)
    return found


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
async def live(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("transcribe-live")
    tmpdir = root / "tmp"
    tmpdir.mkdir()
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_TRANSCRIBE_MAX_BYTES": str(LIMIT),
        "TMPDIR": str(tmpdir),  # where a spooled upload would go
        "ASR_UPLOAD_TIMEOUT": "2",
        "ASR_TRANSCRIBE_CONCURRENCY": "1",
    }
    loop = ("--loop", request.param)  # uvicorn's, under each in turn
    async with serve(env, root / "server.log", options=loop) as server:
        async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
            # Warm up: the lazy imports of a decode and of a refusal are not the body's.
            wav = io.BytesIO()
            soundfile.write(wav, np.zeros(8000, dtype=np.int16), 16000, format="WAV")
            response = await http.post("/v1/transcribe", files={"file": ("a.wav", wav.getvalue())})
            assert response.status_code == 200, response.text
            response = await http.post(
                "/v1/transcribe", files={"file": ("a.wav", bytes(LIMIT + 1))}
            )
            assert response.status_code == 413
        yield server, tmpdir


async def streamed(head: bytes, size: int, tail: bytes = b"") -> AsyncIterator[bytes]:
    """A body without Content-Length (chunked): ``head``, ``size`` zero bytes, ``tail``."""
    yield head
    for _ in range(size // len(CHUNK)):
        yield CHUNK
    yield tail


async def refused_with_bounded_memory_and_disk(
    server: Gateway, tmpdir: Path, content_type: str, body: AsyncIterator[bytes]
) -> httpx.Response:
    before = peak_rss(server.pid)
    held: set[str] = set()

    async def watch() -> None:
        while True:
            held.update(open_files_under(server.pid, tmpdir))
            await anyio.sleep(0.005)

    with within(120):
        async with (
            httpx.AsyncClient(base_url=server.http, trust_env=False, timeout=60) as http,
            anyio.create_task_group() as group,
        ):
            group.start_soon(watch)
            response = await http.post(
                "/v1/transcribe", content=body, headers={"content-type": content_type}
            )
            group.cancel_scope.cancel()
    growth = peak_rss(server.pid) - before
    assert growth < GROWTH, f"the server's peak RSS grew by {growth / 2**20:.1f} MiB"
    assert held == set(), held
    assert folder_bytes(tmpdir) < LIMIT
    return response


async def test_a_chunked_upload_far_over_the_cap_is_refused_with_memory_and_disk_bounded(
    live: tuple[Gateway, Path],
) -> None:
    server, tmpdir = live
    head = b'--%s\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n\r\n'
    response = await refused_with_bounded_memory_and_disk(
        server,
        tmpdir,
        "multipart/form-data; boundary=" + BOUNDARY.decode(),
        streamed(head % BOUNDARY, BODY, b"\r\n--%s--\r\n" % BOUNDARY),
    )
    assert response.status_code == 413
    assert "larger than 1048576 bytes" in response.json()["error"]["message"]


async def test_a_chunked_json_body_far_over_64_kib_is_refused_with_memory_bounded(
    live: tuple[Gateway, Path],
) -> None:
    server, tmpdir = live
    response = await refused_with_bounded_memory_and_disk(
        server, tmpdir, "application/json", streamed(b'{"url": "', BODY, b'"}')
    )
    assert response.status_code == 413
    assert "JSON body is larger than 65536 bytes" in response.json()["error"]["message"]


async def test_a_declared_length_over_the_cap_is_answered_before_any_body_is_sent(
    live: tuple[Gateway, Path],
) -> None:
    server, _ = live
    head = (
        b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 1073741824\r\n\r\n"
    )
    with within(30):
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(head)  # and not one byte of the body
            answer = b""
            while b"}}" not in answer:
                answer += await stream.receive()
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"ASR_TRANSCRIBE_MAX_BYTES" in answer


async def test_a_1_hz_wav_is_refused_without_the_memory_of_its_resampling(
    live: tuple[Gateway, Path],
) -> None:
    server, _ = live
    wav = io.BytesIO()  # 7 KB that resampled to 16 kHz would be 3,599 s: 115 MB of int16
    soundfile.write(wav, np.zeros(3599, dtype=np.int16), 1, format="WAV", subtype="PCM_16")
    before = peak_rss(server.pid)
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        response = await http.post("/v1/transcribe", files={"file": ("a.wav", wav.getvalue())})
    assert response.status_code == 400
    assert "sample rate of 1 Hz" in response.json()["error"]["message"]
    assert peak_rss(server.pid) - before < 4 << 20


async def test_a_body_slower_than_the_upload_timeout_is_408_and_frees_its_place(
    live: tuple[Gateway, Path],
) -> None:
    """A byte a second would otherwise hold the one ASR_TRANSCRIBE_CONCURRENCY place for
    as long as the client likes."""
    server, _ = live
    head = (
        b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=%s\r\nTransfer-Encoding: chunked\r\n\r\n"
        % BOUNDARY
    )
    part = b'--%s\r\nContent-Disposition: form-data; name="file"\r\n\r\n' % BOUNDARY
    with within(20):
        async with await anyio.connect_tcp("127.0.0.1", server.port) as stream:
            await stream.send(head + b"%x\r\n%s\r\n" % (len(part), part))
            answer = b""
            while b"}}" not in answer:
                with anyio.move_on_after(0.5):
                    answer += await stream.receive()
                await stream.send(b"1\r\nx\r\n")  # a byte every half second
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"ASR_UPLOAD_TIMEOUT" in answer
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        wav = io.BytesIO()
        soundfile.write(wav, np.zeros(8000, dtype=np.int16), 16000, format="WAV")
        again = await http.post("/v1/transcribe", files={"file": ("a.wav", wav.getvalue())})
    assert again.status_code == 200, again.text
