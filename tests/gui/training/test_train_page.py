"""The Train page as a person uses it, with the fake trainer behind the real QProcess path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.holds import hold_at, release
from fixtures.waits import scaled_ms
from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.core.project.folder import Project
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, fake_command, make_project


def make_page(qtbot: QtBot, context: StudioContext, *extra: str) -> TrainPage:
    context.run_controller.command_factory = fake_command(*extra)
    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page, before_close_func=close_plots)
    return page


def test_live_plots_fill_and_header_follows(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                            tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "60", "--rate", "300", "--samples-every", "30")
    assert page.start_training()
    assert not page.train_button.isEnabled() and page.stop_button.isEnabled()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=20000)
    _x, y = page.plots.loss.smooth.getData()
    assert len(y) == 60 and y[-1] < y[0]  # the smoothed loss falls
    assert page.plots.loss.legend_names() == []  # one line: nothing to tell apart
    assert len(page.plots.lr_curve.getData()[0]) == 60
    assert page.plots._rank_curves[0][0].getData()[1][-1] == 560.0  # rank 0 memory (RSS) at the last step
    assert "finished" in page.header.status.text()
    assert page.header.step.text() == "60 / 60"
    assert page.samples.grid.count() == 4 and page.samples.prompt.count() == 2
    assert page.samples.current() is not None and page.samples.current().step == 60  # type: ignore[union-attr]
    page.samples.slider.setValue(0)
    assert page.samples.current().step == 30  # type: ignore[union-attr]
    page.samples.enlarge(page.samples.current())  # type: ignore[arg-type]
    assert page.samples.last_dialog is not None and "Step 30" in page.samples.last_dialog.windowTitle()
    page.samples.last_dialog.close()
    assert page.train_button.isEnabled() and not page.kill_button.isEnabled()


def test_compiling_phase_and_speed_show_in_the_header(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                      tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "30", "--rate", "300", "--compile", "1.5", "--mfu")
    assert page.start_training()
    qtbot.waitUntil(lambda: "compiling" in page.header.status.text(), timeout=15000)
    assert page.header.progress.format() == "compiling the denoiser…"
    qtbot.waitUntil(lambda: not page.controller.running, timeout=20000)
    assert page.header.speed.text() == "8.0 img/s · 108 TFLOP/s · 14% MFU · compiled in 2 s"
    assert len(page.plots.mfu_curve.getData()[1]) == 30
    assert page.plots.throughput.getPlotItem().getAxis("right").isVisible()


def test_stop_button_ends_cleanly(qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 3)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "100")
    page.start_training()
    qtbot.waitUntil(lambda: page.controller.model.step >= 3, timeout=15000)
    page.stop_button.click()
    assert "stopping" in page.header.status.text()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert page.controller.model.step == 3
    assert "stopped" in page.header.status.text()
    assert "stopped" in page.message.text()


def test_the_elapsed_time_goes_on_while_the_trainer_says_nothing(qtbot: QtBot, context: StudioContext,
                                                                  config: TrainConfig, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a big model or saving a checkpoint takes minutes without an event: the clock still runs."""
    hold_at(monkeypatch, 1)  # the trainer waits after step 1, silent, until Stop
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "100")
    page.start_training()
    qtbot.waitUntil(lambda: page.controller.model.step >= 1, timeout=15000)
    shown = page.header.elapsed.text()
    qtbot.waitUntil(lambda: page.header.elapsed.text() != shown, timeout=5000)
    page.stop_button.click()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)


