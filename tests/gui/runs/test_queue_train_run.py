"""A run started with Train (or Resume) is not the queue's: when it ends, the queue's waiting items stay waiting
until Start queue is pressed."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import load_resolved
from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from tests.gui.conftest import fake_command, make_project


def test_a_run_started_with_train_does_not_start_the_queue_when_it_ends(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    controller = context.run_controller
    controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    controller.set_project_root(tmp_path)
    assert controller.queue is not None
    save_config(config, tmp_path / "tonight.toml")
    controller.queue.add(tmp_path / "tonight.toml")  # tonight's queue, being made: not started
    save_config(config, tmp_path / "try.toml")
    with qtbot.waitSignal(controller.sig_run_ended, timeout=30000):
        assert controller.start_config(load_resolved(tmp_path / "try.toml")) is not None  # a quick try with Train
    assert not controller.running
    assert [p.name.rsplit("-", 1)[-1] for p in (tmp_path / "runs").iterdir()] == ["fake"]
    assert [i.state for i in controller.queue.items] == ["pending"]
