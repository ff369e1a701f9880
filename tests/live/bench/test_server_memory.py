from __future__ import annotations

import pytest

from bench.common import procfs
from bench.load import server_memory


def test_pss_splits_what_rss_counts_in_full() -> None:
    rss, pss = procfs.rss_mib("self"), procfs.pss_mib("self")
    assert 0 < pss <= rss


@pytest.mark.slow
def test_each_worker_count_is_measured_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    env = "ASR_MODEL=checksum"
    argv = ["--env", env, "--workers", "2", "--streams", "1", "--seconds", "1"]
    assert server_memory.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| workers | weights |")
    points = [row.strip("| ").split(" | ") for row in rows[1:]]
    assert [(p[0], p[1]) for p in points] == [("2", "mapped"), ("2", "own copy")]
    for point in points:
        workers = point[3].split(", ")
        assert len(workers) == int(point[0])
        held = [point[2], *workers]
        figures = [tuple(float(n) for n in cell.split(" / ")) for cell in held]
        assert all(0 < pss <= rss for rss, pss in figures)
        assert float(point[4]) == pytest.approx(sum(pss for _, pss in figures), abs=len(held))
