from __future__ import annotations

import argparse

from bench.load.capacity import LoadPoint, Report, markdown


def test_the_ratio_is_against_the_mean_of_the_ceilings_before_and_after() -> None:
    point = LoadPoint("uniform", 30, False, 0, 100.0, 300.0, 400.0, 500.0, 29.0, 3.0)
    report = Report("int8", ceiling=32.0, ceilings=[34.0, 30.0], ceiling_batch=8)
    report.points.append(point)
    report.capacity["uniform"] = 30
    table = markdown(report, argparse.Namespace())
    assert "- capacity (uniform): 30 streams, 0.94 x the ceiling" in table
    assert "- raw ceiling: 32.00 (batch 8; before and after the gateway: 34.00, 30.00)" in table
