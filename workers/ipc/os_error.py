"""An ``OSError`` said in one line, with what an operator needs to act on it."""

from __future__ import annotations

import errno
import os
import resource


def describe(exc: OSError) -> str:
    """``[Errno 24] Too many open files (RLIMIT_NOFILE 1024)``: the error as Python says it,
    and for a full descriptor table the limit that filled it (``ulimit -n``, systemd's
    ``LimitNOFILE``), which is what would have to grow."""
    if exc.errno is None:
        return str(exc)
    text = f"[Errno {exc.errno}] {exc.strerror or os.strerror(exc.errno)}"
    if exc.filename is not None:
        text += f": {exc.filename!r}"
    if exc.errno == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        text += f" (RLIMIT_NOFILE {soft})"
    elif exc.errno == errno.ENFILE:
        text += " (the system's file table is full: fs.file-max)"
    return text


def size_text(size: int) -> str:
    """``2 MiB``, ``7.81 KiB``: a size in the unit it is best read in."""
    for shift, unit in ((30, "GiB"), (20, "MiB")):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size / (1 << 10):.3g} KiB"
