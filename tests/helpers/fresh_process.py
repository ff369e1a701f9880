"""Fault-injecting scripts in a fresh interpreter, for faults that would poison the test
process: a descriptor limit, a full ``/dev/shm``, a full disk.

A script that needs a small filesystem gets it in a private mount namespace: each tmpfs
mounted there (over ``/dev/shm`` too) is seen by the script and the workers it spawns and
by nothing else on the machine, and is gone with them. Where no such namespace can be made
(neither root nor unprivileged user namespaces), those tests skip.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULT = "RESULT "  # the line a script prints its findings on, as JSON

# What every script may start with: what it reports, and how it waits.
PRELUDE = """
import json, os, sys, time
import anyio
from tests.helpers.timing import within

def report(**findings):
    print("RESULT " + json.dumps(findings), flush=True)

async def until(condition, timeout):
    with within(timeout):
        while not condition():
            await anyio.sleep(0.005)
"""


@functools.cache
def _unshare() -> tuple[str, ...] | None:
    """The command that enters a private mount namespace where a tmpfs can be mounted."""
    if shutil.which("unshare") is None:
        return None
    for command in (
        ("unshare", "--mount", "--propagation", "private"),
        ("unshare", "--mount", "--map-root-user", "--propagation", "private"),
    ):
        probe = subprocess.run(
            [*command, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return command
    return None


def run_script(
    source: str,
    tmp_path: Path,
    *,
    tmpfs: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``PRELUDE`` + ``source`` at the repository root in a fresh interpreter; with
    ``tmpfs`` (path: size, as ``mount -o size=`` takes it), in a private mount namespace
    where each path has a tmpfs of that size. Skips where no such namespace can be made."""
    script = tmp_path / "fault_script.py"
    script.write_text(PRELUDE + textwrap.dedent(source))
    command = [sys.executable, str(script), *args]
    if tmpfs:
        unshare = _unshare()
        if unshare is None:
            pytest.skip("needs a private mount namespace (root or user namespaces) for a tmpfs")
        mounts = " && ".join(
            f"mount -t tmpfs -o size={shlex.quote(size)} tmpfs {shlex.quote(path)}"
            for path, size in tmpfs.items()
        )
        command = [*unshare, "sh", "-c", f'{mounts} && exec "$@"', "sh", *command]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def findings(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """What the script reported, once it exited 0 with a clean stderr."""
    assert completed.returncode == 0, f"exit {completed.returncode}: {completed.stderr[-6000:]}"
    for unwanted in ("Traceback", "resource_tracker", "leaked"):
        assert unwanted not in completed.stderr, completed.stderr[-6000:]
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT)]
    assert len(lines) == 1, completed.stdout
    found: dict[str, Any] = json.loads(lines[0][len(RESULT) :])
    return found
