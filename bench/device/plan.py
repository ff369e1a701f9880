"""How long each step of ``bench/device/check.sh`` may take, said once: the shell reads its
limits from here (``eval "$(python -m bench.device.plan shell device)"``) and the tests
check that they add up to less than the budget.

A lend of the GPU machine is 15 minutes in all, its start (minutes) included, so the whole
check must end in well under 8: ``DEVICE_BUDGET_S``. Each limit is what the step took, or
should take, with room for a slow start; a step that reaches it is stopped, marked failed,
and the next one runs. The limits add up to the budget less ``RESERVE_S`` (the table's), so
a run that stops nothing still ends inside the budget.

    python -m bench.device.plan shell device   # LIMIT=([wheels]=50 ...) BUDGET=420 ...
    python -m bench.device.plan show dry        # the dry run's, one line each
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

Mode = Literal["device", "dry"]

DEVICE_BUDGET_S = 420  # 7 minutes: the machine's start and a rerun fit in the 15
DRY_BUDGET_S = 270  # here: 2 cores, tiny models, few streams
RESERVE_S = 10  # for the table, whatever happened before


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    device_s: int  # on the GPU machine: the large model, hundreds of streams
    dry_s: int  # --dry-run here: the tiny model on the CPU
    why: str
    by_default: bool = True  # int8 runs only when --steps names it

    def limit(self, mode: Mode) -> int:
        return self.device_s if mode == "device" else self.dry_s


# In the order they run. The device limits: the install is ~15 s and the import check
# ~20 s (funasr imports every model it has); the CUDA tests start three pools; the large
# model builds in ~15 s and exports in ~30 s; each gateway run is its start (~25 s) and
# a level of real-time streams per ~8 s.
STEPS: tuple[Step, ...] = (
    Step("wheels", 50, 50, "install the carried wheels, import what the steps import"),
    Step("env", 25, 20, "versions, the GPU, onnxruntime's CUDA provider; picks the engine"),
    Step("cuda-tests", 70, 50, "tests/live/workers/test_cuda.py"),
    Step("model", 70, 30, "the synthetic streaming Paraformer and its ONNX export"),
    Step("fidelity", 35, 20, "the engine's text on the GPU against the CPU's"),
    Step("gateway", 70, 35, "two workers on the GPU, real-time streams at rising levels"),
    Step("gateway-1", 55, 30, "one worker on the GPU, the same levels"),
    Step("ceiling", 30, 25, "bench.models.raw_ceiling, no gateway"),
    Step("int8", 60, 30, "the int8 export on the GPU (refused by the workers)", False),
)


def budget(mode: Mode) -> int:
    return DEVICE_BUDGET_S if mode == "device" else DRY_BUDGET_S


def default_steps() -> list[Step]:
    return [step for step in STEPS if step.by_default]


def planned_seconds(mode: Mode) -> int:
    """What a plain run may take at most: every default step at its limit, and the table."""
    return sum(step.limit(mode) for step in default_steps()) + RESERVE_S


def shell(mode: Mode) -> str:
    """Bash assignments: ``LIMIT`` (an associative array), ``BUDGET_DEFAULT``, ``RESERVE``."""
    limits = " ".join(f"[{step.name}]={step.limit(mode)}" for step in STEPS)
    return f"declare -A LIMIT=({limits})\nBUDGET_DEFAULT={budget(mode)}\nRESERVE={RESERVE_S}\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("shell", "show") or argv[1] not in ("device", "dry"):
        print("usage: python -m bench.device.plan shell|show device|dry", file=sys.stderr)
        return 2
    mode: Mode = "device" if argv[1] == "device" else "dry"
    if argv[0] == "shell":
        print(shell(mode), end="")
        return 0
    for step in STEPS:
        default = "" if step.by_default else " (only when --steps names it)"
        print(f"{step.name:<11} {step.limit(mode):>4} s  {step.why}{default}")
    print(f"{'table':<11} {RESERVE_S:>4} s\n{planned_seconds(mode)} s of {budget(mode)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
