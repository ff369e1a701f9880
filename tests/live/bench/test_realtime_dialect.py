"""The dialect benchmark: its reading of each endpoint's results, and a tiny run of it
against its own real gateway."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.load.realtime_dialect import main
from bench.load.realtime_sessions import COMPLETED, DELTA, SessionRecord, plans, take_result


def test_the_openai_deltas_are_timed_from_their_chunks_last_frame_and_verified() -> None:
    audio = np.arange(2 * 9600 + 100, dtype=np.int16)  # two whole chunks and a rest
    (plan,) = plans("openai", "ws://gateway/", [audio], 16000)
    record = SessionRecord()
    sent = [float(i) for i in range(len(plan.frames))] + [30.0]  # the commit at 30
    for k in range(2):
        assert not take_result(plan, record, {"type": DELTA, "delta": "?"}, 100.0 + k, sent)
    assert record.chunk_latencies_s == [100.0 - 5, 101.0 - 11]  # frames 5 and 11
    assert not take_result(plan, record, {"type": DELTA, "delta": plan.expected}, 40.0, sent)
    assert take_result(plan, record, {"type": COMPLETED}, 41.0, sent)
    assert (record.final_s, record.verified) == (11.0, True)

    wrong = SessionRecord()
    for text in ("?", "?", "19300:00000000"):
        take_result(plan, wrong, {"type": DELTA, "delta": text}, 50.0, sent)
    assert take_result(plan, wrong, {"type": COMPLETED}, 51.0, sent)
    assert not wrong.verified


def test_deepgrams_interims_are_timed_and_its_final_verified() -> None:
    audio = np.arange(2 * 9600 + 100, dtype=np.int16)
    (plan,) = plans("deepgram", "ws://gateway/", [audio], 16000)
    assert plan.opening is None  # its query says it all
    record = SessionRecord()
    sent = [float(i) for i in range(len(plan.frames))] + [30.0]  # CloseStream at 30

    def results(text: str, is_final: bool) -> dict[str, object]:
        alternative = {"transcript": text, "confidence": 0.0, "words": []}
        return {"type": "Results", "is_final": is_final, "channel": {"alternatives": [alternative]}}

    for k in range(2):
        assert not take_result(plan, record, results("?", False), 100.0 + k, sent)
    assert record.chunk_latencies_s == [100.0 - 5, 101.0 - 11]
    assert take_result(plan, record, results(plan.expected, True), 41.0, sent)
    assert (record.final_s, record.verified) == (11.0, True)
    error = {"type": "Error", "variant": "SessionError", "description": "limit"}
    assert take_result(plan, SessionRecord(), error, 1.0, sent)


@pytest.mark.slow
def test_a_tiny_run_verifies_every_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    argv = ["--sessions", "2", "--seconds", "2", "--rounds", "1", "--quiet"]
    assert main([*argv, "--json", str(report)]) == 0
    rows = {
        line.split("|")[1].strip(): line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ")
    }
    assert {"funasr", "openai", "deepgram", "openai - funasr", "deepgram - funasr"} <= rows.keys()
    for summary in json.loads(report.read_text())["summaries"]:
        assert (summary["sessions"], summary["errors"], summary["verified"]) == (2, 0, 2)
        # 2 s is three whole chunks per session, each timed; one final each.
        assert summary["chunk_latency_ms"]["count"] == 6
        assert summary["final_latency_ms"]["count"] == 2
        assert summary["gateway_cpu_s_per_audio_h"] > 0
