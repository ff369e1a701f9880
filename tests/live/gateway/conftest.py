"""Fixtures of the live gateway tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed: apt-get install chromium")
    return CHROMIUM
