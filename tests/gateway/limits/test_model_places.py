"""A model's own cap: full refuses its next session with 1013, and a place given back is
taken again."""

from __future__ import annotations

import pytest

from gateway.limits.model_places import ModelPlaces
from shared.errors import OverCapacityError


def test_a_full_model_refuses_its_next_session_until_a_place_is_given_back() -> None:
    places = ModelPlaces("en", 2)
    first, second = places.take(), places.take()
    assert places.full
    with pytest.raises(OverCapacityError, match="model 'en' is serving its maximum of 2") as full:
        places.take()
    assert full.value.close_code == 1013
    first.release()
    first.release()  # twice is once
    assert places.active == 1
    places.take()
    second.release()
    assert places.active == 1


def test_a_model_without_a_cap_of_its_own_is_never_full() -> None:
    places = ModelPlaces("zh", None)
    for _ in range(1000):
        places.take()
    assert not places.full
