"""Everything a GPU machine should measure, in one call: ``check.sh`` runs ``check``'s steps
within ``plan``'s limits: the wheels it lacks (``wheels``, from ``requirements``; each module
the steps use imported there, ``imports``), the machine and the CUDA tests (``machine``),
the model and the engine's fidelity on the device (``fidelity``), the gateway's workers
placed on it (``placement``) and real-time streams through it (``gateway``), the raw
ceiling (``ceiling``); each writes its record (``records``) into one Markdown table
(``table``) with the streams one GPU serves at p99 463 ms (``target``).
"""
