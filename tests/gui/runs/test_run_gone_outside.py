"""A run folder deleted outside the studio (in a file manager) while the Runs page lists it."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from tests.gui.conftest import make_project
from tests.gui.runs.test_runs_page import make_page, train_once


def test_delete_goes_on_past_a_run_already_gone(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    first = train_once(qtbot, context, config, "--steps", "3", "--rate", "1000")
    second = train_once(qtbot, context, config, "--steps", "3", "--rate", "1000")
    page.refresh()
    page.table.select_paths([first.name, second.name])
    gone, kept = sorted([first, second])[::-1]  # the newest is listed first: the loop meets it first
    shutil.rmtree(gone)
    page.buttons["delete"].click()
    assert not kept.exists()
    assert page.table.summaries == []
    assert gone.name in page.message.text() and "no longer existed" in page.message.text()


def test_resume_of_a_run_gone_says_so(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                      tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "10000", "--rate", "1000", "--crash-at", "3")
    page.refresh()
    page.table.select_paths([run.name])
    assert page.buttons["resume"].isEnabled()
    shutil.rmtree(run)
    assert not page.resume_selected()
    assert not context.run_controller.running
    assert f"{run} no longer exists" in page.message.text()
    assert page.table.summaries == []
