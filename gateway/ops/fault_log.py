"""A fault that repeats, logged at a bounded rate (sans I/O: the caller gives the clock).

An accept that fails because the process is out of descriptors fails again at every retry,
as long as the table stays full: a line per failure would be thousands a minute, and the
log itself would cost descriptors and disk. ``RepeatedFault`` says when to log: one line as
the fault starts, one per ``every_s`` while it lasts (with the count), one when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUMMARY_EVERY_S = 60.0


@dataclass(slots=True)
class RepeatedFault:
    """``what`` starts the lines of the fault (``"agent port: accept"``), ``recovered``
    the line of its end (``"agent port: accepting again"``)."""

    what: str
    recovered: str
    every_s: float = SUMMARY_EVERY_S
    _since: float | None = field(default=None, init=False)
    _failures: int = field(default=0, init=False)  # since the fault started
    _unreported: int = field(default=0, init=False)  # since the last line
    _last_line: float = field(default=0.0, init=False)

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, now: float, error: str, retry_s: float) -> str | None:
        """One more failure, at ``now`` (seconds, any monotonic clock); the line to log,
        if one is due."""
        self._failures += 1
        if self._since is None:
            self._since = self._last_line = now
            return f"{self.what} failed ({error}); retrying every {retry_s:g} s"
        self._unreported += 1
        if now - self._last_line < self.every_s:
            return None
        since_line = now - self._last_line
        count, self._unreported, self._last_line = self._unreported, 0, now
        return (
            f"{self.what} still failing ({error}): {count} more failures in the last"
            f" {since_line:.0f} s"
        )

    def succeeded(self, now: float) -> str | None:
        """A success at ``now``: the line that says the fault is over, if there was one."""
        if self._since is None:
            return None
        lasted = now - self._since
        failures = self._failures
        self._since, self._failures, self._unreported = None, 0, 0
        return f"{self.recovered} after {failures} failures over {lasted:.1f} s"
