"""Hotwords on every result, through each dialect in process (``tests.helpers.session_harness``):
a session's ``wrong=>right`` hotword and the server's rules (ASR_HOTWORD_RULES) correct the
partials and the final, on FunASR's protocol, OpenAI's realtime and Deepgram's live API. The
echo pool answers with the checksum engine's text (``<samples>:<crc32>``), so the rules are
written on that text: a rule that must fire (the sample count's prefix) and a near miss
that must not (a count that never comes)."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from gateway.deepgram.dialect import serve_listen
from gateway.funasr.corrections import Rule
from gateway.openai_api.realtime.dialect import serve_realtime
from gateway.session.entry import serve_websocket
from tests.helpers.session_harness import checksum_text, harness_serving, served

pytestmark = pytest.mark.anyio

CHUNK = bytes(range(256)) * 15  # 3,840 bytes: two chunks of chunk_size [0, 1, 5]
CONFIG = {"mode": "online", "chunk_size": [0, 1, 5], "wav_name": "w", "is_speaking": True}
HALF, WHOLE = checksum_text(CHUNK[:1920]), checksum_text(CHUNK)  # "960:...", "1920:..."


def _fixed(text: str) -> str:
    """What the rules below make of a result: 960 samples named, 1920 too."""
    return text.replace("960:", "half:").replace("1920:", "whole:")


async def test_a_sessions_rules_and_the_servers_correct_partials_and_the_final() -> None:
    serving = replace(harness_serving(), hotword_rules=(Rule("1920:", "whole:"),))
    config = {**CONFIG, "hotwords": "960:=>half: 9999:=>never:"}
    async with served(serve_websocket, serving) as client:
        await client.send_json(config)
        await client.send_bytes(CHUNK)
        await client.send_json({"is_speaking": False})
        frames = []
        while not (frame := await client.receive_json()).get("is_final"):
            frames.append(frame)
    assert [f["text"] for f in frames] == [_fixed(HALF), _fixed(WHOLE)]
    assert frame["text"] == _fixed(WHOLE)
    assert _fixed(HALF) != HALF  # both rules fired
    assert _fixed(WHOLE) != WHOLE
    pool = serving.default.pool
    assert pool.streams[0].options.hotwords == ()  # type: ignore[attr-defined]


async def test_deepgrams_keyterm_rules_reach_its_results() -> None:
    serving = harness_serving()
    query = "endpointing=false&keyterm=1920:=>whole:"
    async with served(serve_listen, serving, path="/v1/listen", query=query) as client:
        await client.send_bytes(CHUNK[:1920] * 2)
        await client.send_json({"type": "CloseStream"})
        messages = await client.until_closed()
    finals = [m for m in messages if m["type"] == "Results" and m["is_final"]]
    (final,) = finals
    assert final["channel"]["alternatives"][0]["transcript"] == _fixed(
        checksum_text(CHUNK[:1920] * 2)
    )


async def test_openais_keywords_rules_reach_its_transcripts() -> None:
    serving = harness_serving()
    query = "intent=transcription"
    update = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 16000},
                    "turn_detection": None,
                    "transcription": {"model": "whisper-1", "prompt": "names 1920:=>whole:"},
                }
            },
        },
    }
    async with served(serve_realtime, serving, path="/v1/realtime", query=query) as client:
        assert (await client.receive_json())["type"] == "session.created"
        await client.send_json(update)
        assert (await client.receive_json())["type"] == "session.updated"
        audio = base64.b64encode(CHUNK).decode()
        await client.send_json({"type": "input_audio_buffer.append", "audio": audio})
        await client.send_json({"type": "input_audio_buffer.commit"})
        while (event := await client.receive_json())["type"] != (
            "conversation.item.input_audio_transcription.completed"
        ):
            pass
    assert event["transcript"] == _fixed(WHOLE)
