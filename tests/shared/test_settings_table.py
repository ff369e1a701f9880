from __future__ import annotations

from shared import settings_table
from shared.env import Setting
from shared.settings_readme import PAGE, page_with_table
from shared.settings_table import SETTINGS


def test_the_settings_pages_table_is_the_generated_one() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page == page_with_table(page), "run: python -m shared.settings_readme"


def test_every_setting_is_in_the_table_once() -> None:
    declared = [v for v in vars(settings_table).values() if isinstance(v, Setting)]
    assert sorted(s.name for s in declared) == sorted(s.name for s in SETTINGS)
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)


def test_every_setting_is_documented() -> None:
    for setting in SETTINGS:
        assert setting.name.startswith("ASR_")
        assert setting.doc
        assert "\n" not in setting.doc
        assert setting.default_text
