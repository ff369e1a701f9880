"""The gateway with its file-descriptor table full (EMFILE), on a real uvicorn.

``uvicorn gateway.app:app`` (the checksum engine, one CPU worker) runs under ``prlimit``
with ``RLIMIT_NOFILE`` lowered to ``--nofile``; idle TCP connections to its main port fill
the table, as an attacker with a few hundred sockets, or a leak, would. ``--root`` is the
checkout the server runs from (default: this repository); it exists to measure an older
one, e.g. ``git worktree add --detach /tmp/base 481b565``. Each command prints one JSON
object.

- ``table``: while the table is full for ``--hold`` seconds, a prober connects every
  0.5 s (HAProxy's interval) to the agent port and to the main port (``GET /readyz``):
  what those connections saw while full (waiting, closed, reset, answered, refused), the
  server's CPU and log lines a second meanwhile; then the idle connections close: how soon
  the waiting probes are answered and a new ``/readyz`` is 200, and ``/healthz``,
  ``/readyz`` and the agent's answer after.
- ``haproxy``: one replica behind ``deploy/haproxy.cfg`` (checks every 500 ms, ``fall 2``,
  ``rise 2``; the two other server lines point where nobody listens), its table filled for
  ``--hold`` seconds by connections straight to it: HAProxy's view of it (status, weight,
  check, agent) at each change, and when a request through HAProxy is 200 again.
- ``idle``: the gateway's RSS per idle connection, and how many of them the server has
  closed after 11 s of silence (uvicorn times out none).

    python -m bench.reliability.descriptors table --loop uvloop --nofile 256 --hold 5
    python -m bench.reliability.descriptors table --root /tmp/base --loop asyncio \\
        --nofile 256 --hold 5
    python -m bench.reliability.descriptors haproxy --root /tmp/base --hold 3
    python -m bench.reliability.descriptors idle --loop uvloop --nofile 4096
"""
