"""funasr's start-up noise, silenced where it is printed; its real warnings kept.

Imported, funasr runs ``ffmpeg -version`` and prints a notice when there is none (it never
decodes audio of ours: the engines hand it samples). ``AutoModel`` prints its version,
configures the root logger with ``basicConfig`` and logs, on it, the model hub it would
download from, a ``trust_remote_code: False`` warning and each step of loading a
checkpoint. Nothing there is something an operator can act on, and it came once per worker
at every start. So, in every process that uses funasr:

- ``quiet_funasr()`` wraps the code that imports funasr or builds an ``AutoModel``: the
  known notices on standard output are dropped, every other line passes;
- a filter on the root logger drops funasr's records below WARNING and its
  ``trust_remote_code`` warning; its other warnings and errors pass as they were.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

# The lines funasr prints at import and in AutoModel, as it spells them (their starts).
PRINTED_NOISE = (
    "Notice: ffmpeg is not installed",
    "If you want to use ffmpeg backend",
    "\tsudo apt install ffmpeg",
    "\t# brew install ffmpeg",
    "funasr version: ",
)
LOGGED_NOISE = ("trust_remote_code: ",)  # warnings that say nothing to act on


def _funasr_dir() -> str | None:
    """Where funasr's own files are, without importing it (the import is what prints)."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "funasr"
        if (candidate / "__init__.py").is_file():
            return str(candidate.resolve())
    return None


class FunasrNoiseFilter(logging.Filter):
    """Drops funasr's records below WARNING, and the warnings in ``LOGGED_NOISE``."""

    def __init__(self, funasr_dir: str | None) -> None:
        super().__init__()
        self._dir = funasr_dir

    def filter(self, record: logging.LogRecord) -> bool:
        if self._dir is None or not record.pathname.startswith(self._dir):
            return True
        if record.levelno < logging.WARNING:
            return False
        return not str(record.msg).startswith(LOGGED_NOISE)


class _NoiseDroppingWriter(io.TextIOBase):
    """Standard output less the lines in ``PRINTED_NOISE``, line by line."""

    def __init__(self, target: TextIO) -> None:
        self._target = target
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not line.startswith(PRINTED_NOISE):
                self._target.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending and not self._pending.startswith(PRINTED_NOISE):
            self._target.write(self._pending)
        self._pending = ""
        self._target.flush()


def install_log_filter() -> None:
    """The root logger's filter, once per process (safe to call again)."""
    root = logging.getLogger()
    if not any(isinstance(each, FunasrNoiseFilter) for each in root.filters):
        root.addFilter(FunasrNoiseFilter(_funasr_dir()))


@contextlib.contextmanager
def quiet_funasr() -> Iterator[None]:
    """Around funasr's import and ``AutoModel``: its notices dropped, its INFO logs too."""
    install_log_filter()
    writer = _NoiseDroppingWriter(sys.stdout)
    with contextlib.redirect_stdout(writer):
        try:
            yield
        finally:
            writer.flush()
