"""What inverse text normalization costs per result, as an offline worker runs it
(``workers.engines.itn``: wetext, WeTextProcessing's Chinese FSTs).

    python -m bench.models.itn_cost --repeats 200

Texts: a short result (a sentence of about 20 characters with numbers in it), and 60 s of
speech as text (about 250 characters a minute of Mandarin, numbers spread through it, in
punctuated sentences as the offline pass gives them). For each: wall ms per call (median
and p95) and CPU ms per call, after one warm-up call; the normalizer's load once.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common.report import header, row
from bench.common.stats import distribution
from workers.engines.itn import InverseNormalizer

SHORT = "今天的气温是二十三度，湿度百分之六十五。"  # noqa: RUF001 (Chinese punctuation)
SENTENCES = (
    "我们在二零二四年三月五日开会。",
    "会议一共来了一百二十三个人。",
    "预算增加了百分之十五，大约三千五百万元。",  # noqa: RUF001
    "下午三点半开始讨论第二个议题。",
    "他的电话号码是一三八零零一三八零零零。",
    "这个项目已经进行了四年零六个月。",
)


def minute_of_text() -> str:
    """About 60 s of Mandarin as the offline pass writes it: 250 characters or so."""
    text = ""
    while len(text) < 250:
        text += SENTENCES[len(text) % len(SENTENCES)]
    return text


def measure(itn: InverseNormalizer, text: str, repeats: int) -> tuple[list[float], float]:
    itn.normalize([text])  # warm
    walls: list[float] = []
    cpu_before = time.process_time()
    for _ in range(repeats):
        started = time.perf_counter()
        itn.normalize([text])
        walls.append((time.perf_counter() - started) * 1000)
    return walls, (time.process_time() - cpu_before) * 1000 / repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.itn_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    itn = InverseNormalizer()
    started = time.perf_counter()
    itn.load()
    load_s = time.perf_counter() - started
    lines = header("text", "characters", "wall ms p50", "wall ms p95", "CPU ms per call")
    for name, text in (("short result", SHORT), ("60 s of speech", minute_of_text())):
        walls, cpu = measure(itn, text, args.repeats)
        stats = distribution(walls)
        lines.append(row(name, len(text), f"{stats.p50:.2f}", f"{stats.p95:.2f}", f"{cpu:.2f}"))
    lines.append("")
    lines.append(f"- normalizer load: {load_s:.2f} s (once per offline worker)")
    example = itn.normalize([SHORT])[0][0]
    lines.append(f"- {SHORT} -> {example}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
