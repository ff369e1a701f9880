"""Which seat a new stream goes to, and at what nice value each seat's worker runs: in a
niced pool, the first ``urgent_workers`` seats stay at nice 0 for urgent streams (never every
seat), and each class goes to its own seats but when none of them is ready."""

from __future__ import annotations

import pytest

from shared.errors import OverCapacityError
from shared.messages import EngineSpec
from shared.settings import PoolSettings
from workers.pool.handle import WorkerHandle, WorkerState
from workers.pool.seats import Seat, Urgency, choose_seat, seat_nice, urgent_seats

URGENT, BACKGROUND = Urgency.URGENT, Urgency.BACKGROUND


def pool(workers: int, nice: int, urgent: int = 1) -> PoolSettings:
    return PoolSettings(
        model="checksum", devices=("cpu",) * workers, worker_nice=nice, urgent_workers=urgent
    )


def seats(settings: PoolSettings, streams: list[int]) -> list[Seat]:
    """Ready seats as the pool makes them, holding ``streams[i]`` open streams each."""
    made = []
    for index, count in enumerate(streams):
        spec = EngineSpec("checksum")
        handle = WorkerHandle(index, spec, settings, nice=seat_nice(settings, index))
        handle.state = WorkerState.READY
        handle.streams = {stream_id: Sink() for stream_id in range(count)}
        made.append(Seat(index, spec, handle, urgent=index < urgent_seats(settings)))
    return made


class Sink:
    def deliver(self, message: object) -> None:
        pass

    def fail(self, error: object) -> None:
        pass


@pytest.mark.parametrize(
    ("workers", "nice", "urgent", "kept"),
    [
        (2, 0, 1, 0),  # not niced: every seat takes either class, as before
        (2, 6, 1, 1),
        (3, 6, 1, 1),
        (3, 6, 2, 2),
        (3, 6, 5, 2),  # never every seat: background work keeps one niced
        (1, 6, 1, 0),  # one worker: it runs niced, as before
        (2, 6, 0, 0),  # none asked for: the whole pool niced, as before
    ],
)
def test_a_niced_pool_keeps_some_seats_at_nice_0_never_all(
    workers: int, nice: int, urgent: int, kept: int
) -> None:
    settings = pool(workers, nice, urgent)
    assert urgent_seats(settings) == kept
    assert [seat_nice(settings, i) for i in range(workers)] == [0] * kept + [nice] * (
        workers - kept
    )


def test_urgent_streams_go_to_a_nice_0_seat_even_when_it_is_the_busier() -> None:
    pool_seats = seats(pool(3, 6), [4, 0, 1])
    chosen = choose_seat(pool_seats, URGENT)
    assert (chosen.index, chosen.urgent, chosen.handle.nice) == (0, True, 0)


def test_background_streams_never_go_to_an_idle_nice_0_seat() -> None:
    pool_seats = seats(pool(3, 6), [0, 3, 2])
    chosen = choose_seat(pool_seats, BACKGROUND)
    assert (chosen.index, chosen.urgent, chosen.handle.nice) == (2, False, 6)


def test_each_class_goes_to_the_least_loaded_of_its_own_seats() -> None:
    pool_seats = seats(pool(4, 6, urgent=2), [2, 1, 5, 4])
    assert choose_seat(pool_seats, URGENT).index == 1
    assert choose_seat(pool_seats, BACKGROUND).index == 3


def test_with_no_seat_of_its_class_ready_a_stream_takes_the_other_class_rather_than_fail() -> None:
    urgent_down = seats(pool(2, 6), [0, 3])
    urgent_down[0].handle.state = WorkerState.STARTING  # restarting
    assert choose_seat(urgent_down, URGENT).index == 1
    niced_down = seats(pool(2, 6), [3, 0])
    niced_down[1].handle.state = WorkerState.DEAD
    assert choose_seat(niced_down, BACKGROUND).index == 0


def test_a_pool_that_is_not_niced_ignores_the_class() -> None:
    pool_seats = seats(pool(2, 0), [1, 0])
    assert not any(seat.urgent for seat in pool_seats)
    assert choose_seat(pool_seats, URGENT).index == 1
    assert choose_seat(pool_seats, BACKGROUND).index == 1


def test_no_seat_ready_refuses_the_stream() -> None:
    pool_seats = seats(pool(2, 6), [0, 0])
    for seat in pool_seats:
        seat.handle.state = WorkerState.STARTING
    with pytest.raises(OverCapacityError, match="no worker is ready"):
        choose_seat(pool_seats, URGENT)


def test_a_seat_reports_its_nice_value_and_class() -> None:
    first, second = seats(pool(2, 6), [0, 0])
    assert (first.status("m").nice, first.status("m").urgent) == (0, True)
    assert (second.status("m").nice, second.status("m").urgent) == (6, False)
