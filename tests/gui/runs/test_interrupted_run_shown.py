"""A run whose trainer died without a word (killed, a crash, the machine stopped), shown again on the Train and
Runs pages: ended, its clock stopped at its last event, Resume offered; not training for ever."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.core.runs.events import RunStarted
from studio.core.runs.scheduling.lock import RunLock
from studio.gui.context import StudioContext
from studio.gui.runner.source import RunSource
from studio.gui.runs.page import RunsPage
from studio.gui.training.page import TrainPage
from tests.core.runs.conftest import step_event, write_events
from tests.gui.conftest import close_plots, make_project


def _silent_run(runs_dir: Path) -> Path:
    run = runs_dir / "20240101-000000-crashed"
    started = RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"], time=1000.0)
    write_events(run / "events.jsonl", [started, step_event(1), step_event(2)])  # steps at 1001 and 1002
    (run / "config.toml").write_text('[model]\nfamily = "sd15"\n', encoding="utf-8")
    return run


def test_a_run_that_died_shows_as_ended_on_both_pages(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                     tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    run = _silent_run(project.runs_dir)  # type: ignore[attr-defined]
    context.set_project(project)  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    runs = RunsPage(context, context.run_controller)
    qtbot.addWidget(runs, before_close_func=close_plots)
    qtbot.waitUntil(lambda: train.header.run_name.text() == run.name, timeout=10000)
    qtbot.waitUntil(lambda: runs.message.text().startswith("Showing"), timeout=10000)
    assert runs.table.summaries[0].status == "interrupted"
    for header in (train.header, runs.header):
        assert "failed" in header.status.text()
        assert header.elapsed.text() == "0:02"  # from its first event to its last, not to today
        assert header.eta.text() == "–"
    assert train.resume_button.isEnabled()
    assert runs.message.text() == f"Showing {run.name}: step 2 of 10, failed."


def test_a_run_its_trainer_still_holds_shows_as_training(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                         tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    run = _silent_run(project.runs_dir)  # type: ignore[attr-defined]
    context.set_project(project)  # type: ignore[arg-type]
    runs = RunsPage(context, context.run_controller)
    qtbot.addWidget(runs, before_close_func=close_plots)
    with RunLock(run):  # trained from a terminal, or by another window
        runs.message.setText("")
        runs.open_run(run)
        qtbot.waitUntil(lambda: runs.message.text().startswith("Showing"), timeout=10000)
    assert "training" in runs.header.status.text()


class _Elsewhere(RunSource):
    """A run this studio follows whose trainer is not on this machine (a cloud's): no process here."""

    running = True

    def start(self) -> bool:
        return True

    def is_running(self) -> bool:
        return self.running

    def kill_now(self, timeout_s: float = 5.0) -> None:
        self.running = False


def test_the_run_this_studio_follows_elsewhere_shows_as_training(qtbot: QtBot, context: StudioContext,
                                                                 config: TrainConfig, tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    run = _silent_run(project.runs_dir)  # type: ignore[attr-defined]
    context.set_project(project)  # type: ignore[arg-type]
    runs = RunsPage(context, context.run_controller)
    qtbot.addWidget(runs, before_close_func=close_plots)
    source = _Elsewhere(run)
    assert context.run_controller.follow(source)
    runs.message.setText("")
    runs.open_run(run)
    qtbot.waitUntil(lambda: runs.message.text().startswith("Showing"), timeout=10000)
    assert "training" in runs.header.status.text()


def test_show_in_console_finds_the_error_of_a_run_shown_again(qtbot: QtBot, context: StudioContext,
                                                              config: TrainConfig, tmp_path: Path) -> None:
    """The project's newest run failed before the studio was last closed: its banner's "Show in console" goes to
    the line of its console.log, not to an empty console."""
    from studio.core.runs.events import Error, RunFinished

    project = make_project(tmp_path, config)
    run = project.runs_dir / "20240101-000000-failed"  # type: ignore[attr-defined]
    write_events(run / "events.jsonl", [
        RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"], time=1000.0), step_event(1),
        Error(kind="crash", message="RuntimeError: boom at step 2", time=1002.0),
        RunFinished(status="failed", step=2, message="boom", time=1003.0)])
    (run / "console.log").write_text("caching latents\nsteps: 1/10\nTraceback (most recent call last):\n"
                                     "RuntimeError: boom at step 2\n", encoding="utf-8")
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    context.set_project(project)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: not train.banner.isHidden(), timeout=10000)
    train.banner.jump.click()
    assert train.tabs.currentWidget() is train.console
    assert train.console.selected_line() == "RuntimeError: boom at step 2"


def test_a_killed_run_resumed_shows_its_training_time_while_it_starts_again(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    """Killed years ago after 2 s of training, resumed now: while the trainer starts, Elapsed is those 2 s, not
    the years since."""
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.files.toml_file import save_config
    from tests.gui.conftest import fake_command

    project = make_project(tmp_path, config)
    run = _silent_run(project.runs_dir)  # type: ignore[attr-defined]
    save_config(resolve_paths(config, project.root), run / "config.toml")  # type: ignore[attr-defined]
    context.set_project(project)  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    context.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
    assert context.run_controller.resume(run)
    assert train.header.elapsed.text() == "0:02"
    qtbot.waitUntil(lambda: not context.run_controller.running, timeout=15000)
