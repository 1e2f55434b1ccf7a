"""A training left running ("keep running") is found again when the window is rebuilt: the Train page
follows it with Stop and Kill, the Runs page stops it, and a second run on the same GPU asks first."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil
import pytest
from fixtures.holds import hold_at, release
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.runs.live import find_live_runs, live_trainer
from studio.gui.context import StudioContext
from studio.gui.runner.attached_run import AttachedRun
from studio.gui.runs.page import RunsPage
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, fake_command, make_project


def _window(qtbot: QtBot, tmp_path: Path, project: object) -> tuple[StudioContext, TrainPage, RunsPage]:
    """What the main window builds: one context (with its run controller), the Train and Runs pages."""
    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    context.run_controller.command_factory = fake_command("--steps", "20", "--rate", "20")
    context.set_project(project)  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    runs = RunsPage(context, context.run_controller)
    for page in (train, runs):
        qtbot.addWidget(page, before_close_func=close_plots)
    return context, train, runs


def test_a_detached_run_is_followed_again_and_stopped_from_the_runs_page(qtbot: QtBot, config: TrainConfig,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 3, 8)  # detached while held at 3; followed again from 3 to 8, stopped there
    project = make_project(tmp_path, config)
    first, train, _runs = _window(qtbot, tmp_path, project)
    assert train.start_training()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 3, timeout=15000)
    run_dir = first.run_controller.run_dir
    assert run_dir is not None
    train.ask_close = lambda: "keep"
    assert train.can_close()
    train.shutdown()  # the window closes; the training goes on
    first.run_controller.shutdown(detach=True)
    live = live_trainer(run_dir)
    assert live is not None
    try:
        context, train, runs = _window(qtbot, tmp_path, project)  # the studio starts again
        ctl = context.run_controller
        assert ctl.running and ctl.run_dir == run_dir
        assert train.stop_button.isEnabled() and train.kill_button.isEnabled()
        assert not train.train_button.isEnabled()
        release(run_dir, 3)
        qtbot.waitUntil(lambda: ctl.model.step >= 8, timeout=15000)  # live plots again
        qtbot.waitUntil(lambda: "caching latents" in train.console.text.toPlainText(), timeout=5000)  # its console

        # A second run while it trains is refused by the one controller…
        assert ctl.start_config(resolve_paths(config, tmp_path)) is None
        runs.refresh()
        runs.table.select_paths([run_dir.name])
        row = next(s for s in runs.table.summaries if s.path == run_dir)
        assert row.status == "running" and runs.buttons["stop"].isEnabled()
        runs.buttons["stop"].click()
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        assert ctl.model.status == "stopped" and ctl.model.step == 8
        assert train.train_button.isEnabled() and not train.stop_button.isEnabled()
        assert live_trainer(run_dir) is None
        runs.refresh()
        assert next(s for s in runs.table.summaries if s.path == run_dir).status == "stopped"
        context.run_controller.shutdown()
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


def test_a_second_run_on_a_busy_gpu_asks_first(qtbot: QtBot, config: TrainConfig, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 1)  # busy until the test ends it
    project = make_project(tmp_path, config)
    first, train, _runs = _window(qtbot, tmp_path, project)
    assert train.start_training()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 1, timeout=15000)
    run_dir = first.run_controller.run_dir
    first.run_controller.shutdown(detach=True)
    live = live_trainer(run_dir)  # type: ignore[arg-type]
    assert live is not None
    try:
        # Another window that does not follow it (as a second studio would): Train asks first.
        other = StudioContext(QSettings(str(tmp_path / "other.ini"), QSettings.Format.IniFormat))
        other.set_project(project)  # type: ignore[arg-type]
        found = other.run_controller.source
        assert isinstance(found, AttachedRun)
        other.run_controller.shutdown(detach=True)  # let go of the run it found, as a window that did not find it
        other.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
        page = TrainPage(other, other.run_controller)
        qtbot.addWidget(page, before_close_func=close_plots)
        asked: list[str] = []
        page.confirm = lambda title, text: asked.append(f"{title}: {text}") is None and False
        assert not page.start_training()
        assert asked and "The GPU is busy" in asked[0] and run_dir.name in asked[0]  # type: ignore[union-attr]
        assert [r.run_dir for r in find_live_runs(project.runs_dir)] == [run_dir]  # type: ignore[attr-defined]
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


def test_a_queued_run_left_training_is_followed_with_its_queue_which_goes_on_after_it(
        qtbot: QtBot, config: TrainConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.config.files.toml_file import save_config
    from studio.core.runs.scheduling.lock import RunLock

    hold_at(monkeypatch, 3)
    project = make_project(tmp_path, config)
    for name in ("first.toml", "second.toml"):
        save_config(config, tmp_path / name)
    first, train, runs = _window(qtbot, tmp_path, project)
    runs.queue.add_config(tmp_path / "first.toml")
    runs.queue.add_config(tmp_path / "second.toml")
    runs.queue.start_button.click()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 3, timeout=15000)
    run_dir = first.run_controller.run_dir
    assert run_dir is not None
    trainer_lock = RunLock(run_dir)  # what the real trainer holds while it trains (the fake one takes none)
    trainer_lock.acquire()
    train.ask_close = lambda: "keep"
    assert train.can_close()
    train.shutdown()  # the window closes in the middle of the queue; the training goes on
    first.run_controller.shutdown(detach=True)
    live = live_trainer(run_dir)
    assert live is not None
    try:
        context, train, runs = _window(qtbot, tmp_path, project)  # the studio starts again
        ctl = context.run_controller
        assert ctl.running and ctl.queue is not None and runs.queue.isEnabled()  # the queue is there, not greyed
        assert [i.state for i in ctl.queue.items] == ["running", "pending"]
        release(run_dir, 3)
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        trainer_lock.release()
        assert [i.state for i in ctl.queue.items] == ["completed", "pending"]
        runs.queue.start_button.click()  # started nothing while the first stayed "running"
        assert ctl.running and [i.state for i in ctl.queue.items] == ["completed", "running"]
        ctl.kill_now()
        ctl.shutdown()
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()
