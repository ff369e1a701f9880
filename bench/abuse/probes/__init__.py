"""The same kind of probe on every endpoint: for each way one client can hold a resource of
the gateway's (a place, a parked slot, memory, event-loop time, a worker's time), what it
costs the client and what it costs us, measured against one real gateway.

The gateway is ``uvicorn gateway.app:app`` with the checksum engine and two CPU workers,
under ``bench.abuse.probes.server.PROFILE`` (the README's defaults with the deadlines shortened
so that each probe sees its bound in seconds; a probe may change a few more). Beside every
probe, a few honest real-time sessions (``bench.abuse.probes.victims``) time each 600 ms chunk
from its last byte to its result, against a baseline with no probe. Per probe:

- the client's cost: bytes sent (per held resource and per second), connections, how long
  it had to keep at it (``bench.abuse.probes.clients`` counts them);
- ours: how long each resource was held, the gateway's RSS at the peak (sampled every
  50 ms) and after, its CPU over what the victims alone cost, its workers', the victims'
  p50/p99 chunk latency, what the log says;
- the bound that stops it, and whether the measure stays within what README.md promises.

    python -m bench.abuse.probes                                 # every probe, ~10 minutes
    python -m bench.abuse.probes --probe silent --probe drip     # some of them
    python -m bench.abuse.probes --list
    python -m bench.abuse.probes --out probes.md --json bench/results/probes.json

One module per kind of resource: ``places``, ``parked``, ``memory``, ``loop``, ``work``,
``http`` (the HTTP endpoints and the agent port).
"""
