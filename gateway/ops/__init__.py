"""Running the service: ``python -m gateway``'s server and its drain on signals, the
operator's endpoints (``/healthz``, ``/readyz``, ``/metrics``), HAProxy's agent check, the
side tasks' guard, the log filters for faults of clients and of the operating system, and
the browser page."""
