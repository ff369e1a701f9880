"""What a spawned worker is given, and how the parent starts it without importing it.

The parent pickles one :class:`WorkerLaunch` into the worker (``multiprocessing``'s spawn
context), and names the worker's entry point rather than importing it: the worker's loop
and its batch policy stay out of the server process, and the parent side of ``workers/``
never imports the child side (nor the other way round).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from shared.messages import EngineSpec
from shared.settings_table import BatchHold
from workers.ipc.channel import Channel

# The worker's entry point, ``module:function``: called with the launch and the engine loader.
WORKER_MAIN = "workers.worker.main:worker_main"


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How a worker forms an engine step from the chunks waiting for it
    (``workers.worker.batching``).

    Everything already waiting goes in (up to ``max_batch`` chunks). A step with fewer may be
    held open for more: ``hold="due"``, while another open stream's next chunk is due;
    ``hold="wait"``, for whoever comes within ``wait_s``. Either way never past the moment
    where the oldest chunk, given the time such a step takes, would miss ``deadline_s``
    from its send; never when a chunk is a stream's last (finals go at once), unless the
    engine decodes at the final piece: then finals are what a held step gathers.
    """

    max_batch: int
    wait_s: float = 0.0
    deadline_s: float = 0.6
    hold: BatchHold = "wait"

    @property
    def holds(self) -> bool:
        """Whether a step is ever held open (otherwise it takes what is waiting)."""
        return self.hold == "due" or self.wait_s > 0


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    spec: EngineSpec  # the engine to load, on which device
    channel: Channel  # where its commands come from
    results: Connection  # where its messages go
    policy: BatchPolicy
    nice: int = 0  # how much lower than the gateway the worker runs (Unix nice)
    # Set first thing in the worker: the one GPU it sees (workers.ipc.devices).
    environment: Mapping[str, str] = field(default_factory=dict)


def run_entry_point(
    entry_point: str, launch: WorkerLaunch, load: Callable[[EngineSpec], object]
) -> None:
    """The spawned process's target: import ``entry_point`` (``module:function``) and call
    it. ``load`` builds the engine (a module-level function, pickled by name)."""
    module, _, name = entry_point.partition(":")
    getattr(importlib.import_module(module), name)(launch, load)
