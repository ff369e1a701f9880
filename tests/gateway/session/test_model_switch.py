"""A config inside an open utterance that names another model: before the session's first
audio the utterance starts again on that model, and nothing went to the first one's pools;
after audio, or against the URL's ``?model=``, it is refused (1008), never kept silently."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from gateway.funasr.config import SessionConfig
from gateway.funasr.parser import (
    AudioReceived,
    ConfigReceived,
    ConfigUpdated,
    EndOfUtterance,
    Event,
)
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.session.outbox import Outbox
from gateway.session.pipeline import Pipeline
from gateway.session.serving import ServedModel, Serving
from shared.errors import ProtocolError, UnknownModelError
from tests.helpers.fake_pool import fake_model
from tests.helpers.utterance import SETTINGS, loud

pytestmark = pytest.mark.anyio

ONLINE = SessionConfig(mode="online", chunk_size=(0, 1, 5))  # 1920-byte chunks


def _model(name: str) -> Any:
    return fake_model(name)


class TwoModels:
    """A pipeline serving models ``a`` (the default) and ``b``, on fake pools."""

    def __init__(self, url_model: str | None = None) -> None:
        self.models = {"a": _model("a"), "b": _model("b")}

        def model(name: str | None) -> Any:
            if name is None:
                return self.models["a"]
            if name not in self.models:
                raise UnknownModelError(f"model {name!r} is not served here")
            return self.models[name]

        settings = SimpleNamespace(
            max_segment_bytes=SETTINGS.max_segment_bytes, endpoint=SETTINGS.endpoint
        )
        serving = SimpleNamespace(
            default=self.models["a"],
            model=model,
            settings=settings,
            budget=AudioBudget(1 << 30),
            admission=Admission(64),
            hotword_rules=(),
            known_speakers=(),
        )
        self.events_in, events = anyio.create_memory_object_stream[Event](8)
        self.outbox = Outbox()
        chosen = None if url_model is None else cast(ServedModel, self.models[url_model])
        self.pipeline = Pipeline(cast(Serving, serving), events, self.outbox, lambda: None, chosen)

    def streams_of(self, name: str) -> int:
        return len(self.models[name].pool.streams)

    def frames(self) -> list[dict[str, Any]]:
        frames = []
        while (unsent := self.outbox.next_unsent()) is not None:
            number, frame = unsent
            self.outbox.sent(number)
            frames.append(json.loads(frame))
        return frames


async def _run(session: TwoModels, events: list[Event]) -> None:
    """The events through the forwarder and writer; what the forwarder raised, raised."""
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(session.pipeline.forward)
            group.start_soon(session.pipeline.write)
            for event in events:
                await session.events_in.send(event)
                await wait_all_tasks_blocked()
            session.events_in.close()
            group.cancel_scope.cancel()
    except* (ProtocolError, UnknownModelError) as refused:
        (error,) = refused.exceptions
        raise error from None


async def test_before_any_audio_the_open_utterance_starts_again_on_the_model_named() -> None:
    session = TwoModels()
    named = SessionConfig(mode="online", chunk_size=(0, 1, 5), model="b")
    pcm = loud(120)
    async with anyio.create_task_group() as group:
        group.start_soon(session.pipeline.forward)
        group.start_soon(session.pipeline.write)
        await session.events_in.send(ConfigReceived(ONLINE))
        await session.events_in.send(ConfigUpdated(named))
        await session.events_in.send(AudioReceived(pcm))
        await session.events_in.send(EndOfUtterance())
        await wait_all_tasks_blocked()
        assert (session.streams_of("a"), session.streams_of("b")) == (0, 1)
        (stream,) = session.models["b"].pool.streams
        assert bytes(stream.audio) == pcm
        assert stream.finished
        stream.give("from b", final=True)
        await wait_all_tasks_blocked()
        frames = session.frames()
        assert [(f["text"], f["is_final"]) for f in frames] == [("from b", True)]
        assert (session.models["a"].places.active, session.models["b"].places.active) == (0, 1)
        session.events_in.close()


async def test_naming_the_same_model_again_changes_nothing() -> None:
    session = TwoModels()
    same = SessionConfig(mode="online", chunk_size=(0, 1, 5), model="a", wav_name="x")
    await _run(session, [ConfigReceived(ONLINE), ConfigUpdated(same), AudioReceived(loud(60))])
    assert (session.streams_of("a"), session.streams_of("b")) == (1, 0)
    assert (session.models["a"].places.active, session.models["b"].places.active) == (1, 0)


async def test_after_audio_another_model_is_refused() -> None:
    session = TwoModels()
    named = SessionConfig(mode="online", chunk_size=(0, 1, 5), model="b")
    with pytest.raises(ProtocolError, match="since its first audio"):
        await _run(session, [ConfigReceived(ONLINE), AudioReceived(loud(60)), ConfigUpdated(named)])
    assert session.streams_of("b") == 0


async def test_against_the_urls_model_another_is_refused_even_before_audio() -> None:
    session = TwoModels(url_model="a")
    named = SessionConfig(mode="online", chunk_size=(0, 1, 5), model="b")
    with pytest.raises(ProtocolError, match="the URL chose model 'a'"):
        await _run(session, [ConfigReceived(ONLINE), ConfigUpdated(named)])
    assert (session.streams_of("a"), session.streams_of("b")) == (0, 0)


async def test_a_model_not_served_is_refused_inside_an_utterance_too() -> None:
    session = TwoModels()
    named = SessionConfig(mode="online", chunk_size=(0, 1, 5), model="nope")
    with pytest.raises(UnknownModelError):
        await _run(session, [ConfigReceived(ONLINE), ConfigUpdated(named)])
