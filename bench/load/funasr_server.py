"""FunASR's own Python WebSocket server, on our synthetic models, for side-by-side runs.

    python -m bench.load.funasr_server \
        --script FunASR/runtime/python/websocket/funasr_wss_server.py --port 10095 [--size large]

runs FunASR's ``funasr_wss_server.py`` unchanged (a clone of FunASR's repository has it;
``fetch`` brings one here), with its 2pass pipeline on the same random-weight models the
gateway is measured with: the streaming Paraformer (``--asr_model_online``), FSMN-VAD
(``--vad_model``) and CT-Transformer (``--punc_model``) are passed as our model directories
on its own command line, on the CPU, without TLS. Two things cannot be passed that way, so
``funasr.AutoModel`` is wrapped before the script runs:

- The script loads its offline model as ``AutoModel(model="paraformer-zh")``, whatever its
  ``--asr_model`` says: the wrapper maps that name to our synthetic offline Paraformer.
- It also loads a CAM++ speaker-verification model and runs it on every sentence. We do
  not verify speakers, there is no synthetic CAM++ and the hub is out of reach, so that
  model is one whose ``generate`` raises: the script catches the error per sentence
  (it logs "声纹识别失败") and goes on, which leaves its pipeline exactly ours to compare.

Everything else (its thread pool, its semaphores, its per-connection state) is FunASR's.
Its many prints go to the log file given, not the terminal.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path
from typing import Any

from shared.engines import Role
from shared.settings import PoolSettings
from workers.models.resolve import resolve_model

OFFLINE_NAME = "paraformer-zh"  # hard-coded in funasr_wss_server.py
SPEAKER_VERIFICATION = "iic/speech_campplus_sv_zh-cn_16k-common"


class _NoSpeakerVerification:
    """Stands in for the CAM++ model the script loads: every call fails, as the script
    expects a failing verification might."""

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("speaker verification is not part of this comparison")


def model_dirs(size: str) -> dict[str, Path]:
    cache = PoolSettings().model_cache_dir
    dirs: dict[str, Path] = {}
    for kind in (Role.STREAMING, Role.OFFLINE, Role.VAD, Role.PUNCTUATION):
        resolved = resolve_model(f"synthetic:{size}", cache, kind)
        assert resolved.model_dir is not None
        dirs[kind] = Path(resolved.model_dir)
    return dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.funasr_server", description=__doc__)
    parser.add_argument("--script", type=Path, required=True, help="funasr_wss_server.py")
    parser.add_argument("--port", type=int, default=10095)
    parser.add_argument("--size", choices=["tiny", "large"], default="large")
    parser.add_argument("--ncpu", type=int, default=1, help="torch threads (its --ncpu)")
    args, passed_on = parser.parse_known_args(argv)
    dirs = model_dirs(args.size)

    import funasr

    real_auto_model = funasr.AutoModel

    def auto_model(**kwargs: Any) -> Any:
        if kwargs.get("model") == SPEAKER_VERIFICATION:
            return _NoSpeakerVerification()
        if kwargs.get("model") == OFFLINE_NAME:
            kwargs["model"] = str(dirs["offline"])
        return real_auto_model(**kwargs)

    funasr.AutoModel = auto_model
    sys.argv = [
        str(args.script),
        "--port",
        str(args.port),
        "--asr_model_online",
        str(dirs["streaming"]),
        "--vad_model",
        str(dirs["vad"]),
        "--punc_model",
        str(dirs["punc"]),
        "--ngpu",
        "0",
        "--device",
        "cpu",
        "--ncpu",
        str(args.ncpu),
        "--certfile",
        "",
        "--keyfile",
        "",
        *passed_on,
    ]
    runpy.run_path(str(args.script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
