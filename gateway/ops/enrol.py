"""``python -m gateway.ops.enrol OUT.json NAME=CLIP.wav ...``: an ``ASR_SPEAKERS`` file of
known speakers, from a 2-10 s WAV clip of each.

Each clip is decoded as the server decodes a request's reference
(``gateway.funasr.known_speakers.decode_clip``) and embedded by a speaker pool of the model
the server runs (``--model``, default ``ASR_SPEAKER_MODEL``), a stream of its own whose one
region covers it (``gateway.whole.speakers.reference_voiceprint``): the voiceprints written
are those a request's ``known_speaker_references[]`` (or a FunASR config's ``spk_refs``) of
the same clips would give. The file is written once every clip is embedded, and read back as
the server reads it (``load_speakers``), so a file this writes is one the server starts
with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import anyio

from gateway.funasr.known_speakers import EnrolmentError, KnownSpeaker, check_names, decode_clip
from gateway.funasr.speaker_file import load_speakers, speakers_document
from gateway.whole.speakers import reference_voiceprint
from shared.engines import Role
from shared.errors import GatewayError
from shared.settings import PoolSettings
from workers.pool import WorkerPool


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.ops.enrol",
        description="Write an ASR_SPEAKERS file of named voiceprints from WAV clips.",
    )
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("clips", nargs="+", metavar="NAME=CLIP.wav", help="a 2-10 s WAV each")
    parser.add_argument(
        "--model",
        default=os.environ.get("ASR_SPEAKER_MODEL"),
        help="the speaker model the server runs (default: ASR_SPEAKER_MODEL)",
    )
    parser.add_argument("--device", default="cpu", help="where its worker runs (default: cpu)")
    return parser.parse_args(argv)


def named_clips(pairs: Sequence[str]) -> list[tuple[str, Path]]:
    """``NAME=CLIP.wav`` pairs, their names checked as the server checks them."""
    split = [pair.partition("=") for pair in pairs]
    bad = [pair for pair, (_, sign, path) in zip(pairs, split, strict=True) if not (sign and path)]
    if bad:
        raise EnrolmentError(f"{bad[0]!r} is not NAME=CLIP.wav")
    names = check_names([name for name, _, _ in split], "a name")
    return [(name, Path(path)) for name, (_, _, path) in zip(names, split, strict=True)]


async def enrol(clips: Sequence[tuple[str, Path]], settings: PoolSettings) -> list[KnownSpeaker]:
    """Each clip's known speaker, embedded by one speaker pool."""
    decoded = [(name, decode_clip(path.read_bytes(), str(path))) for name, path in clips]
    speakers = []
    async with WorkerPool(settings) as pool:
        for name, samples in decoded:
            voiceprint = await reference_voiceprint(pool, samples)
            if not voiceprint:
                raise EnrolmentError(f"{name}: the speaker model gave its clip no voiceprint")
            speakers.append(KnownSpeaker(name, voiceprint))
    return speakers


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.model:
        print("enrol: no speaker model: pass --model or set ASR_SPEAKER_MODEL", file=sys.stderr)
        return 2
    settings = PoolSettings(model=args.model, kind=Role.SPEAKER, devices=(args.device,))
    if os.environ.get("ASR_MODEL_CACHE"):  # where the server finds a synthetic build
        settings = replace(settings, model_cache_dir=os.environ["ASR_MODEL_CACHE"])
    try:
        speakers = anyio.run(enrol, named_clips(args.clips), settings)
    except (EnrolmentError, OSError) as error:
        print(f"enrol: {error}", file=sys.stderr)
        return 1
    except GatewayError as error:
        print(f"enrol: {error.message}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(speakers_document(speakers)) + "\n", encoding="utf-8")
    load_speakers(str(args.out))  # what the server will read: it reads back
    names = ", ".join(speaker.name for speaker in speakers)
    print(f"{args.out}: {len(speakers)} speakers ({names})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
