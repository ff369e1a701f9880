"""What watches a served worker besides its results: a hang (it owes results and sends
none) and an exit whose results pipe never ends. Each gives the worker up with a ``Loss``,
which says why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from shared.settings import PoolSettings
from workers.pool.handle import WorkerHandle

EXIT_GRACE_S = 1.0  # from a worker's exit to giving up on the EOF of its results pipe


@dataclass(frozen=True, slots=True)
class Loss:
    """Why the pool gave up a worker that had not simply exited."""

    cause: str  # completes "worker N (pid P) ..."
    error: BaseException | None = None  # an unexpected error: logged with its traceback


async def watch_for_hang(
    handle: WorkerHandle, settings: PoolSettings, lose: Callable[[Loss], None]
) -> None:
    """Kill the worker if it owes results and has sent none for its hang timeout: the
    step timeout, plus real time for the audio it owes (``PoolSettings.hang_timeout_s``).

    A hung worker (a stuck kernel, a deadlock in native code) would otherwise hold its
    sessions forever; killed, it fails them with 1011 and is replaced like a crash.
    """
    while True:
        await anyio.sleep(min(1.0, settings.step_timeout_s / 4))
        owed_s = handle.owed.owed_audio_seconds
        timeout = settings.hang_timeout_s(owed_s)
        if handle.owed.seconds_without_progress() > timeout:
            lose(
                Loss(
                    f"sent no result for {timeout:.3g} s and was killed"
                    f" (ASR_WORKER_STEP_TIMEOUT {settings.step_timeout_s:g} s + {owed_s:.3g}"
                    " s of audio owed x ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND"
                    f" {settings.step_seconds_per_audio_second:g})"
                )
            )
            return


async def watch_for_exit(
    handle: WorkerHandle, lose: Callable[[Loss], None], reading: anyio.CancelScope
) -> None:
    """End the reading of a worker that has exited if its results pipe has not read EOF
    within ``EXIT_GRACE_S``: the parent's end closed or replaced under it never will, and
    the seat would wait on it forever, its streams with it. (A pipe that still holds the
    worker's last results is read whole, EOF included, the moment it is readable.)"""
    exit_code = await handle.wait_exited()
    await anyio.sleep(EXIT_GRACE_S)
    lose(
        Loss(
            f"died (exit code {exit_code}) and its results pipe never read the end:"
            " it was closed under the pool"
        )
    )
    reading.cancel()
