"""funasr's start-up noise is dropped where it is printed and logged; its real warnings,
and everything that is not funasr's, pass (``workers.engines.runtime.funasr_quiet``)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

from workers.engines.runtime.funasr_quiet import FunasrNoiseFilter, quiet_funasr

ROOT = Path(__file__).resolve().parents[3]


def _record(path: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("root", level, path, 1, message, None, None)


def test_funasrs_info_lines_and_its_trust_remote_code_warning_are_dropped() -> None:
    quiet = FunasrNoiseFilter("/site-packages/funasr")
    funasr_file = "/site-packages/funasr/auto/auto_model.py"
    assert not quiet.filter(_record(funasr_file, logging.INFO, "download models from hub: ms"))
    assert not quiet.filter(_record(funasr_file, logging.WARNING, "trust_remote_code: False"))
    assert quiet.filter(_record(funasr_file, logging.WARNING, "the checkpoint misses keys"))
    assert quiet.filter(_record(funasr_file, logging.ERROR, "cannot load"))
    assert quiet.filter(_record("/work/gateway/app.py", logging.INFO, "serving"))


def test_the_notices_printed_are_dropped_and_other_lines_pass() -> None:
    out = io.StringIO()
    with redirect_stdout(out), quiet_funasr():
        print("Notice: ffmpeg is not installed. torchaudio is used to load audio")
        print("If you want to use ffmpeg backend to load audio, please install it by:")
        print("\tsudo apt install ffmpeg # ubuntu\n\t# brew install ffmpeg # mac")
        print("funasr version: 1.4.16.")
        print("a line of someone else's")
        print("no newline at the end", end="")
    assert out.getvalue() == "a line of someone else's\nno newline at the end"


def test_importing_funasr_and_loading_a_model_prints_and_logs_nothing(
    tiny_streaming_model: Path,
) -> None:
    """In a fresh interpreter, as a worker loads: nothing on stdout or stderr."""
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from workers.engines.paraformer.streaming import load_automodel\n"
        f"load_automodel({str(tiny_streaming_model)!r}, 'cpu', 1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
