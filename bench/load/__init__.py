"""The gateway and its pool under load: per-chunk and final latency, throughput, and CPU per
audio hour, from one stream to past saturation.

``ws_load`` is the load generator (N streams in FunASR's protocol, verified against the
checksum engine; one stream of it is ``ws_stream``); ``sweep`` runs it per configuration and
concurrency, with plots; ``capacity`` finds the most real-time streams under a latency bar,
beside the raw ceiling; ``realtime_dialect`` compares the OpenAI Realtime endpoint with
FunASR's (one session of either: ``realtime_sessions``); ``transport`` and ``batching``
measure the pool (shm against queue) and its batch policy alone; ``cpu_split`` tells the
processes' CPU apart under load; ``funasr_server`` serves FunASR's own server on our models
for side-by-side runs.
"""
