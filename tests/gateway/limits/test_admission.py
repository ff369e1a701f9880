from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from gateway.limits.admission import Admission, Place
from shared.errors import OverCapacityError, ShuttingDownError
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio


async def test_admits_up_to_the_maximum_then_refuses() -> None:
    admission = Admission(2)
    first, second = admission.admit(), admission.admit()
    with pytest.raises(OverCapacityError, match="maximum of 2") as refused:
        admission.admit()
    assert refused.value.close_code == 1013
    first.release()
    admission.admit()
    second.release()
    assert admission.active == 1


async def test_a_place_is_given_back_once_even_if_released_twice() -> None:
    admission = Admission(1)
    with admission.admit() as place:
        assert admission.active == 1
        place.release()
    assert admission.active == 0


async def test_refuses_everyone_while_draining() -> None:
    admission = Admission(5)
    admission.start_drain()
    with pytest.raises(ShuttingDownError) as refused:
        admission.admit()
    assert refused.value.close_code == 1012
    assert not admission.expired.is_set()


async def test_expire_also_drains() -> None:
    admission = Admission(1)
    admission.expire()
    assert admission.draining.is_set()
    assert admission.expired.is_set()


async def test_wait_idle_returns_when_the_last_session_leaves() -> None:
    admission = Admission(3)
    places = [admission.admit() for _ in range(3)]
    done = anyio.Event()

    async def wait() -> None:
        await admission.wait_idle()
        done.set()

    with within(5):
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            for place in places:
                await wait_all_tasks_blocked()
                assert not done.is_set()
                place.release()
    assert done.is_set()


async def test_wait_idle_with_no_session_returns_at_once() -> None:
    with within(1):
        await Admission(1).wait_idle()


def test_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Admission(0)


# -- waiting for a place (ASR_ADMISSION_WAIT) ----------------------------------------------


async def test_a_free_place_is_taken_without_waiting() -> None:
    admission = Admission(1)
    with within(1):
        place = await admission.wait_for_place(30.0, 4)
    assert admission.active == 1
    assert admission.waiting == 0
    place.release()


async def test_no_wait_refuses_at_once_as_admit_does() -> None:
    admission = Admission(1)
    admission.admit()
    with pytest.raises(OverCapacityError, match="maximum of 1"):
        await admission.wait_for_place(0.0, 4)
    assert admission.waiting == 0


async def test_a_released_place_goes_to_the_waiter() -> None:
    admission = Admission(1)
    first = admission.admit()
    got: list[Place] = []

    async def wait() -> None:
        got.append(await admission.wait_for_place(30.0, 4))

    with within(5):
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await wait_all_tasks_blocked()
            assert admission.waiting == 1
            assert not got
            first.release()
    assert len(got) == 1
    assert admission.active == 1  # handed over, never counted free
    assert admission.waiting == 0
    got[0].release()
    assert admission.active == 0


async def test_places_go_to_waiters_in_the_order_they_came() -> None:
    admission = Admission(1)
    held = admission.admit()
    order: list[int] = []

    async def wait(index: int) -> None:
        place = await admission.wait_for_place(30.0, 8)
        order.append(index)
        await wait_all_tasks_blocked()  # hold it until every other task waits again
        place.release()

    with within(5):
        async with anyio.create_task_group() as group:
            for index in range(5):
                group.start_soon(wait, index)
                await wait_all_tasks_blocked()  # queued before the next one starts
            assert admission.waiting == 5
            held.release()
    assert order == [0, 1, 2, 3, 4]
    assert (admission.active, admission.waiting) == (0, 0)


async def test_a_waiter_over_the_bound_is_refused_at_once() -> None:
    admission = Admission(1)
    held = admission.admit()
    with within(5):
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(admission.wait_for_place, 30.0, 2)
            await wait_all_tasks_blocked()
            with pytest.raises(OverCapacityError, match="2 more are waiting") as refused:
                await admission.wait_for_place(30.0, 2)
            assert refused.value.close_code == 1013
            assert admission.waiting == 2
            group.cancel_scope.cancel()
    assert admission.waiting == 0
    held.release()
    assert admission.active == 0


async def test_a_waiter_is_refused_when_no_place_comes_free_in_time() -> None:
    admission = Admission(1)
    admission.admit()
    with within(5), pytest.raises(OverCapacityError, match="ASR_ADMISSION_WAIT"):
        await admission.wait_for_place(0.05, 4)
    assert admission.waiting == 0
    assert admission.active == 1


async def test_the_drain_refuses_every_waiter_at_once() -> None:
    admission = Admission(1)
    held = admission.admit()
    refused: list[int] = []

    async def wait() -> None:
        try:
            await admission.wait_for_place(3600.0, 4)
        except ShuttingDownError as exc:
            refused.append(exc.close_code)

    with within(5):
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(wait)
            await wait_all_tasks_blocked()
            admission.start_drain()
    assert refused == [1012, 1012, 1012]
    assert admission.waiting == 0
    held.release()  # no waiter left to take it
    assert admission.active == 0
    with pytest.raises(ShuttingDownError):
        await admission.wait_for_place(3600.0, 4)


async def test_a_cancelled_waiter_leaves_the_line_and_the_next_gets_the_place() -> None:
    admission = Admission(1)
    held = admission.admit()
    got: list[str] = []

    async def wait(name: str) -> None:
        place = await admission.wait_for_place(30.0, 4)
        got.append(name)
        place.release()

    with within(5):
        async with anyio.create_task_group() as group:
            first_scope = anyio.CancelScope()
            group.start_soon(_in_scope, first_scope, wait, "first")
            await wait_all_tasks_blocked()
            group.start_soon(wait, "second")
            await wait_all_tasks_blocked()
            first_scope.cancel()
            await wait_all_tasks_blocked()
            assert admission.waiting == 1
            held.release()
    assert got == ["second"]
    assert admission.active == 0


async def _in_scope(
    scope: anyio.CancelScope, task: Callable[[str], Awaitable[None]], name: str
) -> None:
    with scope:
        await task(name)


def test_a_session_that_costs_more_takes_more_places_or_none() -> None:
    """A streaming SenseVoice session costs several streams (``session_places``): it
    takes its extra places at once or is refused holding none, and gives them back."""
    admission = Admission(max_sessions=5)
    first = admission.admit()
    extra = admission.admit_more(3)
    assert admission.active == 4
    other = admission.admit()
    with pytest.raises(OverCapacityError, match="takes 4 of the server's 5 session places"):
        admission.admit_more(3)
    assert admission.active == 5  # the refusal held nothing
    extra.release()
    extra.release()  # given back once
    assert admission.active == 2
    assert admission.admit_more(0) is not None
    assert admission.active == 2
    first.release()
    other.release()
    assert admission.active == 0


def test_more_places_are_refused_while_draining() -> None:
    admission = Admission(max_sessions=5)
    admission.admit()
    admission.start_drain()
    with pytest.raises(ShuttingDownError):
        admission.admit_more(1)
