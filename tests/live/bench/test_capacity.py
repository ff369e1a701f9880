from __future__ import annotations

import argparse

from bench.load.capacity import LoadPoint, Report, markdown


def test_each_point_is_set_against_the_ceilings_around_it() -> None:
    point = LoadPoint("uniform", 30, False, 0, 100.0, 300.0, 400.0, 500.0, 29.0, 3.0, 32.0)
    report = Report("int8", ceiling=30.0, ceilings=[34.0, 30.0, 26.0], ceiling_batch=8)
    report.points.append(point)
    report.capacity["uniform"] = 30
    table = markdown(report, argparse.Namespace())
    assert "| 32.00 | 0.94 |" in table
    assert "- capacity (uniform): 30 streams, 0.94 x the ceiling around it" in table
    assert "- raw ceiling: mean 30.00 (batch 8; each, in order: 34.00, 30.00, 26.00)" in table


def test_a_saturation_point_is_its_throughput_over_the_ceiling() -> None:
    point = LoadPoint("uniform", 16, True, 0, 1.0, 2.0, 3.0, 4.0, 24.0, 8.0, 30.0)
    assert point.of_ceiling == 0.8
