"""A process as Linux's /proc shows it: its memory (VmRSS, and its peak VmHWM; PSS), CPU
seconds, descriptors, threads, state, parent and children.

Every function takes a pid, or ``"self"``, and raises ``ProcessLookupError`` for a process
that is not there: gone, or a zombie (whose status has no memory lines any more).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Pid = int | str  # a pid, or "self"


def _path(pid: Pid, name: str) -> Path:
    return Path(f"/proc/{pid}/{name}")


def _read(pid: Pid, name: str) -> str:
    try:
        return _path(pid, name).read_text()
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None


def status(pid: Pid, field: str) -> int:
    """A number of ``/proc/PID/status``: kB for the Vm* fields, a count for ``Threads``."""
    for line in _read(pid, "status").splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise ProcessLookupError(f"process {pid} has no {field}: a zombie")


def rss_kib(pid: Pid = "self") -> int:
    return status(pid, "VmRSS")


def rss_mib(pid: Pid = "self") -> float:
    return rss_kib(pid) / 1024


def peak_rss_kib(pid: Pid = "self") -> int:
    """The resident set's peak, VmHWM: since the start, or since ``reset_peak_rss``. Not
    ``ru_maxrss``: a child's starts from its forking parent's peak."""
    return status(pid, "VmHWM")


def peak_rss_mib(pid: Pid = "self") -> float:
    return peak_rss_kib(pid) / 1024


def pss_kib(pid: Pid = "self") -> int:
    """The proportional set size (``/proc/PID/smaps_rollup``): each resident page divided
    among the processes that map it, so that a family's PSS adds up to what it holds
    together, where its RSS counts every shared page once per process."""
    for line in _read(pid, "smaps_rollup").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise ProcessLookupError(f"process {pid} has no Pss: a zombie or a kernel thread")


def pss_mib(pid: Pid = "self") -> float:
    return pss_kib(pid) / 1024


def reset_peak_rss(pid: Pid) -> None:
    """VmHWM from now on (Linux's ``clear_refs``)."""
    _path(pid, "clear_refs").write_text("5")


def threads(pid: Pid) -> int:
    return status(pid, "Threads")


def descriptors(pid: Pid) -> int:
    """The open file descriptors."""
    try:
        return len(os.listdir(_path(pid, "fd")))
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None


def _stat(pid: Pid) -> list[str]:
    """``/proc/PID/stat``'s fields after the command's name (which may hold spaces):
    the state is the first."""
    return _read(pid, "stat").rsplit(")", 1)[1].split()


def cpu_seconds(pid: Pid) -> float:
    """User + system CPU of a live process, all its threads."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def own_cpu_seconds() -> float:
    """This process's user + system CPU, from ``getrusage``: microseconds, where /proc
    counts clock ticks (10 ms)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def state(pid: Pid) -> str:
    """R, S, D, T (stopped: SIGSTOP), Z ..."""
    return _stat(pid)[0]


def parent(pid: Pid) -> int:
    return int(_stat(pid)[1])


def children(pid: int) -> list[int]:
    """The live children (a gateway's: its workers and multiprocessing's resource tracker)."""
    return [int(child) for child in _read(pid, f"task/{pid}/children").split()]


def command_line(pid: Pid) -> bytes:
    """The arguments, each ended by a NUL."""
    try:
        return _path(pid, "cmdline").read_bytes()
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None


def family(pid: int) -> list[int]:
    """The process and its live children (a gateway and its workers, and multiprocessing's
    resource tracker); only the process where it has none, or is gone."""
    try:
        return [pid, *children(pid)]
    except ProcessLookupError:
        return [pid]


def family_cpu_seconds(pid: int) -> float:
    """``cpu_seconds`` of the process and its live children, those gone meanwhile left out."""
    total = 0.0
    for member in family(pid):
        try:
            total += cpu_seconds(member)
        except ProcessLookupError:
            pass
    return total


def workers(pid: int) -> list[int]:
    """A gateway's live children but multiprocessing's resource tracker: its workers."""
    found = []
    for child in family(pid)[1:]:
        try:
            if b"resource_tracker" not in command_line(child):
                found.append(child)
        except ProcessLookupError:
            pass
    return found
