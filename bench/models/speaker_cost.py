"""What speaker labels cost on a long file, step by step as the ``campplus`` engine runs
them, and the labelling of its sentences as the gateway does it.

    python -m bench.models.speaker_cost --minutes 60 --threads 2

The file is synthetic: three voices (``workers.models.synthetic.voices``) taking turns of
``--turn-s`` seconds, 1 s apart, for ``--minutes``; its speech regions are the turns (the
VAD's part costs about 3 % of the audio in CPU and is left out). CAM++ is the synthetic
build of the real architecture (6.8 M parameters: the compute is the real model's). The
steps: the windows (``sv_chunk``: 1.5 s every 0.75 s), their embeddings (``EMBEDDING_BATCH``
a call), the clustering (``ClusterBackend``: spectral under 2,048 windows, UMAP and HDBSCAN
above), ``postprocess``; then ``sentence_speakers`` for a sentence every ``--sentence-s``.
Wall seconds each, the windows and turns counted, the peak RSS of the process.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common.report import header, row
from gateway.funasr.speaker_labels import sentence_speakers
from shared.messages import EngineSpec, SpeakerTurn
from workers.engines.campplus.engine import EMBEDDING_BATCH, CamppEngine
from workers.engines.paraformer.streaming import to_float
from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.models.resolve import ensure_synthetic
from workers.models.synthetic.voices import HIGH, LOW, Voice, conversation

VOICES = (LOW, HIGH, Voice(170.0, 1.5))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--turn-s", type=float, default=20.0)
    parser.add_argument("--sentence-s", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        model = ensure_synthetic(Path(cache), "campplus", "tiny")
        engine = CamppEngine.load(
            EngineSpec("campplus", model_dir=str(model), threads=args.threads)
        )
        turns_wanted = int(args.minutes * 60 // (args.turn_s + 1.0))
        plan = [(VOICES[i % len(VOICES)], args.turn_s) for i in range(turns_wanted)]
        audio = conversation(plan, 1.0, seed=1)
        regions = [
            (round(1000 + i * (args.turn_s + 1) * 1000), round((i + 1) * (args.turn_s + 1) * 1000))
            for i in range(turns_wanted)
        ]
        lines = [
            f"{len(audio) / 16000 / 60:.1f} min of audio, {len(regions)} speech regions,"
            f" {args.threads} threads",
            "",
            *header("step", "wall s", "count"),
        ]
        with quiet_funasr():
            from funasr.models.campplus.utils import postprocess, sv_chunk
        import torch

        started = time.perf_counter()
        speech = to_float(audio)
        segments = [[s / 1000, e / 1000, speech[s * 16 : e * 16]] for s, e in regions]
        windows = sorted(sv_chunk(segments), key=lambda window: window[0])
        lines.append(
            row("windows (sv_chunk)", f"{time.perf_counter() - started:.2f}", len(windows))
        )
        started = time.perf_counter()
        embeddings = np.concatenate(
            [
                engine._embed([w[2] for w in windows[at : at + EMBEDDING_BATCH]])
                for at in range(0, len(windows), EMBEDDING_BATCH)
            ]
        )
        embed_s = time.perf_counter() - started
        lines.append(
            row(
                "CAM++ embeddings",
                f"{embed_s:.1f}",
                f"{embed_s / len(windows) * 1000:.1f} ms a window",
            )
        )
        started = time.perf_counter()
        labels = engine._cluster(torch.from_numpy(embeddings), oracle_num=None)
        method = "spectral" if len(windows) < 2048 else "UMAP + HDBSCAN"
        lines.append(
            row(
                f"clustering ({method})",
                f"{time.perf_counter() - started:.1f}",
                f"{int(labels.max()) + 1} speakers",
            )
        )
        if len(windows) >= 2048:  # UMAP's first call compiles its numba kernels
            started = time.perf_counter()
            engine._cluster(torch.from_numpy(embeddings), oracle_num=None)
            elapsed = f"{time.perf_counter() - started:.1f}"
            lines.append(row("clustering again (compiled)", elapsed, ""))
        started = time.perf_counter()
        raw = postprocess(windows, None, labels, embeddings)
        turns = [SpeakerTurn(round(s * 1000), round(e * 1000), int(k)) for s, e, k in raw]
        lines.append(
            row("postprocess", f"{time.perf_counter() - started:.2f}", f"{len(turns)} turns")
        )
        step = int(args.sentence_s * 1000)
        spans = [(at, at + step - 100) for at in range(0, len(audio) // 16, step)]
        started = time.perf_counter()
        sentence_speakers(spans, turns)
        lines.append(
            row(
                "sentence_speakers (gateway)",
                f"{time.perf_counter() - started:.3f}",
                f"{len(spans)} sentences",
            )
        )
        # The most sentences a file can have: one per token, and the CIF predictor fires at
        # most once per 60 ms frame.
        spans = [(at, at + 50) for at in range(0, len(audio) // 16, 60)]
        started = time.perf_counter()
        sentence_speakers(spans, turns)
        elapsed = f"{time.perf_counter() - started:.3f}"
        lines.append(row("sentence_speakers, one per 60 ms", elapsed, f"{len(spans)} sentences"))
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        lines += ["", f"peak RSS of the process: {peak_mib:.0f} MiB"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
