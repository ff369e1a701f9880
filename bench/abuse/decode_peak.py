"""The memory one whole-file decode takes: a fresh interpreter's peak RSS around
``decode_wav`` of the WAV that decodes to the most audio per byte (8 kHz u-law, an hour
by default: 27.5 MiB of file, 110 MiB of 16 kHz int16 answer).

    python -m bench.abuse.decode_peak [--seconds 3600] [--rate 8000] [--subtype ULAW]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its forking parent's peak.
MEASURE = """
import sys
from bench.common.procfs import peak_rss_kib as peak_kib
from gateway.files.request import decode_wav

data = open(sys.argv[1], "rb").read()
before = peak_kib()
out = decode_wav(data, float(sys.argv[2]))
after = peak_kib()
print(f"file {len(data) / 2**20:.1f} MiB, answer {out.nbytes / 2**20:.1f} MiB,"
      f" decode's peak +{(after - before) / 1024:.0f} MiB")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--rate", type=int, default=8000)
    parser.add_argument("--subtype", default="ULAW", help="a libsndfile WAV subtype")
    args = parser.parse_args()
    import soundfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "audio.wav"
        noise = np.random.default_rng(0).standard_normal(int(args.rate * args.seconds))
        soundfile.write(path, (noise * 0.1).astype(np.float32), args.rate, subtype=args.subtype)
        del noise
        command = [sys.executable, "-c", MEASURE, str(path), str(args.seconds)]
        print(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
