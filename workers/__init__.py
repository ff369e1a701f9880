"""Model workers: spawned processes that hold a model and decode audio for the gateway.

- ``pool/``: the parent's side: the pool, its handle on each worker process, the streams.
- ``ipc/``: the wire between the two sides, both ends: the command header and the slab, the
  two transports (the parent's sender, the worker's receiver), what a worker is launched with.
- ``worker/``: the child's side: its loop, its batch policy.
- ``engines/``: what a worker runs on the audio, and their registry.
- ``models/``: model tooling: resolving a model setting, the ONNX export, synthetic models.

``pool/`` and ``worker/`` never import each other; both use ``ipc/`` and ``engines/``, and
``models/`` uses ``engines/`` (``tests/workers/test_imports.py``).
"""
