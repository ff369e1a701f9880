"""What the voice-agent frameworks' Deepgram tests share (``tests/live/agents/test_*_deepgram.py``):
a real uvicorn on the checksum engine serving ``/v1/listen``, the audio they send, the
transcripts it must come back as, and the server's count of the ``Error`` messages it sent.

The expected transcripts are computed here, independently of the gateway: the checksum
engine's text is ``"<samples>:<crc32>"`` of the 16 kHz audio an utterance's stream received.
The gateway resamples a stream's audio (at a rate other than 16 kHz) with one soxr
resampling, which a ``Finalize`` flushes and restarts (``sixteen_k``); a pause cuts an
utterance where the energy endpointer hears ``endpointing`` ms of it (300 ms at least), on
the endpointer's own frames. The tests read that cut from the sample count the first text
carries, check that it lies in the pause, and that the texts are consecutive slices of the
audio (``consecutive``): nothing lost, nothing counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common.gateway import Gateway
from tests.helpers.agents import KEY, Samples
from tests.helpers.checksums import checksum
from tests.helpers.live_gateway import assert_ended_quietly as ended_quietly
from tests.helpers.realtime_audio import pool_audio, wav_file

RATE = 16_000  # the pool's
MIN_PAUSE_S = 0.3  # the shortest pause that ends an utterance (docs/deepgram.md, endpointing)


def pcm(samples: Samples) -> bytes:
    return samples.astype("<i2").tobytes()


def sixteen_k(samples: Samples, rate: int) -> bytes:
    """The 16 kHz audio the pool gets of ``samples`` (at ``rate``), sent as one run between
    two ``Finalize``s: the bytes themselves at 16 kHz, else one soxr resampling of the whole
    (``pool_audio``)."""
    if rate == RATE:
        return pcm(samples)
    return pool_audio(wav_file(samples, rate))


def samples_in(text: str) -> int:
    """How many 16 kHz samples the checksum engine's ``text`` covers."""
    return int(text.split(":")[0])


def consecutive(texts: Sequence[str], audio: bytes) -> list[str]:
    """The texts that consecutive slices of ``audio`` (16 kHz PCM), of the lengths
    ``texts`` give, must have: each starts where the one before ended."""
    expected: list[str] = []
    at = 0
    for text in texts:
        size = 2 * samples_in(text)
        expected.append(checksum(audio[at : at + size]))
        at += size
    return expected


HEADERS = {"Authorization": f"Token {KEY}"}  # Deepgram's, which /readyz and /metrics take


def listen_errors(server: Gateway) -> float:
    """Every ``Error`` message the server has sent on /v1/listen, and every handshake it
    refused (``asr_listen_errors_total``)."""
    with httpx.Client(base_url=server.http, headers=HEADERS, trust_env=False) as http:
        response = http.get("/metrics")
    response.raise_for_status()
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "asr_listen_errors_total"
    )


async def assert_ended_quietly(server: Gateway, since: int) -> None:
    """``tests.helpers.live_gateway.assert_ended_quietly``, with the key."""
    await ended_quietly(server, since, HEADERS)
