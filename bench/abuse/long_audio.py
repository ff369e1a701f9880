"""One long file through ``POST /v1/transcribe``, whole or in segments.

Starts ``uvicorn gateway.app:app`` with an offline model, posts a WAV of ``--seconds`` of
tone-and-noise "speech" with a pause every 7 s, and reports the wall time and the offline
worker's peak RSS (VmHWM), for each ``--segment`` (``ASR_MAX_SEGMENT_SECONDS``)::

    python -m bench.abuse.long_audio --seconds 600 --segment 60 --segment 3600
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

import numpy as np

from bench.common.audio import wav_file
from bench.common.gateway import served
from bench.common.procfs import peak_rss_mib
from bench.load.sweep import READY_TIMEOUT_S


def long_wav(seconds: float) -> bytes:
    rng = np.random.default_rng(0)
    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    audio = 6000 * np.sin(2 * np.pi * 220 * t) + 1500 * rng.standard_normal(t.size)
    audio[(t % 7.0) > 6.4] = 0.0  # a 0.6 s pause every 7 s
    return wav_file(audio.astype(np.int16), rate)


def post(url: str, wav: bytes) -> tuple[int, dict[str, object]]:
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="long.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + wav
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url, body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def one(args: argparse.Namespace, segment: float, wav: bytes) -> str:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_OFFLINE_MODEL": args.offline_model,
        "ASR_MAX_SEGMENT_SECONDS": str(segment),
        "ASR_MAX_SESSION_SECONDS": str(max(3600.0, args.seconds + 1)),
        "ASR_WORKER_STEP_TIMEOUT": str(args.step_timeout),
        "ASR_TRANSCRIBE_MAX_BYTES": str(len(wav) + (1 << 20)),
        "ASR_UPLOAD_TIMEOUT": "600",
    }
    gateway = served(env, ready_timeout=READY_TIMEOUT_S)
    try:
        http = gateway.http
        worker = gateway.readyz()["offline_workers"][0]["pid"]
        before = peak_rss_mib(worker)
        started = time.perf_counter()
        status, body = post(f"{http}/v1/transcribe", wav)
        seconds = time.perf_counter() - started
        try:
            peak = f"{peak_rss_mib(worker):.0f} MiB"
        except ProcessLookupError:
            peak = "(worker gone)"
        detail = f"{len(str(body.get('text', '')))} chars" if status == 200 else body
        return (
            f"{args.seconds:g} s of audio, ASR_MAX_SEGMENT_SECONDS={segment:g}: HTTP {status}"
            f" in {seconds:.1f} s; offline worker peak RSS {before:.0f} -> {peak}; {detail}"
        )
    finally:
        gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--segment", type=float, action="append", default=None)
    parser.add_argument("--offline-model", default="synthetic:large")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="ASR_WORKER_STEP_TIMEOUT")
    args = parser.parse_args(argv)
    wav = long_wav(args.seconds)
    for segment in args.segment or [60.0]:
        print(one(args, segment, wav), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
