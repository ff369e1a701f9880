from __future__ import annotations

import pytest

from bench.load import cpu_split


def test_the_split_names_the_gateway_each_pool_and_the_generator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = "ASR_MODEL=checksum;ASR_DEVICES=cpu,cpu"
    assert cpu_split.main(["--env", env, "--streams", "2", "--seconds", "1.2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| mode | streams |")
    row = table[2].split(" | ")
    assert row[0] == "| online"
    assert row[1] == "2"
    streaming = [float(cores) for cores in row[6].split(", ")]
    assert len(streaming) == 2  # both streaming workers, told apart by /readyz's pids
    assert row[7] == row[8] == ""  # no offline or VAD pool
    assert float(row[10]) > 0  # the load generator's own CPU at least
    # CPU per chunk answered: the checksum engine's is under /proc's 10 ms ticks.
    assert float(row[12].rstrip(" |")) >= 0
