"""Hotwords' text corrections on a real model's results, by construction: the tiny
random-weight offline Paraformer (which no hotword biases) decodes a clip; a hotword that
sounds like three characters of its text (one of them swapped for a homophone) must replace
them, one that differs by a whole syllable must not, and a ``wrong=>right`` rule on its own
text must fire. Real weights would change the texts, not the method."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.funasr import corrections
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.loops import GatewayClient
from tests.helpers.seaco import clip, hotword_gateway, offline_text

pytestmark = pytest.mark.slow

CJK_FIRST, CJK_LAST = 0x4E00, 0x9FA5


@pytest.fixture(scope="module")
def client(tiny_offline_model: Path) -> Iterator[TestClient]:
    with hotword_gateway(tiny_offline_model) as gateway:
        yield gateway


def _homophone(char: str) -> str:
    """Another character with the same toneless pinyin."""
    syllable = corrections._syllable(char)
    for code in range(CJK_FIRST, CJK_LAST):
        other = chr(code)
        if other != char and corrections._syllable(other) == syllable:
            return other
    raise AssertionError(f"no homophone of {char!r}")


def _unlike(char: str) -> str:
    """A character whose syllable is wholly other (not the same, not one merge away)."""
    for other in "啊哦":
        if corrections._alike(corrections._syllable(other), corrections._syllable(char)) == 0:
            return other
    raise AssertionError(f"no unlike syllable for {char!r}")


def _window(text: str) -> str:
    """Three CJK characters of ``text`` in a row, found once in it."""
    for at in range(len(text) - 2):
        window = text[at : at + 3]
        if all(CJK_FIRST <= ord(c) <= CJK_LAST for c in window) and text.count(window) == 1:
            return window
    raise AssertionError(f"no three CJK characters in a row in {text!r}")


def test_a_hotword_that_sounds_like_the_text_replaces_it_and_a_near_miss_does_not(
    client: TestClient,
) -> None:
    audio = clip(3, 2.0)
    with client.websocket_connect("/") as ws:
        plain = offline_text(ws, audio, None)
        window = _window(plain)
        sounds_alike = window[0] + _homophone(window[1]) + window[2]
        near_miss = window[0] + _unlike(window[1]) + window[2]
        corrected = offline_text(ws, audio, sounds_alike)
        missed = offline_text(ws, audio, near_miss)
        ruled = offline_text(ws, audio, f"{window}=>RULE")
    assert corrected == plain.replace(window, sounds_alike)
    assert corrected != plain
    assert missed == plain
    assert ruled == plain.replace(window, "RULE")


def test_the_servers_rules_file_corrects_and_a_bad_one_stops_the_start(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text("# the checksum engine's text\n3200:=>two-hundred-ms:\n", encoding="utf-8")
    settings = GatewaySettings(
        pool=PoolSettings(model="checksum", devices=("cpu",)),
        idle_timeout_s=30.0,
        hotword_rules_file=str(rules),
    )
    audio = clip(1, 0.2)  # 3,200 samples
    with GatewayClient(create_app(settings)) as gateway, gateway.websocket_connect("/") as ws:
        text = offline_text(ws, audio, None)
    assert text.startswith("two-hundred-ms:")
    rules.write_text("3200:=>ok\nnot a rule\n", encoding="utf-8")
    with (  # the lifespan's error, as uvicorn would log it before exiting
        pytest.raises(Exception, match=r"rules.txt:2: not a rule"),
        GatewayClient(create_app(settings)),
    ):
        pass
