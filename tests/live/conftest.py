"""Fixtures of every live test: pools and clients driven by AnyIO run on uvloop, the loop
users get (``tests.helpers.loops``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.loops import USERS_LOOP


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return USERS_LOOP