def test_a_stopped_run_is_resumed_from_the_train_page(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop, then Resume on the Train page itself (not only on Runs): the same run folder goes on."""
    hold_at(monkeypatch, 3)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "200")
    assert not page.resume_button.isEnabled()
    page.start_training()
    run_dir = page.controller.run_dir
    qtbot.waitUntil(lambda: page.controller.model.step >= 3, timeout=15000)
    assert not page.resume_button.isEnabled()  # while it trains
    page.stop_button.click()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert page.resume_button.isEnabled()
    commands: list[list[str]] = []

    def factory(plan: object) -> list[str]:
        commands.append(list(plan.command))  # type: ignore[attr-defined]
        return fake_command("--steps", "3", "--rate", "1000")(plan)  # type: ignore[arg-type]

    page.controller.command_factory = factory
    (run_dir / "STOP").unlink()  # type: ignore[operator]  # what the real trainer does as it starts
    release(run_dir, 3)  # type: ignore[arg-type]  # the resumed stand-in passes its step 3
    page.resume_button.click()
    qtbot.waitUntil(lambda: not page.controller.running and page.controller.model.status == "finished",
                    timeout=15000)
    assert commands[0][-2:] == ["--resume", str(run_dir)] and page.controller.run_dir == run_dir
    assert not page.resume_button.isEnabled()  # finished: nothing to resume


def test_crash_shows_banner_and_page_stays_usable(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                  tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "50", "--rate", "500", "--crash-at", "10")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert not page.banner.isHidden()
    assert "boom at step 10" in page.banner.title.text()
    assert "on purpose" in page.banner.hint.text()
    page.banner.jump.click()
    assert page.tabs.currentWidget() is page.console
    assert "boom at step 10" in page.console.selected_line()
    # Still usable: the next run starts and finishes.
    context.run_controller.command_factory = fake_command("--steps", "5")
    assert page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert page.controller.model.status == "finished"
    assert page.banner.isHidden()


def test_resume_on_the_train_page_says_the_project_settings_are_not_the_runs(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    """The batch size raised on the Train page after the run crashed, then Resume: the run goes on with its own
    batch size, and the page says so instead of nothing."""
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "50", "--rate", "500", "--crash-at", "10")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert context.config is not None
    context.set_config(context.config.model_copy(update={"training": context.config.training.model_copy(
        update={"batch_size": 4})}))
    assert page.resume_training()
    assert "goes on with its own settings" in page.message.text()
    assert "training.batch_size = 1 (the project: 4)" in page.message.text()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)


def test_a_crashed_run_resumed_and_finished_shows_no_error(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                           tmp_path: Path) -> None:
    """The crash it was resumed from is the leg before's: no red banner while the run goes on and after it
    completes, on the Train page and when the finished run is shown again."""
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "50", "--rate", "500", "--crash-at", "10")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert "boom at step 10" in page.banner.title.text()
    run_dir = page.controller.run_dir
    context.run_controller.command_factory = fake_command("--steps", "12", "--rate", "500")
    assert page.resume_training()
    assert page.banner.isHidden()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert page.controller.model.status == "finished" and page.banner.isHidden()
    source = page.controller.open_replay(run_dir)  # type: ignore[arg-type]
    assert source is not None
    qtbot.waitUntil(lambda: source.loaded, timeout=10000)
    assert page.controller.model.status == "finished" and page.banner.isHidden()


def test_a_failed_sample_is_shown_and_the_run_still_finishes(qtbot: QtBot, context: StudioContext,
                                                             config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "10", "--rate", "500", "--samples-every", "5",
                     "--sample-fails-at", "5")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert "finished" in page.header.status.text()
    assert not page.banner.isHidden()
    assert page.banner.title.text().startswith("<b>sample at step 5 failed while decoding")
    assert "training goes on" in page.banner.hint.text()
    assert page.samples.grid.count() == 2  # the step-10 samples came after it


def test_crash_at_start_explains(qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--crash-at-start")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert "exited with code 1" in page.banner.title.text()
    assert "No module named 'diffusers'" in page.console.text.toPlainText()


def test_no_images_blocks_start_with_a_message(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                               tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config, images=0))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    assert not page.start_training()
    assert page.message.text() == (f"• The dataset has no images ({tmp_path / 'data' / 'shapes'}): add .png, .jpg, "
                                   ".webp or .bmp files, or point dataset.concepts at your image folder on the "
                                   "Dataset page.")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_missing_dataset_folder_is_named(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                        tmp_path: Path) -> None:
    import shutil

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    shutil.rmtree(tmp_path / "data" / "shapes")
    page = make_page(qtbot, context)
    assert not page.start_training()
    assert str(tmp_path / "data" / "shapes") in page.message.text() and "does not exist" in page.message.text()


def test_a_validation_folder_that_is_not_there_blocks_start_with_a_message(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    config.dataset.validation_folder = "held-out"
    config.training.validation_every = 10
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    assert not page.start_training()
    assert page.message.text() == (f"• The validation folder {tmp_path / 'held-out'} (dataset.validation_folder) does "
                                   "not exist: create it with held-out images and their captions, or choose another "
                                   "folder (validation folder on the Model & Preset page).")


def test_more_processes_than_the_machine_has_gpus_is_refused(qtbot: QtBot, context: StudioContext,
                                                             config: TrainConfig, tmp_path: Path) -> None:
    config.launch.num_processes = 4
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    context.hardware_file = "2x-rtx3090"  # a hardware report with two GPUs
    assert not page.start_training()
    assert page.message.text().startswith(
        "• launch.num_processes = 4 starts 4 processes on this machine, which has 2 GPUs: set launch.num_processes "
        "to 2 (or `studio-train run --processes 2`), or export the run")
    assert not page.controller.running and not any((tmp_path / "runs").glob("*"))


def test_an_unreadable_hardware_profile_is_said_and_does_not_block_training(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "3", "--rate", "1000")
    context.hardware_file = "rtx4090-24gb"
    page.preflight(context.resolved_config(config))
    assert page.estimate.text().startswith("Estimated VRAM") and page.estimate.text().endswith("of 24.0 GB")
    broken = tmp_path / "my-gpu.json"
    broken.write_text("{ not json", encoding="utf-8")
    context.hardware_file = str(broken)
    assert page.start_training()  # the estimate only informs; the run starts without it
    assert "No VRAM estimate" in page.estimate.text() and "my-gpu.json: not valid JSON" in page.estimate.text()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert page.controller.model.status == "finished"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_path_that_cannot_be_resolved_is_said_and_nothing_starts(qtbot: QtBot, context: StudioContext,
                                                                  config: TrainConfig, tmp_path: Path) -> None:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9")))
    context.set_project(make_project(folder, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    assert not page.start_training()
    text = page.message.text()
    assert text.startswith("A path of the project's settings cannot be used:\n  - ") and "caf\\xe9" in text
    assert 'model.base = "models/tiny-sd15": resolves to' in text and "Fix it on the Model & Preset page" in text
    assert not page.controller.running and not any((folder / "runs").glob("*"))


def test_no_project_says_what_to_do(qtbot: QtBot, context: StudioContext) -> None:
    page = make_page(qtbot, context)
    assert not page.start_training()
    assert "Open or create a project" in page.message.text()


def test_replay_self_test(qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    assert isinstance(project, Project)
    context.set_project(project)
    page = make_page(qtbot, context, "--steps", "25", "--rate", "1000")
    page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    run_dir = page.controller.model.run_dir
    assert run_dir is not None
    other = TrainPage(context, context.run_controller)
    qtbot.addWidget(other, before_close_func=close_plots)
    result = other.self_test(SelfTestOptions(replay=run_dir))
    assert result["replay_events"] == 1 + 2 + 25 + 1  # run_started, two caching phases, steps, run_finished
    assert result["plot_points"] >= 25 * 4


def _wait_for_finish(run_dir: Path, timeout_s: float = 20.0) -> list[object]:
    import time

    from studio.core.runs.events import RunFinished, read_events

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = read_events(run_dir / "events.jsonl")
        if any(isinstance(e, RunFinished) for e in events):
            return events
        time.sleep(0.1)
    raise AssertionError(f"{run_dir} has no run_finished after {timeout_s} s")


def test_close_and_keep_running_detaches_the_trainer(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                     tmp_path: Path) -> None:
    from studio.core.runs.events import RunFinished, Step
    from studio.core.runs.records.history import summarize_run

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "20")
    page.start_training()
    qtbot.waitUntil(lambda: page.controller.model.step >= 2, timeout=15000)
    run_dir = page.controller.model.run_dir
    assert run_dir is not None
    asked: list[bool] = []
    page.ask_close = lambda: asked.append(True) or "keep"  # type: ignore[func-returns-value]
    assert page.can_close() and asked
    page.shutdown()  # what the main window does once every page agreed to close
    assert not page.controller.running
    steps_when_closed = page.controller.model.step
    # The studio let go; the trainer goes on: the Runs page of a later studio sees it running.
    assert summarize_run(run_dir).status == "running"
    events = _wait_for_finish(run_dir)
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert finished[-1].status == "completed"
    assert max(e.step for e in events if isinstance(e, Step)) == 20 > steps_when_closed
    assert "the training goes on without it" in (run_dir / "console.log").read_text()
    assert summarize_run(run_dir).status == "completed"


def test_close_and_stop_ends_the_run_first(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 2)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "100")
    page.start_training()
    qtbot.waitUntil(lambda: page.controller.model.step >= 2, timeout=15000)
    page.ask_close = lambda: "cancel"
    assert not page.can_close() and page.controller.running  # cancel: nothing changes
    page.ask_close = lambda: "stop"
    assert page.can_close()
    assert not page.controller.running and page.controller.model.status == "stopped"


def test_closing_without_a_run_asks_nothing(qtbot: QtBot, context: StudioContext) -> None:
    page = make_page(qtbot, context)
    page.ask_close = lambda: pytest.fail("asked although nothing runs")  # type: ignore[assignment,return-value]
    assert page.can_close()


def test_train_demo_self_test_reports_what_the_run_showed(qtbot: QtBot, context: StudioContext,
                                                          config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "30", "--rate", "300", "--samples-every", "15", "--ranks", "2")
    page.show()
    result = page.self_test(SelfTestOptions(train_demo=True))
    assert {k: result[k] for k in ("events", "loss_points", "memory_points", "samples", "status")} == {
        "events": 1 + 2 + 30 + 2 * 2 + 1,  # run_started, caching x2, steps, (sampling + sample) x2, run_finished
        "loss_points": 30, "memory_points": 60, "samples": 4, "status": "finished"}
    # The window never froze a second (on a quiet machine; a loaded one stalls every thread it schedules, so the bound
    # follows its measured slowness, as the suite's waits do).
    assert 0 <= result["max_gui_stall_ms"] < scaled_ms(1000)
    assert Path(result["outputs"][0]).is_file()


def test_the_validation_loss_is_plotted_beside_the_training_loss(qtbot: QtBot, context: StudioContext,
                                                                 config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "40", "--rate", "400", "--validation-every", "10")
    assert page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=20000)
    page.plots.refresh(page.controller.model, force=True)
    x, y = page.plots.loss.validation.getData()
    assert list(x) == [10, 20, 30, 40]
    assert [round(v, 3) for v in y] == [0.59, 0.58, 0.57, 0.56]  # the numbers of the validation events
    assert page.plots.loss.validation.parentItem() is not None  # on the loss plot, with the training loss
    assert page.plots.loss.legend_names() == ["training loss (smoothed)", "validation loss (held-out images)"]
    assert len(page.plots.loss.smooth.getData()[1]) == 40


def test_a_run_that_failed_before_its_first_step_offers_no_resume(qtbot: QtBot, context: StudioContext,
                                                                  config: TrainConfig, tmp_path: Path) -> None:
    """Nothing was trained: Resume would only start over. Train and Runs say so and leave it to Train."""
    from studio.gui.runs.page import RunsPage

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--fail-before-steps")
    runs = RunsPage(context, context.run_controller)
    qtbot.addWidget(runs, before_close_func=close_plots)
    assert page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert "out of memory" in page.banner.title.text()
    assert not page.resume_button.isEnabled()
    assert page.resume_button.toolTip().startswith("This run failed before its first step: there is nothing to resume")
    runs.refresh()
    runs.table.selectRow(0)
    assert runs.table.selected()[0].status == "failed"
    assert not runs.buttons["resume"].isEnabled()
    assert "failed before its first step" in runs.buttons["resume"].toolTip()


def test_a_train_waiting_for_the_training_environment_does_not_start_another_project_opened_meanwhile(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtCore import QObject, Signal

    import studio.gui.training.page as train_page

    class Installing(QObject):  # the Training Environment window, still installing
        sig_ready = Signal(str)

    installing = Installing()
    monkeypatch.setattr(train_page, "needs_training_env", lambda _python: True)
    monkeypatch.setattr(train_page, "open_training_env_dialog", lambda _parent: installing)
    first = make_project(tmp_path / "first", config)
    other: Project = make_project(tmp_path / "other", config)  # type: ignore[assignment]
    context.set_project(first)  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "5", "--rate", "200")
    assert not page.start_training()
    assert page.message.text().startswith("Set up the training environment first")
    context.set_project(other)
    monkeypatch.setattr(train_page, "needs_training_env", lambda _python: False)
    installing.sig_ready.emit("/env/bin/python")  # minutes later
    assert not page.controller.running and not any((other.root / "runs").iterdir())


def test_a_train_waiting_for_a_download_does_not_start_another_project_opened_meanwhile(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtCore import QObject, Signal

    import studio.gui.training.page as train_page

    class Downloading(QObject):  # the download window, still downloading
        sig_done = Signal(str, str)

        def __init__(self, *_args: object, **_kwargs: object) -> None:
            super().__init__()

        def show(self) -> None: ...

        def start(self) -> None: ...

    monkeypatch.setattr(train_page, "DownloadDialog", Downloading)
    first = make_project(tmp_path / "first", config)
    other: Project = make_project(tmp_path / "other", config)  # type: ignore[assignment]
    context.set_project(first)  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "5", "--rate", "200")
    download = page.download_then_train("org/base-model")
    context.set_project(other)
    download.sig_done.emit("org/base-model", "/cache/org/base-model")  # type: ignore[attr-defined]
    assert not page.controller.running and not any((other.root / "runs").iterdir())


def test_train_with_a_choice_in_the_settings_form_not_in_studio_toml_asks_first(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QComboBox

    from studio.gui.model.page import ModelPage

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    model_page = ModelPage(context)
    qtbot.addWidget(model_page)
    model_page.hardware.wait()
    model_page.form.show_advanced.setChecked(True)
    masks = model_page.form.findChild(QComboBox, "field_dataset_masks")
    masks.setCurrentIndex(masks.findData("folder"))
    masks.activated.emit(masks.currentIndex())  # shown as chosen, waiting for its mask folder
    page = make_page(qtbot, context, "--steps", "5", "--rate", "200")
    asked: list[str] = []
    page.confirm = lambda _title, text: asked.append(text) is not None  # No
    assert not page.start_training()  # the run would have trained without the masks shown
    assert "waiting for the setting it needs" in asked[0] and "trains studio.toml as it is" in asked[0]
    assert page.message.text().startswith("Not started: edits are not saved")
    assert not page.controller.running and not any((tmp_path / "runs").iterdir())
    page.confirm = lambda _title, _text: True
    assert page.start_training()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=20000)


def test_the_sample_settings_say_a_running_run_keeps_its_own(qtbot: QtBot, context: StudioContext,
                                                            config: TrainConfig, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample prompts edited beside a live run are saved for the next run: the tab says so while one trains."""
    hold_at(monkeypatch, 2)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context, "--steps", "20", "--rate", "200")
    note = page.sampling.running_note
    assert not note.isVisibleTo(page.sampling)
    page.start_training()
    qtbot.waitUntil(lambda: page.controller.model.step >= 2, timeout=15000)
    assert note.isVisibleTo(page.sampling) and "edits here are saved for the next run" in note.text()
    page.stop_button.click()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert not note.isVisibleTo(page.sampling)
