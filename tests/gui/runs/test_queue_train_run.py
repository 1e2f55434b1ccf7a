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


def test_start_queue_that_starts_nothing_says_why(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                  tmp_path: Path) -> None:
    from studio.core.runs.scheduling.lock import RunLock

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    controller = context.run_controller
    controller.set_project_root(tmp_path)
    queue = controller.queue
    assert queue is not None
    messages: list[str] = []
    controller.sig_message.connect(messages.append)
    controller.start_queue()
    assert messages[-1].startswith("No config waits in the queue: add one (Add config…)")
    save_config(config, tmp_path / "tonight.toml")
    save_config(config, tmp_path / "next.toml")
    item = queue.add(tmp_path / "tonight.toml")
    queue.add(tmp_path / "next.toml")
    run_dir = tmp_path / "runs" / "20261207-010203-fake"
    run_dir.mkdir(parents=True)
    queue.mark_running(item.id, run_dir)
    with RunLock(run_dir):  # its trainer goes on, left running when the studio closed
        controller.start_queue()
        assert not controller.running
    assert messages[-1] == (f"{tmp_path.name}/tonight.toml still trains (run 20261207-010203-fake): Start queue "
                            "starts the next item once it has ended.")
