"""Launching the fake trainer through TrainerProcess and following its events."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from fixtures.holds import hold_at
from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import TrainConfig
from studio.gui.runner.run_controller import RunController
from tests.gui.conftest import fake_command


def test_run_to_completion_fills_model_and_console(
    qtbot: QtBot, controller: RunController, config: TrainConfig, project_dir: Path
) -> None:
    controller.command_factory = fake_command("--steps", "40", "--rate", "400", "--samples-every", "20")
    console: list[str] = []
    controller.sig_console.connect(console.append)
    with qtbot.waitSignal(controller.sig_run_ended, timeout=20000) as ended:
        run_dir = controller.start_config(resolve_paths(config, project_dir))
        assert run_dir is not None and run_dir.parent == project_dir / "runs"
    assert ended.args == ["finished"]
    model = controller.model
    assert len(model.loss) == 40 and model.step == 40
    assert len(model.samples) == 4 and model.samples[0].path.is_file()
    text = "\n".join(console)
    assert "steps: 40/40" in text and "steps: 39/40" not in text  # progress lines collapsed
    log = (run_dir / "console.log").read_text()
    assert "steps: 1/40" in log and log.startswith("$ ")  # the raw output is all kept on disk


def test_stop_ends_cleanly(qtbot: QtBot, controller: RunController, config: TrainConfig, project_dir: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 5)
    controller.command_factory = fake_command("--steps", "20", "--rate", "100")
    run_dir = controller.start_config(resolve_paths(config, project_dir))
    assert run_dir is not None
    qtbot.waitUntil(lambda: controller.model.step >= 5, timeout=15000)
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        assert controller.stop()
    assert ended.args == ["stopped"]
    assert (run_dir / "STOP").exists() and not controller.running
    assert controller.model.checkpoints and controller.model.step == 5


def test_second_launch_is_refused(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                  project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 1)  # still running when the second launch is tried and when it is killed
    controller.command_factory = fake_command("--steps", "20", "--rate", "50")
    messages: list[str] = []
    controller.sig_message.connect(messages.append)
    first = controller.start_config(resolve_paths(config, project_dir))
    assert first is not None
    assert controller.start_config(resolve_paths(config, project_dir)) is None
    assert messages and "already running" in messages[0] and first.name in messages[0]
    assert len(list((project_dir / "runs").iterdir())) == 1  # no run folder for the refused one
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000):
        controller.kill()


def test_crash_at_start_is_reported(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                    project_dir: Path) -> None:
    controller.command_factory = fake_command("--crash-at-start")
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        run_dir = controller.start_config(resolve_paths(config, project_dir))
    assert ended.args == ["failed"]
    assert "exited with code 1" in controller.model.message
    assert run_dir is not None
    assert "No module named 'diffusers'" in (run_dir / "console.log").read_text()


def test_missing_interpreter_fails_to_start(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                            project_dir: Path) -> None:
    controller.command_factory = lambda plan: [str(project_dir / "no-python"), "-m", "studio.train"]
    controller.use_launcher = False
    messages: list[str] = []
    controller.sig_message.connect(messages.append)
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        controller.start_config(resolve_paths(config, project_dir))
    assert ended.args == ["failed"]
    assert messages and "Could not start the trainer" in messages[0] and "launch.python" in messages[0]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_trainer_killed_from_outside_mid_run(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                             project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    hold_at(monkeypatch, 3)
    controller.command_factory = fake_command("--steps", "20", "--rate", "100")
    controller.start_config(resolve_paths(config, project_dir))
    qtbot.waitUntil(lambda: controller.model.step >= 3, timeout=15000)
    trainer = psutil.Process(controller.source.pid()).children()[0]
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        os.kill(trainer.pid, signal.SIGKILL)
    assert ended.args == ["failed"] and "code 137" in controller.model.message
    assert controller.model.step == 3 and len(controller.model.loss) == 3  # nothing logged was lost


def test_kill_ends_a_trainer_that_ignores_stop(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                               project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    hold_at(monkeypatch, 3)  # held until killed: it ignores the STOP that would release it
    controller.command_factory = fake_command("--steps", "20", "--rate", "100", "--ignore-stop")
    controller.start_config(resolve_paths(config, project_dir))
    qtbot.waitUntil(lambda: controller.model.step >= 3, timeout=15000)
    tree = psutil.Process(controller.source.pid()).children(recursive=True)
    controller.stop()
    qtbot.wait(300)
    assert controller.running  # it ignores STOP
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        controller.kill()
    assert ended.args == ["stopped"]
    psutil.wait_procs(tree, timeout=5)
    assert not any(p.is_running() for p in tree)


def test_garbage_lines_do_not_stop_the_view(qtbot: QtBot, controller: RunController, config: TrainConfig,
                                            project_dir: Path) -> None:
    controller.command_factory = fake_command("--steps", "20", "--rate", "500", "--garbage", "--unknown-type")
    with qtbot.waitSignal(controller.sig_run_ended, timeout=15000) as ended:
        controller.start_config(resolve_paths(config, project_dir))
    assert ended.args == ["finished"]
    assert len(controller.model.loss) == 20
    assert controller.tail is not None and controller.tail.garbage_lines == 4
    assert controller.tail.unknown_types == {"hologram"}
