from __future__ import annotations

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from gateway.admission import Admission
from shared.errors import OverCapacityError, ShuttingDownError

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

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            for place in places:
                await wait_all_tasks_blocked()
                assert not done.is_set()
                place.release()
    assert done.is_set()


async def test_wait_idle_with_no_session_returns_at_once() -> None:
    with anyio.fail_after(1):
        await Admission(1).wait_idle()


def test_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Admission(0)
