"""What hotwords' text corrections cost per result (``gateway.funasr.corrections``), in the
gateway's event loop: a streaming partial (a few characters, a Paraformer delta), a
sentence and a long final, with a session's Chinese hotwords (pinyin matching) and rules,
the text random characters of a model's vocabulary size (3,000 common CJK characters, their
pinyin looked up once per process, as a serving gateway's cache holds them).

    python -m bench.models.corrections_cost
    python -m bench.models.corrections_cost --hotwords 64 --rules 1024
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from gateway.funasr.corrections import Corrections

SIZES = {"partial": 5, "sentence": 60, "final": 600}


VOCABULARY = [chr(0x4E00 + 7 * n) for n in range(3000)]


def _chinese(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(VOCABULARY) for _ in range(length))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.corrections_cost")
    parser.add_argument("--hotwords", type=int, default=16, help="Chinese hotwords, 4 characters")
    parser.add_argument("--rules", type=int, default=100, help="wrong=>right rules")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args(argv)
    rng = random.Random(0)
    hotwords = [_chinese(rng, 4) for _ in range(args.hotwords)]
    rules = [f"{_chinese(rng, 3)}=>{_chinese(rng, 3)}" for _ in range(args.rules)]
    fix = Corrections.of([*hotwords, *rules])
    print(f"{args.hotwords} Chinese hotwords (4 characters), {args.rules} rules; µs per result:")
    print("| result | characters | µs (median) | µs (p95) |")
    print("|---|---:|---:|---:|")
    for name, length in SIZES.items():
        texts = [_chinese(rng, length) for _ in range(args.repeat)]
        fix.apply("".join(VOCABULARY))  # the characters' pinyin, looked up once per process
        times = []
        for text in texts:
            started = time.perf_counter()
            fix.apply(text)
            times.append((time.perf_counter() - started) * 1e6)
        times.sort()
        median, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
        print(f"| {name} | {length} | {median:.0f} | {p95:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
