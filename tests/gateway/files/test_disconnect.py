"""A file transcription's work is cancelled when its client leaves after its body, and only
then: the body's own messages reach the request, and a client gone while sending is the
reading's failure, not a cancel."""

from __future__ import annotations

import anyio
import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Scope

from gateway.files.disconnect import CLIENT_GONE, while_connected
from gateway.files.request import TranscribeError
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}


class Client:
    """The server's ``receive``: the body in two parts, then a disconnect when told."""

    def __init__(self, body: list[Message]) -> None:
        self._body = list(body)
        self.leave = anyio.Event()
        self.reads = 0

    async def receive(self) -> Message:
        self.reads += 1
        if self._body:
            return self._body.pop(0)
        await self.leave.wait()
        return {"type": "http.disconnect"}


BODY: list[Message] = [
    {"type": "http.request", "body": b"hello ", "more_body": True},
    {"type": "http.request", "body": b"world", "more_body": False},
]


async def test_the_work_answers_while_the_client_stays() -> None:
    client = Client(BODY)

    async def work(request: Request) -> bytes:
        return await request.body()

    with within(5):
        assert await while_connected(Request(SCOPE, client.receive), work) == b"hello world"


async def test_the_work_is_cancelled_when_the_client_leaves_after_its_body() -> None:
    client = Client(BODY)
    cancelled = anyio.Event()
    read: list[bytes] = []

    async def work(request: Request) -> bytes:
        read.append(await request.body())
        try:
            await anyio.sleep_forever()  # decoding, for nobody once the client has gone
        finally:
            cancelled.set()
        raise AssertionError("not reached")

    refusals: list[TranscribeError] = []

    async def transcribe() -> None:
        try:
            await while_connected(Request(SCOPE, client.receive), work)
        except TranscribeError as refused:
            refusals.append(refused)

    with within(5):
        async with anyio.create_task_group() as group:
            group.start_soon(transcribe)
            await anyio.wait_all_tasks_blocked()
            assert not cancelled.is_set()
            client.leave.set()
    assert [(r.status, r.reason) for r in refusals] == [(CLIENT_GONE, "client_gone")]
    assert cancelled.is_set()
    assert read == [b"hello world"]


async def test_nothing_is_read_for_the_watch_before_the_body_is_whole() -> None:
    client = Client(BODY)
    reads_before_body: list[int] = []

    async def work(request: Request) -> int:
        await anyio.wait_all_tasks_blocked()
        reads_before_body.append(client.reads)  # the watch has read nothing yet
        await request.body()
        return 0

    with within(5):
        await while_connected(Request(SCOPE, client.receive), work)
    assert reads_before_body == [0]


async def test_a_client_gone_while_sending_fails_the_reading_and_is_no_cancel() -> None:
    client = Client([BODY[0], {"type": "http.disconnect"}])

    async def work(request: Request) -> bytes:
        try:
            return await request.body()
        except ClientDisconnect:
            await anyio.wait_all_tasks_blocked()  # the watch had its chance to cancel
            raise TranscribeError(400, "disconnected", "gone while sending") from None

    with within(5), pytest.raises(TranscribeError) as info:
        await while_connected(Request(SCOPE, client.receive), work)
    assert info.value.reason == "disconnected"


async def test_work_that_never_reads_the_body_answers_without_waiting_for_it() -> None:
    client = Client(BODY)

    async def work(request: Request) -> str:
        return "refused before the body"

    with within(5):
        assert await while_connected(Request(SCOPE, client.receive), work) == (
            "refused before the body"
        )
    assert client.reads == 0


async def test_a_watch_that_fails_leaves_the_work_to_answer() -> None:
    body = list(BODY)

    async def receive() -> Message:
        if body:
            return body.pop(0)
        raise RuntimeError("the server's receive failed")

    async def work(request: Request) -> bytes:
        data = await request.body()
        await anyio.sleep(0.05)  # the watch fails meanwhile
        return data

    with within(5):
        assert await while_connected(Request(SCOPE, receive), work) == b"hello world"
