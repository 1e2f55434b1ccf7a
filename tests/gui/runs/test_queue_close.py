"""Closing the studio while its queue runs: the run shown ends (Stop training) or goes on (Keep running), and
the items after it wait in the queue for the next start; none is started, stopped and spent on the way out."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.holds import hold_at
from pytestqt.qtbot import QtBot

from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.core.runs.scheduling.queue import RunQueue
from studio.gui.context import StudioContext
from studio.gui.runner.run_controller import RunController
from tests.gui.conftest import close_plots, fake_command, make_project


def _queue_of_three(tmp_path: Path, config: TrainConfig) -> RunQueue:
    queue = RunQueue(tmp_path)
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.toml"
        save_config(config.model_copy(update={"output": config.output.model_copy(update={"name": name})}), path)
        queue.add(path)
    return queue


def _queue_at_its_first_item(context: StudioContext, config: TrainConfig, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> RunController:
    """A queue of three started, its first run (a fake trainer) held at step 2."""
    hold_at(monkeypatch, 2)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    _queue_of_three(tmp_path, config)
    controller = context.run_controller
    controller.command_factory = fake_command("--steps", "20", "--rate", "100")
    controller.set_project_root(tmp_path)  # the queue as the file holds it now
    controller.start_queue()
    return controller


def test_closing_with_stop_training_leaves_the_rest_of_the_queue_waiting(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.gui.training.page import TrainPage

    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page, before_close_func=close_plots)
    _queue_at_its_first_item(context, config, tmp_path, monkeypatch)
    qtbot.waitUntil(lambda: page.controller.model.step >= 2, timeout=15000)
    page.ask_close = lambda: "stop"
    assert page.can_close()
    page.shutdown()
    assert not page.controller.running
    # One run folder: the first item's. b and c wait for the studio's next Start queue.
    assert [p.name.rsplit("-", 1)[-1] for p in (tmp_path / "runs").iterdir()] == ["a"]
    assert [i.state for i in RunQueue(tmp_path).items] == ["stopped", "pending", "pending"]


def test_a_window_closed_mid_queue_starts_no_item_on_its_way_out(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    controller = _queue_at_its_first_item(context, config, tmp_path, monkeypatch)
    qtbot.waitUntil(lambda: controller.model.step >= 2, timeout=15000)
    controller.shutdown()  # the run is ended at once (the close's stop did not come in time)
    assert not controller.running
    assert [p.name.rsplit("-", 1)[-1] for p in (tmp_path / "runs").iterdir()] == ["a"]
    assert [i.state for i in RunQueue(tmp_path).items] == ["stopped", "pending", "pending"]


def test_closing_mid_queue_says_the_queue_stops_there(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = _queue_at_its_first_item(context, config, tmp_path, monkeypatch)
    qtbot.waitUntil(lambda: controller.model.step >= 2, timeout=15000)
    # What the close dialog asks: "Keep running" keeps this run going, not the queue.
    assert controller.close_question().endswith(
        "\n\nThe queue stops here either way: its 2 waiting runs start only when Start queue is pressed again.")
    assert controller.close_question().startswith("A training is running. Stop it")


def test_stop_on_a_queued_run_says_the_queue_then_starts_its_next_run(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Stop ends the run shown, not the queue: the GPU went on with the next item without a word.
    from studio.gui.training.page import TrainPage

    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page, before_close_func=close_plots)
    controller = _queue_at_its_first_item(context, config, tmp_path, monkeypatch)
    qtbot.waitUntil(lambda: controller.model.step >= 2, timeout=15000)
    page.stop_training()
    assert page.message.text() == (
        "Stopping at the next step (a checkpoint is saved)… Then the queue starts its next run (2 waiting): to hold "
        "it, tick \"Stop the queue after the current run\" on the Runs page's Queue tab.")
    assert controller.queue is not None
    controller.queue.set_stop_after_current(True)  # ticked: nothing starts after it, and nothing more is said
    assert controller.queue_goes_on_note() == ""
    controller.shutdown()
