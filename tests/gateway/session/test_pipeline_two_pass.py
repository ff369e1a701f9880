"""The session's forwarder and writer on a 2pass utterance, in process: pools whose streams
give the results the test hands them, so that an offline decode can be held pending while
the next sentence's partials come, and the outbox read frame by frame."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from gateway.funasr.config import SessionConfig
from gateway.funasr.parser import AudioReceived, ConfigReceived, EndOfUtterance, Event
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.session.outbox import Outbox
from gateway.session.pipeline import Pipeline
from gateway.session.serving import Serving
from tests.helpers.fake_pool import fake_model
from tests.helpers.utterance import SETTINGS, loud, quiet
from workers.pool import Urgency

pytestmark = pytest.mark.anyio

CONFIG = SessionConfig(mode="2pass", chunk_size=(0, 1, 5))  # 1920-byte chunks


class Session:
    """A pipeline on fake pools, its events sent by the test, its frames read back."""

    def __init__(self) -> None:
        model = fake_model()
        self.streaming, self.offline = model.pool, model.whole_utterance_pool
        settings = SimpleNamespace(
            max_segment_bytes=SETTINGS.max_segment_bytes, endpoint=SETTINGS.endpoint
        )
        serving = SimpleNamespace(
            default=model,
            settings=settings,
            budget=AudioBudget(1 << 30),
            admission=Admission(64),
            hotword_rules=(),
            known_speakers=(),
        )
        self.events_in, events = anyio.create_memory_object_stream[Event](8)
        self.outbox = Outbox()
        self.done = 0
        self.pipeline = Pipeline(cast(Serving, serving), events, self.outbox, self._done)

    def _done(self) -> None:
        self.done += 1

    async def frames(self) -> list[dict[str, Any]]:
        """The frames put in the outbox since the last call, once every task waits."""
        await wait_all_tasks_blocked()
        frames = []
        while (unsent := self.outbox.next_unsent()) is not None:
            number, frame = unsent
            self.outbox.sent(number)
            frames.append(json.loads(frame))
        return frames


def texts(frames: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    return [(f["mode"], f["text"], bool(f.get("resent"))) for f in frames]


async def test_partials_go_out_while_the_previous_sentences_offline_decode_is_pending() -> None:
    session = Session()
    async with anyio.create_task_group() as group:
        group.start_soon(session.pipeline.forward)
        group.start_soon(session.pipeline.write)
        await session.events_in.send(ConfigReceived(CONFIG))
        await session.events_in.send(AudioReceived(loud(600) + quiet(300) + loud(120)))
        await wait_all_tasks_blocked()
        first, second = session.streaming.streams
        (offline_first,) = session.offline.streams
        first.give("a")
        first.give("b", final=True)
        second.give("c")
        assert texts(await session.frames()) == [
            ("2pass-online", "a", False),
            ("2pass-online", "b", False),
            ("2pass-online", "c", False),  # not waiting behind sentence 0's offline pass
        ]
        offline_first.give("AB.", final=True)
        assert texts(await session.frames()) == [
            ("2pass-offline", "AB.", False),
            ("2pass-online", "c", True),  # what that frame cleared in FunASR's clients
        ]
        second.give("d")
        await session.events_in.send(EndOfUtterance())
        await wait_all_tasks_blocked()
        second.give("", final=True)
        _, offline_second = session.offline.streams
        offline_second.give("CD.", final=True)
        last = await session.frames()
        assert texts(last) == [("2pass-online", "d", False), ("2pass-offline", "CD.", False)]
        assert last[-1]["is_final"] is True
        assert session.done == 1
        session.events_in.close()


async def test_offline_frames_keep_sentence_order_and_the_final_comes_last() -> None:
    """Sentence 1's offline decode finishes before sentence 0's: its frame waits."""
    session = Session()
    async with anyio.create_task_group() as group:
        group.start_soon(session.pipeline.forward)
        group.start_soon(session.pipeline.write)
        await session.events_in.send(ConfigReceived(CONFIG))
        audio = loud(600) + quiet(300) + loud(600) + quiet(300) + loud(120)
        await session.events_in.send(AudioReceived(audio))
        await session.events_in.send(EndOfUtterance())
        for number in range(3):
            await wait_all_tasks_blocked()  # the forwarder opens each once the writer takes one
            session.streaming.streams[number].give(f"p{number}", final=True)
        assert texts(await session.frames()) == [
            ("2pass-online", "p0", False),
            ("2pass-online", "p1", False),
            ("2pass-online", "p2", False),
        ]
        first, second, third = session.offline.streams
        third.give("S2.", final=True)
        second.give("S1.", final=True)
        assert await session.frames() == []
        assert session.done == 0
        first.give("S0.", final=True)
        frames = await session.frames()
        assert texts(frames) == [
            ("2pass-offline", "S0.", False),
            ("2pass-online", "p1p2", True),
            ("2pass-offline", "S1.", False),
            ("2pass-online", "p2", True),
            ("2pass-offline", "S2.", False),
        ]
        assert [f["is_final"] for f in frames] == [False, False, False, False, True]
        assert session.done == 1
        session.events_in.close()


async def test_the_last_sentence_is_decoded_as_urgent_the_earlier_ones_as_background() -> None:
    """What the pool is asked for: a niced offline pool decodes the final at nice 0."""
    session = Session()
    async with anyio.create_task_group() as group:
        group.start_soon(session.pipeline.forward)
        group.start_soon(session.pipeline.write)
        await session.events_in.send(ConfigReceived(CONFIG))
        await session.events_in.send(AudioReceived(loud(600) + quiet(300) + loud(120)))
        await session.events_in.send(EndOfUtterance())
        for number in range(2):
            await wait_all_tasks_blocked()
            session.streaming.streams[number].give(f"p{number}", final=True)
        await wait_all_tasks_blocked()
        assert [s.urgency for s in session.offline.streams] == [
            Urgency.BACKGROUND,
            Urgency.URGENT,
        ]
        for number, stream in enumerate(session.offline.streams):
            stream.give(f"S{number}.", final=True)
        assert texts(await session.frames())[-1] == ("2pass-offline", "S1.", False)
        session.events_in.close()
