"""The parent's side: the worker pool, its handle on each worker process, the streams.

``from workers.pool import WorkerPool`` is the library's entry point.
"""

from workers.pool.pool import ResultObserver, WorkerPool
from workers.pool.seats import Urgency, WorkerStatus
from workers.pool.stream import Audio, AudioStream

__all__ = ["Audio", "AudioStream", "ResultObserver", "Urgency", "WorkerPool", "WorkerStatus"]
