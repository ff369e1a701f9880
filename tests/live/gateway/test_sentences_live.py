"""Sentences on the file endpoints, through a real uvicorn: an offline model that predicts
token times (the tiny BiCifParaformer) with a punctuation model (the tiny CT-Transformer),
a file long enough to be decoded in segments. ``/v1/transcribe``'s ``sentences`` are
funasr's own split (``timestamp_sentence`` on its punctuation model's ids) of each
segment, moved to where the segment starts in the file, in ``stamp_sents``' shape; OpenAI's
``verbose_json``, ``srt`` and ``vtt``, read with OpenAI's SDK, have a segment (a cue) per
one of those sentences."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import openai
import pytest
import soundfile

from bench.common.gateway import Gateway, serve_blocking
from gateway.audio.endpointer import EndpointSettings
from gateway.audio.segment import Segment, cut, silence_by_energy
from gateway.openai_api.formats import timecode
from tests.helpers.vad import spoken
from workers.engines.paraformer.streaming import load_automodel, to_float

pytestmark = pytest.mark.slow

SEGMENT_S = 2  # ASR_MAX_SEGMENT_SECONDS: the file below is three segments
# Audio on which funasr gives the same tokens to each segment alone as to the three batched
# (checked below): the worker's held step batches them, and with random weights a batch's
# padding can flip a near tie (seed 14's first segment ends in another token batched).
AUDIO = spoken(
    15, ("speech", 1.8), ("quiet", 0.3), ("speech", 1.7), ("quiet", 0.3), ("speech", 1.6)
)


@pytest.fixture(scope="module")
def server(
    tiny_timestamp_model: Path, tiny_punc_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_OFFLINE_MODEL": str(tiny_timestamp_model),
        "ASR_PUNC_MODEL": str(tiny_punc_model),
        "ASR_MAX_SEGMENT_SECONDS": str(SEGMENT_S),
    }
    log = tmp_path_factory.mktemp("sentences") / "server.log"
    with serve_blocking(env, log, ready_timeout=180) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.http + "/v1", api_key="k", max_retries=0) as client:
        yield client


def wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def segments_of(audio: np.ndarray) -> list[Segment]:
    """Where the gateway cuts ``audio`` (no VAD model: by energy), as it cuts it."""
    pcm = audio.astype("<i2").tobytes()
    silent = silence_by_energy(pcm, EndpointSettings().threshold)
    return cut(len(pcm), SEGMENT_S * 32000, silent)


@pytest.fixture(scope="module")
def expected(tiny_timestamp_model: Path, tiny_punc_model: Path) -> list[dict[str, Any]]:
    """funasr's sentences of each segment of ``AUDIO``, in ms from the file's start: its
    model's text and times, its punctuation model's ids, its ``timestamp_sentence``."""
    from funasr.utils.timestamp_tools import timestamp_sentence

    model = load_automodel(str(tiny_timestamp_model), "cpu", 1)
    punc = load_automodel(str(tiny_punc_model), "cpu", 1)
    segments = segments_of(AUDIO)
    pieces = [to_float(AUDIO[segment.start // 2 : segment.end // 2]) for segment in segments]
    results = [model.generate(input=piece, disable_pbar=True)[0] for piece in pieces]
    batched = model.generate(input=pieces, disable_pbar=True, batch_size=len(pieces))
    assert [(r["text"], r["timestamp"]) for r in results] == [
        (r["text"], r["timestamp"]) for r in batched
    ], "funasr's tokens differ batched: choose other audio"
    sentences: list[dict[str, Any]] = []
    for segment, result in zip(segments, results, strict=True):
        [punctuated] = punc.generate(input=result["text"], disable_pbar=True)
        offset = segment.start_ms
        for sentence in timestamp_sentence(
            punctuated["punc_array"], result["timestamp"], " ".join(result["text"]), True
        ):
            sentences.append(
                {
                    "tokens": sentence["raw_text"].replace(" ", ""),
                    "text": sentence["text"],
                    "start": sentence["start"] + offset,
                    "end": sentence["end"] + offset,
                    "ts_list": [[a + offset, b + offset] for a, b in sentence["timestamp"]],
                    "segment_start": offset,
                }
            )
    return sentences


def transcribe(server: Gateway, itn: bool) -> dict[str, Any]:
    response = httpx.post(
        server.http + "/v1/transcribe",
        files={"file": ("long.wav", wav(AUDIO), "audio/wav")},
        data={"itn": "true" if itn else "false"},
        timeout=120,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_file_is_decoded_in_segments_with_sentences_in_each(
    expected: list[dict[str, Any]],
) -> None:
    segments = segments_of(AUDIO)
    assert len(segments) == 3
    assert {sentence["segment_start"] for sentence in expected} == {s.start_ms for s in segments}
    assert len(expected) > len(segments), "the punctuation model put marks inside the text"


def test_transcribe_answers_with_funasrs_sentences_in_the_files_time(
    server: Gateway, expected: list[dict[str, Any]]
) -> None:
    body = transcribe(server, itn=False)
    sentences = body["sentences"]
    assert all(set(s) == {"text_seg", "punc", "start", "end", "ts_list"} for s in sentences)
    assert [
        (s["text_seg"].replace(" ", ""), s["start"], s["end"], s["ts_list"]) for s in sentences
    ] == [(e["tokens"], e["start"], e["end"], e["ts_list"]) for e in expected]
    assert [s["punc"] for s in sentences] == [e["text"][-1] for e in expected]
    # The same times as the token times, one sentence after another.
    assert [pair for s in sentences for pair in s["ts_list"]] == body["timestamps"]
    starts = [s["start"] for s in sentences]
    assert starts == sorted(starts)
    assert all(
        s["start"] <= s["end"] <= next_start
        for s, next_start in zip(sentences, [*starts[1:], 10**9], strict=True)
    )
    # Their tokens and marks are the text's, before ITN (none here).
    assert "".join(s["text_seg"].replace(" ", "") + s["punc"] for s in sentences) == body[
        "text"
    ].replace(" ", "")


def test_verbose_json_has_a_segment_per_sentence_through_openais_sdk(
    server: Gateway, client: openai.OpenAI, expected: list[dict[str, Any]]
) -> None:
    result = client.audio.transcriptions.create(
        file=("long.wav", wav(AUDIO)),
        model="whisper-1",
        response_format="verbose_json",
        timestamp_granularities=["segment"],
        extra_body={"itn": "false"},
    )
    assert result.segments is not None
    segments = result.segments
    assert [s.id for s in segments] == list(range(len(expected)))
    assert [(s.start, s.end) for s in segments] == [
        (e["start"] / 1000, e["end"] / 1000) for e in expected
    ]
    assert [s.seek for s in segments] == [e["segment_start"] // 10 for e in expected]
    # Each its sentence as the text writes it: its tokens and its mark; joined, the text.
    assert [s.text for s in segments] == [e["tokens"] + e["text"][-1] for e in expected]
    assert "".join(s.text for s in segments) == result.text.replace(" ", "")
    assert [s.start for s in segments] == sorted(s.start for s in segments)
    assert all(s.start <= s.end for s in segments)
    # /v1/transcribe's sentences, in seconds.
    body = transcribe(server, itn=False)
    assert [(s.start, s.end) for s in segments] == [
        (s["start"] / 1000, s["end"] / 1000) for s in body["sentences"]
    ]


def test_with_itn_the_segments_read_as_the_text(client: openai.OpenAI) -> None:
    """ITN is on by default: each segment's text is cut from the final text, so joined
    they are it (ITN changes no mark of these texts); the times are the model's."""
    plain = client.audio.transcriptions.create(
        file=("long.wav", wav(AUDIO)),
        model="whisper-1",
        response_format="verbose_json",
        extra_body={"itn": "false"},
    )
    normalized = client.audio.transcriptions.create(
        file=("long.wav", wav(AUDIO)), model="whisper-1", response_format="verbose_json"
    )
    assert plain.segments is not None
    assert normalized.segments is not None
    assert "".join(s.text for s in normalized.segments) == normalized.text.replace(" ", "")
    assert [(s.start, s.end) for s in normalized.segments] == [
        (s.start, s.end) for s in plain.segments
    ]


CUE = re.compile(r"(\d\d:\d\d:\d\d[,.]\d{3}) --> (\d\d:\d\d:\d\d[,.]\d{3})\n(.*)")


@pytest.mark.parametrize("response_format", ["srt", "vtt"])
def test_subtitles_have_a_cue_per_sentence(
    client: openai.OpenAI, expected: list[dict[str, Any]], response_format: Literal["srt", "vtt"]
) -> None:
    subtitles = client.audio.transcriptions.create(
        file=("long.wav", wav(AUDIO)),
        model="whisper-1",
        response_format=response_format,
        extra_body={"itn": "false"},
    )
    assert isinstance(subtitles, str)
    separator = "," if response_format == "srt" else "."
    assert CUE.findall(subtitles) == [
        (
            timecode(e["start"], separator),
            timecode(e["end"], separator),
            e["tokens"] + e["text"][-1],
        )
        for e in expected
    ]
    if response_format == "srt":
        numbers = re.findall(r"^(\d+)\n\d\d:", subtitles, re.MULTILINE)
        assert numbers == [str(n) for n in range(1, len(expected) + 1)]
    else:
        assert subtitles.startswith("WEBVTT\n\n")
