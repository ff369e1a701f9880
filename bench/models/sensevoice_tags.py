"""How often the synthetic SenseVoiceSmall writes the four tags it is aimed to write.

    python -m bench.models.sensevoice_tags --size tiny

Three kinds of audio (noise, a modulated tone, stepped noise) of 1, 3 and 5 s, each decoded
in every language (``auto`` and the five) with and without ITN: 108 decodes. A decode counts
when its text starts with the language asked for (``auto``: ``AUTO_DETECTS``), ``NEUTRAL``,
``Speech`` and the text-norm tag asked for, in that order, as the trained model writes them
(``workers.models.synthetic.sensevoice``). Also: how many tags the text after them holds
(the engine takes every tag out of the text either way).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from shared.settings import PoolSettings
from workers.engines.paraformer.streaming import load_automodel
from workers.models.resolve import ensure_synthetic
from workers.models.synthetic.sensevoice import AUTO_DETECTS

LANGUAGES = ("auto", "zh", "en", "yue", "ja", "ko")


def clips(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    made = []
    for k, seconds in enumerate((1, 3, 5)):
        n = 16000 * seconds
        t = np.arange(n) / 16000
        made.append(rng.standard_normal(n) * 0.1)
        made.append(0.3 * np.sin(2 * np.pi * (200 + 300 * k) * t) * (1 + np.sin(6 * np.pi * t)))
        made.append(np.repeat(rng.standard_normal(n // 400) * 0.3, 400)[:n])
    return [clip.astype(np.float32) for clip in made]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.sensevoice_tags",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=["tiny", "large"], default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model_dir = ensure_synthetic(Path(PoolSettings().model_cache_dir), "sensevoice", args.size)
    model = load_automodel(str(model_dir), "cpu", 2)
    right = decodes = leaked = 0
    for clip in clips(args.seed):
        for language in LANGUAGES:
            for itn in (True, False):
                result = model.generate(input=clip, language=language, use_itn=itn)
                raw = str(result[0]["text"])
                heard = AUTO_DETECTS if language == "auto" else language
                norm = "withitn" if itn else "woitn"
                prefix = f"<|{heard}|><|NEUTRAL|><|Speech|><|{norm}|>"
                decodes += 1
                right += raw.startswith(prefix)
                leaked += len(re.findall(r"<\|[^|]*\|>", raw[len(prefix) :]))
    print(f"SenseVoiceSmall ({args.size}, synthetic, seed 0)")
    print(f"- the four tags right: {right} of {decodes} decodes")
    print(f"- tags in the text after them: {leaked} in {decodes} decodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
