"""What the voice-agent framework tests share (``tests/live/agents/``): a real uvicorn on
the checksum engine, the audio they send, the text each turn must come back as, and the
server's count of error events.

The expected text is computed here, independently of the gateway: the checksum engine's
text is ``"<samples>:<crc32>"`` of the 16 kHz audio its stream received, and the gateway
resamples a turn's audio (a file, or a committed turn of a realtime session) with one soxr
resampling of the whole (``tests.helpers.realtime_audio.pool_audio``). A turn that a
server VAD cut off mid-stream is a slice of the whole session's resampled audio, which
``split_turns`` finds from the sample counts the texts carry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
from prometheus_client.parser import text_string_to_metric_families

from bench.common.gateway import Gateway, serve_blocking
from tests.helpers.checksums import checksum
from tests.helpers.realtime_audio import pool_audio, wav_file

KEY = "agents-test-key"
# A prompt as OpenAI means it: prose, with an unspaced Chinese term and a URL over the
# 32 characters of a hotword. Its words that fit are hotwords; nothing of it is refused.
REFUND_PROMPT = (
    "The following is a call about a refund, with terms like 退款 and"
    " https://example.com/refund-policy"
)
CHECKSUM_ENV = {
    "ASR_MODEL": "checksum",
    "ASR_DEVICES": "cpu",
    "ASR_API_KEYS": KEY,
    # As the README serves: no permessage-deflate. (aiohttp, LiveKit's client, offers it.)
    "UVICORN_WS_PER_MESSAGE_DEFLATE": "false",
}
Samples = npt.NDArray[np.int16]


@contextmanager
def checksum_gateway(folder: Path) -> Iterator[Gateway]:
    with serve_blocking(CHECKSUM_ENV, folder / "server.log", ready_timeout=60) as server:
        yield server


def speech(rng: np.random.Generator, seconds: float, rate: int) -> Samples:
    """Loud noise: speech to an energy endpointer (about -18 dBFS)."""
    return (rng.standard_normal(round(seconds * rate)) * 4000).astype(np.int16)


def hush(rng: np.random.Generator, seconds: float, rate: int) -> Samples:
    """A quiet room (about -50 dBFS): under the endpointer's -40 dBFS, yet not zeros."""
    return (rng.standard_normal(round(seconds * rate)) * 100).astype(np.int16)


def silence(seconds: float, rate: int) -> Samples:
    return np.zeros(round(seconds * rate), dtype=np.int16)


def turn_text(samples: Samples, rate: int) -> str:
    """The transcript of a turn whose audio, at ``rate``, the gateway resamples whole."""
    return checksum(pool_audio(wav_file(samples, rate)))


def split_turns(texts: Sequence[str], samples: Samples, rate: int) -> list[str]:
    """The texts the turns must have if a server VAD cut ``samples`` (a session's audio at
    ``rate``, resampled as one stream) into consecutive turns of the lengths the texts
    give: each turn starts where the one before ended, nothing lost or counted twice."""
    audio = pool_audio(wav_file(samples, rate))
    expected: list[str] = []
    at = 0
    for text in texts:
        size = 2 * int(text.split(":")[0])
        expected.append(checksum(audio[at : at + size]))
        at += size
    return expected


def pcm(samples: Samples) -> bytes:
    return samples.astype("<i2").tobytes()


def frames_of(samples: Samples, size: int) -> list[Samples]:
    """``samples`` in frames of ``size`` samples (the last one shorter)."""
    return [samples[at : at + size] for at in range(0, len(samples), size)]


def realtime_errors(server: Gateway) -> float:
    """Every ``error`` event the server has sent on /v1/realtime
    (``asr_realtime_errors_total``): a client may never see one it could not read."""
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.http, headers=headers, trust_env=False) as http:
        response = http.get("/metrics")
    response.raise_for_status()
    text = response.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "asr_realtime_errors_total"
    )


def assert_no_traceback(server: Gateway) -> None:
    log = server.output()
    assert "Traceback" not in log, log
