"""Runs chosen together on the Runs page (to compare their loss) stay chosen when the list is read again: a run
that starts or ends meanwhile (the queue's next), or Refresh."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from tests.gui.runs.test_runs_page import train_once, two_runs_chosen


def test_runs_chosen_together_stay_chosen(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                          tmp_path: Path) -> None:
    page, first, second = two_runs_chosen(qtbot, context, config, tmp_path)
    assert {s.path for s in page.table.selected()} == {first, second}
    page.buttons["refresh"].click()
    assert {s.path for s in page.table.selected()} == {first, second}

    third = train_once(qtbot, context, config, "--steps", "3", "--rate", "1000")  # listed first: the rows move down
    assert third in {s.path for s in page.table.summaries}
    assert {s.path for s in page.table.selected()} == {first, second}
    assert page.buttons["overlay"].isEnabled() and not page.buttons["open"].isEnabled()
