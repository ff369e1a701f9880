"""What a request or a session held is freed when it is done, by reference counting alone.

The gateway tunes the cyclic collector to run rarely (``shared.gc_tuning``: full
collections cost the event loop tens of milliseconds at hundreds of sessions), so whatever
only the cyclic collector frees stays for a long time. A reference cycle is not the fault
(asyncio and anyio make some whenever a task is cancelled); a cycle that reaches the audio
or a file is: 240 sessions abandoned mid-utterance kept 632 MiB, and every 50 MiB upload
kept its bytes. Here the collector is off while sessions and requests run, then what the
unreachable objects still reference is checked for large buffers.
"""

from __future__ import annotations

import gc
import json
import types
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from tests.helpers.checksums import END, config
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import APP_SETTINGS as SETTINGS
from tests.helpers.wav import speech, wav_bytes

LARGE = 256 * 1024  # any buffer this big in cyclic garbage is a payload kept for nothing
FRAME = bytes(range(256)) * 4096  # 1 MiB of audio
MAX_UPLOAD_BYTES = 2 << 20
CLIENT_SIDE = ("httpx", "httpx2", "starlette.testclient")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = replace(
        SETTINGS,
        max_frame_bytes=len(FRAME),
        max_session_s=3600.0,
        transcribe=replace(SETTINGS.transcribe, max_bytes=MAX_UPLOAD_BYTES),
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def _holder(holder: object) -> str:
    if isinstance(holder, types.FrameType):
        return f"the frame of {holder.f_code.co_qualname} ({holder.f_code.co_filename})"
    return f"{type(holder).__module__}.{type(holder).__qualname__}"


def _payloads_only_cycles_hold() -> list[tuple[str, int]]:
    """The large buffers that only unreachable objects reference, by their holder; the
    test client's own (httpx's) aside: that is the client's side of the request."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        held = [
            (_holder(holder), len(referent))
            for holder in gc.garbage
            for referent in gc.get_referents(holder)
            if (isinstance(referent, bytes | bytearray | memoryview) and len(referent) >= LARGE)
            or (isinstance(referent, np.ndarray) and referent.nbytes >= LARGE)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return [(holder, size) for holder, size in held if not holder.startswith(CLIENT_SIDE)]


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
@pytest.mark.parametrize("ending", ["abandoned", "ended"])
def test_a_sessions_audio_is_freed_when_it_ends(client: TestClient, ending: str) -> None:
    for _ in range(3):
        with client.websocket_connect("/") as ws:
            ws.send_text(config())
            for _ in range(4):
                ws.send_bytes(FRAME)
            if ending == "ended":
                ws.send_text(END)
                while not json.loads(ws.receive_text()).get("is_final"):
                    pass
    assert _payloads_only_cycles_hold() == []


@pytest.mark.usefixtures("collector_off")
@pytest.mark.parametrize("path", ["/v1/transcribe", "/v1/audio/transcriptions"])
def test_an_uploads_file_is_freed_when_it_is_answered(client: TestClient, path: str) -> None:
    data = wav_bytes(speech(20.0))  # 640 kB
    for _ in range(2):
        response = client.post(
            path, files={"file": ("a.wav", data, "audio/wav")}, data={"model": "whisper-1"}
        )
        assert response.status_code == 200, response.text
    assert _payloads_only_cycles_hold() == []


@pytest.mark.usefixtures("collector_off")
def test_a_refused_uploads_bytes_are_freed_when_it_is_answered(client: TestClient) -> None:
    """Over ASR_TRANSCRIBE_MAX_BYTES: refused (413) mid-file, with the 2 MiB read of it in the
    frames its error was raised in."""
    data = wav_bytes(speech(100.0))  # 3.2 MB, over the 2 MiB cap
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
        + data
        + b"\r\n--B--\r\n"
    )
    for _ in range(2):
        # Chunked, with no Content-Length: refused only once the cap is passed, mid-file.
        response = client.post(
            "/v1/transcribe",
            content=iter([body[at : at + 65536] for at in range(0, len(body), 65536)]),
            headers={"Content-Type": "multipart/form-data; boundary=B"},
        )
        assert response.status_code == 413, response.text
    assert _payloads_only_cycles_hold() == []
