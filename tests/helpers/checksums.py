"""What a client of the checksum engine sends and what it must get back.

The checksum engine's text is ``"<samples>:<crc32>"`` over every int16 sample its stream has
received so far, so each result can be checked against the audio that was sent.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.testclient import WebSocketTestSession

# The messages and the checksum themselves are the benchmarks' too: re-exported here.
from bench.common.audio import checksum as checksum
from bench.common.messages import END as END
from bench.common.messages import config as config

TIMING_FIELDS = frozenset({"seq", "queue_ms", "compute_ms", "batch_size", "worker"})


def random_pcm(rng: random.Random, samples: int) -> bytes:
    return rng.randbytes(2 * samples)


def random_frames(rng: random.Random, pcm: bytes, largest: int) -> list[bytes]:
    """``pcm`` cut at random points: frames of 1 to ``largest`` bytes, many of odd length."""
    frames: list[bytes] = []
    offset = 0
    while offset < len(pcm):
        size = rng.randint(1, largest)
        frames.append(pcm[offset : offset + size])
        offset += size
    return frames


def check_online(results: Sequence[Mapping[str, object]], pcm: bytes, chunk_bytes: int) -> None:
    """A partial for every whole chunk, each the checksum of the audio up to it; the final
    over everything; all ``online``, with the timing fields and ``seq`` in order."""
    *partials, final = results
    assert len(partials) == len(pcm) // chunk_bytes
    for index, message in enumerate(partials):
        sent = (index + 1) * chunk_bytes
        assert message["mode"] == "online"
        assert message["is_final"] is False
        assert message["text"] == checksum(pcm[:sent])
    assert final["mode"] == "online"
    assert final["is_final"] is True
    assert final["text"] == checksum(pcm)
    assert [message["seq"] for message in results] == list(range(len(results)))
    for message in results:
        assert message.keys() >= TIMING_FIELDS


def check_offline(results: Sequence[Mapping[str, object]], pcm: bytes) -> None:
    """One result for the whole utterance."""
    assert len(results) == 1
    (final,) = results
    assert final["mode"] == "offline"
    assert final["is_final"] is True
    assert final["text"] == checksum(pcm)
    assert final.keys() >= TIMING_FIELDS


def funasr_reads(message: dict[str, Any]) -> dict[str, Any]:
    """``message``, checked to be read by FunASR's clients without a fault: its HTML5 page
    appends ``"" + text`` of every frame and ``JSON.parse``s ``timestamp``; funasr-client
    indexes ``mode``; every client tests ``is_final``."""
    assert isinstance(message.get("mode"), str), message
    assert isinstance(message.get("text"), str), message
    assert isinstance(message.get("wav_name"), str), message
    assert isinstance(message.get("is_final"), bool), message
    if "timestamp" in message:
        assert isinstance(json.loads(message["timestamp"]), list), message
    return message


def receive_until_is_final(ws: WebSocketTestSession) -> list[dict[str, Any]]:
    """Every result up to and including the one with ``is_final``; no error frame."""
    messages: list[dict[str, Any]] = []
    while not messages or not messages[-1]["is_final"]:
        message = funasr_reads(ws.receive_json())
        assert "type" not in message, message
        messages.append(message)
    return messages
