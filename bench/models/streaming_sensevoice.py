"""Streaming SenseVoice on a multilingual test set: how often a partial's text is a prefix
of its region's final text, which tags partials carry, and what the streaming costs in CPU
against decoding the same audio once, offline.

The test set is espeak-ng speech (``apt-get install espeak-ng``): sentences in Chinese,
English, Japanese, Korean and Cantonese, each its own speech region, resampled to 16 kHz.
Each goes through the streaming engine (``workers.engines.sensevoice.streaming``) in
600 ms chunks, one stream at a time in this process, language ``auto``; then the same
audio through the offline engine once. With the synthetic model the texts are random
pieces, so the prefix rate says how stable the method keeps a model's partials whose
decode is as sensitive to its input as the real one's; real weights change the number,
not the method.

    python -m bench.models.streaming_sensevoice --size tiny
    python -m bench.models.streaming_sensevoice --size large --runtime onnx --wav set.wav

``--wav`` also writes the set as one WAV, its sentences 1.2 s apart: the audio the
gateway's load runs send (``bench.load.ws_load --wav``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gateway.audio.resample import PcmResampler
from shared.messages import EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.sensevoice.streaming import RedecodingEngine
from workers.engines.whole_utterance import Final
from workers.models.resolve import ensure_synthetic

CHUNK = 9600  # 600 ms, chunk_size [0, 10, 5]
SENTENCES = {
    "cmn": ["今天天气很好 我们去公园散步吧。", "请把这份报告在周五之前发给我。"],
    "en-us": [
        "The quick brown fox jumps over the lazy dog near the river bank.",
        "Please send me the quarterly report before Friday afternoon.",
    ],
    "ja": ["今日はとても良い天気ですね。", "明日の会議は午後三時から始まります。"],
    "ko": ["오늘 날씨가 정말 좋네요.", "내일 회의는 오후 세 시에 시작합니다."],
    "yue": ["今日天氣好好 我哋去公園行下啦。", "唔該你星期五之前send份報告俾我。"],
}


@dataclass
class Utterance:
    voice: str
    seconds: float
    partials: int
    prefixes: int  # partials whose text is a prefix of the final text
    kept: float  # the share of the partials' characters that begin the final text as well
    tagged: int  # partials that carry a language tag
    stream_cpu_s: float
    offline_cpu_s: float
    final: str


def speak(voice: str, text: str, directory: Path) -> np.ndarray:
    """espeak-ng's speech of ``text``, as 16 kHz int16."""
    path = directory / "say.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
    with wave.open(str(path)) as wav:
        rate = wav.getframerate()
        pcm = wav.readframes(wav.getnframes())
    resampler = PcmResampler(rate)
    out = resampler.push(pcm) + resampler.flush()
    return np.frombuffer(out, "<i2").copy()


def _common(partial: str, final: str) -> int:
    """How many characters ``partial`` and ``final`` begin with alike."""
    size = 0
    for a, b in zip(partial, final, strict=False):
        if a != b:
            break
        size += 1
    return size


def stream(
    engine: RedecodingEngine, stream_id: int, audio: np.ndarray
) -> tuple[list[ChunkOutput], float]:
    engine.open_stream(stream_id, StreamOptions())
    pieces = [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)] or [audio]
    outputs: list[ChunkOutput] = []
    started = time.process_time()
    for seq, piece in enumerate(pieces):
        outputs += engine.feed([ChunkItem(stream_id, seq, piece, seq == len(pieces) - 1)])
    return outputs, time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.streaming_sensevoice")
    parser.add_argument("--size", choices=("tiny", "large"), default="tiny")
    parser.add_argument("--runtime", choices=("torch", "onnx"), default="torch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "asr-gateway" / "models"))
    parser.add_argument("--wav", help="also write the set as one WAV, sentences 1.2 s apart")
    parser.add_argument("--json", help="write every utterance's figures")
    args = parser.parse_args(argv)
    model_dir = ensure_synthetic(Path(args.cache), "sensevoice", args.size)
    name = "sensevoice-streaming" + ("-onnx" if args.runtime == "onnx" else "")
    if args.runtime == "onnx":
        from workers.models.export.offline import export_offline

        export_offline(model_dir)
    from workers.engines import load_engine

    spec = EngineSpec(name, model_dir=str(model_dir), threads=args.threads)
    engine = load_engine(spec)
    assert isinstance(engine, RedecodingEngine)
    recogniser = engine._recogniser  # the offline decode of the same audio, once
    results: list[Utterance] = []
    clips: list[np.ndarray] = []
    with tempfile.TemporaryDirectory() as scratch:
        for voice, texts in SENTENCES.items():
            for text in texts:
                audio = speak(voice, text, Path(scratch))
                clips.append(audio)
                outputs, stream_cpu = stream(engine, len(results), audio)
                *partials, final = outputs
                started = time.process_time()
                final_item = ChunkItem(0, 0, audio, True)
                recogniser.recognise([Final(0, final_item, audio, StreamOptions())])
                offline_cpu = time.process_time() - started
                said = [p for p in partials if p.text]
                results.append(
                    Utterance(
                        voice,
                        len(audio) / 16000,
                        len(said),
                        sum(final.text.startswith(p.text) for p in said),
                        sum(_common(p.text, final.text) for p in said)
                        / max(1, sum(len(p.text) for p in said)),
                        sum(bool(p.decoded.tags and p.decoded.tags.language) for p in said),
                        stream_cpu,
                        offline_cpu,
                        final.text,
                    )
                )
    print(f"{args.size} synthetic SenseVoiceSmall, {args.runtime}, {args.threads} thread(s)")
    print(
        "| voice | utterances | audio s | partials | prefix of final | characters kept"
        " | tagged | CPU x offline |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for voice in [*SENTENCES, "all"]:
        rows = [r for r in results if voice in (r.voice, "all")]
        count = sum(r.partials for r in rows)
        print(
            f"| {voice} | {len(rows)} | {sum(r.seconds for r in rows):.1f} | {count}"
            f" | {sum(r.prefixes for r in rows) / max(1, count):.0%}"
            f" | {sum(r.kept * r.partials for r in rows) / max(1, count):.0%}"
            f" | {sum(r.tagged for r in rows) / max(1, count):.0%}"
            f" | {sum(r.stream_cpu_s for r in rows) / sum(r.offline_cpu_s for r in rows):.2f} |"
        )
    if args.wav:
        pause = np.zeros(int(1.2 * 16000), np.int16)
        audio = np.concatenate([part for clip in clips for part in (clip, pause)])
        with wave.open(args.wav, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(16000)
            out.writeframes(audio.astype("<i2").tobytes())
        print(f"wrote {args.wav}: {len(audio) / 16000:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
