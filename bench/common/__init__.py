"""What the benchmarks share, and the tests with them: a process read from /proc
(``procfs``), a real gateway in a subprocess (``gateway``), a free port (``net``), the audio
sent and the checksum engine's answer to it (``audio``), FunASR's client messages
(``messages``), statistics (``stats``), Markdown tables (``report``), and two ways to break a
connection on purpose: a TCP proxy that cuts (``cutting_proxy``), replicas behind HAProxy
(``haproxy_cluster``).

``bench`` never imports ``tests``: what both need lives here, and the tests import it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: where every command runs
