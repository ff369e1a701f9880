"""Small statistics shared by the benchmarks: percentiles of a sample, median and spread."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Distribution:
    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float


def distribution(values: list[float]) -> Distribution:
    if not values:
        nan = math.nan
        return Distribution(0, nan, nan, nan, nan, nan)
    data = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return Distribution(
        len(values), float(data.mean()), float(p50), float(p95), float(p99), float(data.max())
    )
