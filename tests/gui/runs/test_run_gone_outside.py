"""A run folder deleted outside the studio (in a file manager) while the Runs page lists it."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from tests.gui.conftest import make_project
from tests.gui.runs.test_runs_page import make_page, train_once, two_runs_chosen


def test_delete_goes_on_past_a_run_already_gone(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                tmp_path: Path) -> None:
    page, first, second = two_runs_chosen(qtbot, context, config, tmp_path)
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


def test_a_run_deleted_on_the_runs_page_leaves_the_train_page(qtbot: QtBot, context: StudioContext,
                                                              config: TrainConfig, tmp_path: Path) -> None:
    from studio.gui.training.page import TrainPage
    from tests.gui.conftest import close_plots

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    first = train_once(qtbot, context, config, "--steps", "3", "--rate", "1000")
    failed = train_once(qtbot, context, config, "--steps", "10000", "--rate", "1000", "--crash-at", "3")
    ctl = context.run_controller
    assert ctl.run_dir == failed and train.resume_button.isEnabled()  # the Train page shows the failed run
    page.refresh()
    page.table.select_paths([failed.name])
    qtbot.waitUntil(lambda: page.opened is not None and page.opened.run_dir == failed, timeout=10000)
    page.buttons["delete"].click()
    assert not failed.exists()
    assert page.opened is None and page.plots.loss.smooth.getData()[1] is None  # its plots went with it
    # The Train page shows the newest run left, not the deleted one with Resume on.
    qtbot.waitUntil(lambda: ctl.run_dir == first and ctl.model.status == "finished", timeout=10000)
    assert not train.resume_button.isEnabled()


def test_resume_on_the_train_page_of_a_run_gone_says_so(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                         tmp_path: Path) -> None:
    from studio.gui.training.page import TrainPage
    from tests.gui.conftest import close_plots

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    failed = train_once(qtbot, context, config, "--steps", "10000", "--rate", "1000", "--crash-at", "3")
    assert train.resume_button.isEnabled()
    shutil.rmtree(failed)  # in a file manager
    assert not train.resume_training()
    assert train.message.text() == f"{failed} no longer exists (deleted or moved): there is nothing to resume."
    assert not train.resume_button.isEnabled() and context.run_controller.run_dir is None


def test_overlay_names_a_run_gone(qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    page, first, _second = two_runs_chosen(qtbot, context, config, tmp_path)
    shutil.rmtree(first)
    page.buttons["overlay"].click()
    qtbot.waitUntil(lambda: page.message.text().startswith("Comparing"), timeout=10000)
    assert len(page.overlay.curves) == 1
    assert page.message.text() == (f"Comparing 1 run; {first.name} no longer exists (deleted or moved; Refresh "
                                   "reads the list again).")
