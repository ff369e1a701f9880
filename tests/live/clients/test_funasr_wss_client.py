"""FunASR's own Python client (``vendor/funasr_wss_client.py``, unchanged) run as a user
runs it, against a real uvicorn with the checksum engine.

For each line of its ``wav.scp`` the client opens a connection, sends the config, the PCM
in 60 ms frames and ``{"is_speaking": false, "is_end": true}``, waits for the server's
end-of-input acknowledgement, closes with 1000 and goes on with the next file. Its main
process exits 0 even when a child process failed, so each run is judged by what it wrote:
every file's ``events.jsonl`` (every message the client received), its stdout and stderr.
The client's ``events.jsonl`` keeps only some fields of each message (not ``is_end``), so
one test puts a relay between client and gateway that records the frames as sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import funasr_reads
from tests.helpers.funasr_clients import ClientRun, relay_to, run_client
from tests.helpers.live_gateway import (
    TWO_CHECKSUM_MODELS,
    Wav,
    assert_ended_quietly,
    chunks_by_model,
    log_mark,
    write_wavs,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STREAMING_MODE = {"online": "online", "2pass": "2pass-online"}
FINAL_MODE = {"online": "online", "offline": "offline", "2pass": "2pass-offline"}


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    folder = tmp_path_factory.mktemp("funasr-wss-client")
    (folder / "models.toml").write_text(TWO_CHECKSUM_MODELS)
    env = {"ASR_DEVICES": "cpu", "ASR_MODELS": str(folder / "models.toml")}
    async with serve(env, folder / "server.log") as running:
        yield running


def check_file(run: ClientRun, meeting: str, wav: Wav, mode: str) -> None:
    """One file's session as the client logged it: the streaming partials (each the
    checksum of a longer prefix of the file), the final result over the whole file, then
    the acknowledgement (empty text, final, the session's mode); then a normal close."""
    *partials, final, acknowledgement = events = run.events(meeting)
    assert {event["wav_name"] for event in events} == {wav.name}, events
    prefixes = wav.prefix_ends()
    ends = [prefixes[event["text"]] for event in partials]
    assert ends == sorted(set(ends)), events
    for event in partials:
        assert event["mode"] == STREAMING_MODE[mode], event
        assert event["is_final"] is False, event
    assert (final["mode"], final["text"], final["is_final"]) == (
        FINAL_MODE[mode],
        wav.checksum,
        True,
    ), events
    assert (acknowledgement["mode"], acknowledgement["text"], acknowledgement["is_final"]) == (
        mode,
        "",
        True,
    ), events
    if mode == "offline":
        assert not partials, events
    else:
        assert partials, events  # 1 to 2 s of audio: at least one whole 600 ms chunk
    # Its text file: every non-empty text, the last the final result's.
    assert run.texts(meeting)[-1] == f"{wav.name}\t{wav.checksum}"
    assert f"[MEETING {meeting}] connection closed normally" in run.stdout


@pytest.mark.parametrize("mode", ["online", "offline", "2pass"])
async def test_every_file_of_the_list_is_finished(
    server: Gateway, tmp_path: Path, mode: str
) -> None:
    wavs = write_wavs(tmp_path, 3, seed=1, seconds=(1.0, 2.0))
    mark = log_mark(server)
    run = await run_client(server.port, tmp_path, wavs, "--mode", mode, "--send_without_sleep")
    for index, wav in enumerate(wavs):
        check_file(run, f"0_{index}", wav, mode)
    await assert_ended_quietly(server, mark)


async def test_the_client_reaches_another_model_through_its_host_argument(
    server: Gateway, tmp_path: Path
) -> None:
    """The client builds its URL as ``ws://{host}:{port}``: a host that ends in a query
    whose last parameter takes the port (``HOST:PORT/?model=NAME&port=``) names the model."""
    wavs = write_wavs(tmp_path, 1, seed=5, seconds=(1.0, 1.5))
    before = await chunks_by_model(server)
    host = f"127.0.0.1:{server.port}/?model=other&port="
    options = ("--mode", "online", "--send_without_sleep")
    run = await run_client(server.port, tmp_path, wavs, *options, host=host)
    check_file(run, "0_0", wavs[0], "online")
    after = await chunks_by_model(server)
    assert after.get("other", 0) > before.get("other", 0)
    assert after.get("checksum", 0) == before.get("checksum", 0)


async def test_2pass_in_real_time(server: Gateway, tmp_path: Path) -> None:
    """The client's defaults: 2pass, each 60 ms frame sent 60 ms after the last."""
    wavs = write_wavs(tmp_path, 3, seed=2, seconds=(1.0, 1.5))
    mark = log_mark(server)
    started = anyio.current_time()
    run = await run_client(server.port, tmp_path, wavs)
    assert anyio.current_time() - started >= sum(len(wav.pcm) for wav in wavs) / 32_000 * 0.9
    for index, wav in enumerate(wavs):
        check_file(run, f"0_{index}", wav, "2pass")
    await assert_ended_quietly(server, mark)


async def test_two_processes_split_the_list(server: Gateway, tmp_path: Path) -> None:
    """``--thread_num 2``: process 0 streams files 0 and 1, process 1 file 2, at once."""
    wavs = write_wavs(tmp_path, 3, seed=3, seconds=(1.0, 2.0))
    mark = log_mark(server)
    run = await run_client(
        server.port, tmp_path, wavs, "--mode", "online", "--thread_num", "2", "--send_without_sleep"
    )
    for meeting, wav in zip(["0_0", "0_1", "1_2"], wavs, strict=True):
        check_file(run, meeting, wav, "online")
    assert sorted(path.name for path in (tmp_path / "logs").iterdir()) == [
        "meeting_0_0",
        "meeting_0_1",
        "meeting_1_2",
    ]
    await assert_ended_quietly(server, mark)


async def test_a_hotword_file(server: Gateway, tmp_path: Path) -> None:
    """``--hotword FILE`` (``word weight`` a line): the client sends the words joined with
    commas; the checksum engine ignores them, the session must simply work."""
    (tmp_path / "hotwords.txt").write_text("阿里巴巴 20\n达摩院 10\n\n", encoding="utf-8")
    wavs = write_wavs(tmp_path, 3, seed=4, seconds=(1.0, 2.0))
    mark = log_mark(server)
    run = await run_client(
        server.port, tmp_path, wavs, "--hotword", "hotwords.txt", "--send_without_sleep"
    )
    assert "hotword 阿里巴巴,达摩院" in run.stdout  # what went in the config's hotwords
    for index, wav in enumerate(wavs):
        check_file(run, f"0_{index}", wav, "2pass")
    await assert_ended_quietly(server, mark)


# -- the frames as the gateway sent them -----------------------------------------------


@pytest.mark.parametrize("mode", ["online", "offline", "2pass"])
async def test_every_frame_the_client_gets_is_read_by_funasr(
    server: Gateway, tmp_path: Path, mode: str
) -> None:
    """As sent: every frame has FunASR's result fields, none is our error frame; each
    file's last is the acknowledgement with ``is_end``; every connection closed 1000."""
    wavs = write_wavs(tmp_path, 3, seed=5, seconds=(1.0, 2.0))
    mark = log_mark(server)
    async with relay_to(server) as relay:
        run = await run_client(relay.port, tmp_path, wavs, "--mode", mode, "--send_without_sleep")
    assert relay.close_codes == [1000, 1000, 1000]
    for index, (frames, wav) in enumerate(zip(relay.frames, wavs, strict=True)):
        check_file(run, f"0_{index}", wav, mode)
        for frame in frames:
            funasr_reads(frame)
            assert "type" not in frame, frame
        *results, acknowledgement = frames
        assert acknowledgement == {
            "mode": mode,
            "text": "",
            "wav_name": wav.name,
            "is_final": True,
            "is_end": True,
        }
        assert not any("is_end" in result for result in results), frames
    await assert_ended_quietly(server, mark)
