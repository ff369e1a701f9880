from __future__ import annotations

import pytest

from bench.load import first_start


@pytest.mark.slow
def test_the_first_start_and_one_after_it_are_timed(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--env", "ASR_MODEL=checksum;ASR_RUNTIME=torch", "--again", "1", "--seconds", "1"]
    assert first_start.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[0] == "| start | cache | seconds to ready | one stream's chunk p50 ms |"
    points = [line.strip("| ").split(" | ") for line in rows[1:]]
    assert [(p[0], p[1]) for p in points] == [("1", "empty"), ("2", "filled")]
    for point in points:
        assert float(point[2]) > 0
        assert float(point[3]) >= 0
