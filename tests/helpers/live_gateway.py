"""What the tests of FunASR's Python clients share: a real checksum gateway, the WAV files
the clients read, and the check that a test's sessions ended without an error on the
server's side (which a client that stops reading at its final result cannot see)."""

from __future__ import annotations

import random
import wave
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common.gateway import Gateway
from tests.helpers.checksums import checksum
from tests.helpers.timing import within

CHECKSUM_ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"}
# Two model-free models (ASR_MODELS): the default, and one a client reaches by name.
TWO_CHECKSUM_MODELS = """
default = "checksum"

[models.checksum]
model = "checksum"

[models.other]
model = "checksum"
"""
RATE = 16_000
CHUNK_BYTES = 10 * 960 * 2  # the clients' default chunk_size [5, 10, 5]: 600 ms
SETTLE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Wav:
    name: str  # what a wav.scp line calls it
    path: Path
    pcm: bytes

    @property
    def checksum(self) -> str:
        return checksum(self.pcm)

    def prefix_ends(self) -> dict[str, int]:
        """The checksum of every prefix a streaming partial may cover, to its length:
        each whole chunk, and the whole file."""
        ends = [*range(CHUNK_BYTES, len(self.pcm), CHUNK_BYTES), len(self.pcm)]
        return {checksum(self.pcm[:end]): end for end in ends}


def write_wavs(folder: Path, count: int, seed: int, seconds: tuple[float, float]) -> list[Wav]:
    """``count`` WAV files of 16 kHz mono 16-bit random PCM (loud: no pause in it, so a
    2pass utterance is one sentence), each ``seconds`` long at random."""
    rng = random.Random(seed)
    wavs = []
    for index in range(count):
        samples = rng.randint(int(seconds[0] * RATE), int(seconds[1] * RATE))
        pcm = rng.randbytes(2 * samples)
        path = folder / f"audio{index}.wav"
        with wave.open(str(path), "wb") as wav_file:
            wav_file.setnchannels(1)
            wav_file.setsampwidth(2)
            wav_file.setframerate(RATE)
            wav_file.writeframes(pcm)
        wavs.append(Wav(f"utt{index}", path, pcm))
    return wavs


def log_mark(server: Gateway) -> int:
    return len(server.output())


async def assert_ended_quietly(
    server: Gateway, since: int, headers: dict[str, str] | None = None
) -> str:
    """Wait until the server holds no session, then check its log since ``since``: no
    session closed with an error code, no traceback. Returns that part of the log.
    ``headers``: a key, where the server has ASR_API_KEYS (/readyz says how many sessions
    are open only to a client with one)."""
    with within(SETTLE_TIMEOUT_S):
        async with httpx.AsyncClient(
            base_url=server.http, headers=headers, trust_env=False
        ) as http:
            while True:
                if not (await http.get("/readyz")).json()["sessions"]["active"]:
                    break
                await anyio.sleep(0.05)
    log = server.output()[since:]
    assert "closing a session" not in log, log
    assert "Traceback" not in log, log
    return log


async def chunks_by_model(server: Gateway) -> dict[str, float]:
    """``asr_chunks_total`` by model: which model's workers decoded what."""
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        text = (await http.get("/metrics")).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "asr_chunks_total":
                model = sample.labels["model"]
                totals[model] = totals.get(model, 0.0) + sample.value
    return totals
