"""A sweep in the queue: "Vary…" turns one queued config into N named by their values; with "continue on
error" the queue goes on past the run that fails and shows it; the Runs page selects the sweep's runs together."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from studio.core.config.files.toml_file import load_config, save_config
from studio.core.config.schema import TrainConfig
from studio.core.runs.launch import RunPlan
from studio.gui.context import StudioContext
from tests.gui.conftest import fake_command, make_project
from tests.gui.runs.test_runs_page import make_page


def _trainer_that_diverges_at_1(plan: RunPlan) -> list[str]:
    """The fake trainer; a learning rate of 1 (the most the config takes) makes it fail at step 2, as a
    diverging run would."""
    crash = ["--crash-at", "2"] if plan.config.training.learning_rate >= 1 else []
    return fake_command("--steps", "5", "--rate", "1000", *crash)(plan)


@pytest.mark.slow
def test_a_three_value_sweep_goes_on_past_its_failed_run(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                        tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = _trainer_that_diverges_at_1
    page = make_page(qtbot, context)
    save_config(config, tmp_path / "base.toml")
    page.queue.add_config(tmp_path / "base.toml")
    page.queue.list.setCurrentRow(0)
    added = page.queue.vary_selected("training.learning_rate", "1e-4, 1, 1e-5")
    queue = page.controller.queue
    assert queue is not None and len(added) == 3 and len(queue.items) == 3  # the base config became the sweep
    assert [Path(i.config).name for i in queue.items] == ["learning_rate-0.0001.toml", "learning_rate-1.toml",
                                                          "learning_rate-1e-05.toml"]
    assert [load_config(i.config).training.learning_rate for i in queue.items] == [1e-4, 1, 1e-5]
    assert page.queue.list.item(0).text().endswith("pending [sweep fake-learning_rate]")

    page.queue.continue_on_error.click()
    page.queue.start_button.click()
    qtbot.waitUntil(lambda: [i.state for i in queue.items] == ["completed", "failed", "completed"], timeout=30000)
    assert "FAILED" in page.queue.list.item(1).text() and "FAILED" not in page.queue.list.item(2).text()
    names = sorted(p.name.split("-", 2)[-1] for p in (tmp_path / "runs").iterdir())
    assert names == ["fake-learning_rate-0.0001", "fake-learning_rate-1", "fake-learning_rate-1e-05"]

    page.queue.list.setCurrentRow(2)
    page.queue.compare_button.click()
    selected = sorted({page.table.summaries[i.row()].name for i in page.table.selectedIndexes()})
    assert selected == sorted(Path(i.run_dir).name for i in queue.items)
    assert page.buttons["overlay"].isEnabled()


def test_without_continue_on_error_the_queue_holds_after_a_failed_run(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = _trainer_that_diverges_at_1
    page = make_page(qtbot, context)
    save_config(config, tmp_path / "base.toml")
    page.queue.add_config(tmp_path / "base.toml")
    page.queue.list.setCurrentRow(0)
    assert len(page.queue.vary_selected("training.learning_rate", "1..0.5 x2")) == 2
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None
    qtbot.waitUntil(lambda: queue.items[0].state == "failed", timeout=30000)
    qtbot.wait(300)
    assert [i.state for i in queue.items] == ["failed", "pending"]
    assert any("the queue holds (1 waiting)" in m for m in messages)


def test_a_sweep_of_a_setting_that_does_not_exist_says_how_to_name_it(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    save_config(config, tmp_path / "base.toml")
    page.queue.add_config(tmp_path / "base.toml")
    page.queue.list.setCurrentRow(0)
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    assert page.queue.vary_selected("training.learnig_rate", "1e-4, 1e-5") == []
    assert "'training.learnig_rate' is not a config setting" in messages[-1]
    assert page.queue.vary_selected("training.learning_rate", "1e-4") == []
    assert "fewer than two values" in messages[-1]
    assert page.queue.vary_selected("training.learning_rate", "1e-4, 0.0001") == []
    assert "No sweep was queued: 1e-4 and 0.0001 are the same value (0.0001)" in messages[-1]
    assert len(page.controller.queue.items) == 1  # type: ignore[union-attr]


def test_the_vary_dialog_shows_its_examples_whole(qtbot: QtBot) -> None:
    from studio.gui.runs.queue import VaryDialog

    dialog = VaryDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    shown = dialog.values.contentsRect().width()
    needed = dialog.values.fontMetrics().horizontalAdvance(dialog.values.placeholderText())
    assert shown >= needed, (shown, needed)  # "… or 1e-4..1e-6 log3" not cut
    assert dialog.width() >= dialog.fontMetrics().horizontalAdvance(dialog.windowTitle()) + 120  # room for the title


def test_without_continue_on_error_the_queue_holds_at_a_config_refused_before_it_starts(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QApplication

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    page = make_page(qtbot, context)
    missing = config.model_copy(update={"model": config.model.model_copy(update={"base": "models/not-downloaded"})})
    save_config(missing, tmp_path / "first.toml")
    save_config(config, tmp_path / "second.toml")
    page.queue.add_config(tmp_path / "first.toml")
    page.queue.add_config(tmp_path / "second.toml")
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    page.queue.start_button.click()
    QApplication.processEvents()
    queue = page.controller.queue
    assert queue is not None
    # The second item waits for the person to fix the first (or to tick Continue on error), as after a failed run.
    assert [i.state for i in queue.items] == ["failed", "pending"] and not page.controller.running
    assert "was not started: Base model" in messages[0] and "the queue holds (1 waiting)" in messages[-1]
    assert not queue.runner_held  # another window may run it


def test_a_queued_run_that_could_not_start_waits_again_and_starts_once_that_is_fixed(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import studio.gui.runner.run_controller as run_controller
    from studio.core.training_python import NoTrainingPython

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    page = make_page(qtbot, context)
    save_config(config, tmp_path / "first.toml")
    page.queue.add_config(tmp_path / "first.toml")
    real = run_controller.prepare_run

    def no_environment_yet(*_args: object, **_kwargs: object) -> RunPlan:
        raise NoTrainingPython("the training environment is not set up (Tools → Training Environment)")

    monkeypatch.setattr(run_controller, "prepare_run", no_environment_yet)  # the desktop app before its setup
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None and not page.controller.running
    # Was marked failed ("could not start"), and a failed item with no run is never started again.
    assert queue.items[0].state == "pending" and "Training Environment" in queue.items[0].message
    monkeypatch.setattr(run_controller, "prepare_run", real)
    page.queue.start_button.click()
    qtbot.waitUntil(lambda: queue.items[0].state == "completed", timeout=30000)


def test_a_queued_run_started_over_the_gpus_memory_says_so_first_in_its_console(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import studio.core.project.preflight as preflight_module
    from studio.core.hardware.machine.probe import profile_dir

    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda _python: None)  # this machine has no CUDA

    profile = json.loads((profile_dir() / "a100-80gb.json").read_text(encoding="utf-8"))
    profile["gpus"][0].update(total_mb=1024, free_mb=1024, used_mb=0)  # a card the run does not fit
    (tmp_path / "small.json").write_text(json.dumps(profile), encoding="utf-8")
    monkeypatch.setenv("STUDIO_HARDWARE", str(tmp_path / "small.json"))
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    page = make_page(qtbot, context)
    save_config(config, tmp_path / "first.toml")
    page.queue.add_config(tmp_path / "first.toml")
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None
    # Nobody was there to confirm the warning: the run starts, and its console (read in the morning) begins with it.
    qtbot.waitUntil(lambda: queue.items[0].state not in ("pending", "running"), timeout=30000)
    assert queue.items[0].state == "completed", queue.items[0].message
    first = (Path(queue.items[0].run_dir) / "console.log").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("[studio] started from the queue despite: The run needs about ")
    assert "GB of GPU memory, GPU 0 (NVIDIA A100-SXM4-80GB) has 1.0 GB free" in first


@pytest.mark.parametrize("refused_save", ['"state": "completed"', '"run_dir": "/'])
def test_a_queued_runs_mark_that_could_not_be_saved_for_a_moment_does_not_hold_the_night(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        refused_save: str) -> None:
    """The first run's end (or its start, with its run folder) is not saved; the queue still goes on, and the
    first item says how it ended."""
    import studio.core.runs.scheduling.queue as queue_module

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    page = make_page(qtbot, context)
    for name in ("first", "second"):
        save_config(config, tmp_path / f"{name}.toml")
        page.queue.add_config(tmp_path / f"{name}.toml")
    real = queue_module.atomic_write_text
    refused: list[str] = []

    def held_by_a_sync_client_once(path: Path, text: str) -> None:
        if refused_save in text and not refused:
            refused.append(text)
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(path))
        real(path, text)

    monkeypatch.setattr(queue_module, "atomic_write_text", held_by_a_sync_client_once)
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None
    qtbot.waitUntil(lambda: [i.state for i in queue.items] == ["completed", "completed"], timeout=30000)
    assert refused


def test_a_config_queued_twice_says_both_train_the_file_as_it_is_then(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    save_config(config, tmp_path / "first.toml")
    page.queue.add_config(tmp_path / "first.toml")
    # The person changes the learning rate in the same file and queues it again, for a second run.
    save_config(config.model_copy(update={"training": config.training.model_copy(update={"learning_rate": 5e-5})}),
                tmp_path / "first.toml")
    page.queue.add_config(tmp_path / "first.toml")
    assert messages == [f"{tmp_path.name}/first.toml is queued twice: each item trains the file as it is when its "
                        "run starts, so both train the same settings. To queue another version, copy the file "
                        "under another name and queue that, or use Vary… to queue one setting's values."]
    assert len(page.controller.queue.items) == 2  # type: ignore[union-attr]


def test_a_file_that_is_not_a_config_is_not_queued_and_says_why(qtbot: QtBot, context: StudioContext,
                                                               config: TrainConfig, tmp_path: Path) -> None:
    # Queued, it failed only at its turn in the night; another .toml (a preset, pyproject.toml) the same.
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    save_config(config, tmp_path / "base.toml")
    text = (tmp_path / "base.toml").read_text(encoding="utf-8")
    (tmp_path / "typo.toml").write_text(text.replace("[training]", "[training]\nlearning_rat = 1e-4"), encoding="utf-8")
    page.queue.add_config(tmp_path / "typo.toml")
    queue = page.controller.queue
    assert queue is not None and queue.items == []
    assert messages and messages[-1].startswith("typo.toml was not queued:") and "learning_rat" in messages[-1]
    page.queue.add_config(tmp_path / "base.toml")
    assert [Path(i.config).name for i in queue.items] == ["base.toml"]


def test_a_queued_run_that_fills_the_disk_holds_the_queue_even_with_continue_on_error(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    # Every run after it would load its model and fail at its first checkpoint the same way, all night.
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "5", "--rate", "1000", "--crash-at", "2",
                                                          "--crash-kind", "disk_full")
    page = make_page(qtbot, context)
    for name in ("first", "second"):
        save_config(config, tmp_path / f"{name}.toml")
        page.queue.add_config(tmp_path / f"{name}.toml")
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    page.queue.continue_on_error.click()
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None
    qtbot.waitUntil(lambda: queue.items[0].state == "failed" and not page.controller.running, timeout=30000)
    assert [i.state for i in queue.items] == ["failed", "pending"]
    assert "its disk is full. The queue holds (1 waiting)" in messages[-1]
    assert not queue.runner_held  # another window may run it


def test_a_queued_config_refused_for_a_full_disk_waits_and_holds_the_queue_even_with_continue_on_error(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import studio.core.project.preflight as preflight_module

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    page = make_page(qtbot, context)
    for name in ("first", "second"):
        save_config(config, tmp_path / f"{name}.toml")
        page.queue.add_config(tmp_path / f"{name}.toml")
    page.queue.continue_on_error.click()
    real = preflight_module.estimate_disk_bytes
    monkeypatch.setattr(preflight_module, "estimate_disk_bytes", lambda _config: 1 << 60)  # the disk filled up
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None and not page.controller.running
    # Neither is spent as failed (both were, one after the other): they wait for Start queue once there is room.
    assert [i.state for i in queue.items] == ["pending", "pending"]
    assert queue.items[0].message.startswith("Not enough free disk for ")
    assert "waits, and the queue holds: Not enough free disk" in messages[-1]
    assert not queue.runner_held
    monkeypatch.setattr(preflight_module, "estimate_disk_bytes", real)  # room made
    page.queue.start_button.click()
    qtbot.waitUntil(lambda: [i.state for i in queue.items] == ["completed", "completed"], timeout=30000)


def test_ticking_a_queue_box_shows_what_another_window_changed(qtbot: QtBot, context: StudioContext,
                                                               config: TrainConfig, tmp_path: Path) -> None:
    """The box's save reads the file first (another window's removal comes with it): the list follows, and does not
    keep the removed item for good (Up or Vary… on it raised a traceback)."""
    from studio.core.runs.scheduling.queue import RunQueue

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    for name in ("first", "second"):
        save_config(config, tmp_path / f"{name}.toml")
        page.queue.add_config(tmp_path / f"{name}.toml")
    other_window = RunQueue(tmp_path)
    other_window.remove(other_window.items[0].id)
    page.queue.stop_after.click()  # before this window's watch has read the file again
    page.queue._follow_file()  # what the watch does each second
    assert [page.queue.list.item(n).text().split(" — ")[0] for n in range(page.queue.list.count())] == \
        [f"{tmp_path.name}/second.toml"]
    page.queue.continue_on_error.click()
    page.queue._follow_file()
    assert page.queue.list.count() == 1
