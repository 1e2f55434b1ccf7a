"""The Train and Runs pages show the open project's runs only: another project opened, nothing of the run
trained before (its name, messages, VRAM estimate, error banner, console) stays on them."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from studio.gui.runs.page import RunsPage
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, fake_command, make_project


def _pages(qtbot: QtBot, context: StudioContext) -> tuple[TrainPage, RunsPage]:
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    runs = RunsPage(context, context.run_controller)
    qtbot.addWidget(runs, before_close_func=close_plots)
    return train, runs


def test_opening_another_project_leaves_nothing_of_the_run_before(qtbot: QtBot, context: StudioContext,
                                                                  config: TrainConfig, tmp_path: Path) -> None:
    first = make_project(tmp_path / "first", config)
    context.hardware_file = "rtx4090-24gb"
    context.set_project(first)  # type: ignore[arg-type]
    train, runs = _pages(qtbot, context)
    context.run_controller.command_factory = fake_command("--steps", "50", "--rate", "500", "--crash-at", "10")
    assert train.start_training()
    qtbot.waitUntil(lambda: not context.run_controller.running, timeout=15000)
    run_name = context.run_controller.run_dir.name  # type: ignore[union-attr]
    assert train.estimate.text().startswith("Estimated VRAM") and not train.banner.isHidden()
    assert run_name in train.message.text()

    context.set_project(make_project(tmp_path / "second", config))  # type: ignore[arg-type]
    shown = [train.message.text(), train.estimate.text(), runs.message.text(), train.header.run_name.text(),
             runs.header.run_name.text(), train.console.text.toPlainText()]
    assert not any(run_name in text or "first" in text for text in shown), shown
    assert not any(text.startswith("Estimated VRAM") for text in shown)
    assert train.banner.isHidden() and not train.resume_button.isEnabled()
    assert runs.table.rowCount() == 0

    context.set_project(first)  # type: ignore[arg-type]  # its own run comes back, with its error
    qtbot.waitUntil(lambda: train.header.run_name.text() == run_name and runs.header.run_name.text() == run_name,
                    timeout=10000)
    assert not train.banner.isHidden() and "boom at step 10" in train.banner.title.text()


def test_the_first_start_on_a_project_shows_none_of_the_project_before(qtbot: QtBot, config: TrainConfig,
                                                                      tmp_path: Path) -> None:
    """The studio closed on a project with a failed run, started again on another: its Train and Runs
    pages show no run, nor that run's name, estimate or error."""
    from studio.gui.shell.application import make_settings
    from studio.gui.shell.main_window import MainWindow

    settings = tmp_path / "settings.ini"
    first_context = StudioContext(make_settings(settings), hardware_file="rtx4090-24gb")
    first_context.set_project(make_project(tmp_path / "first", config))  # type: ignore[arg-type]
    train, _runs = _pages(qtbot, first_context)
    first_context.run_controller.command_factory = fake_command("--steps", "50", "--rate", "500", "--crash-at", "5")
    assert train.start_training()
    qtbot.waitUntil(lambda: not first_context.run_controller.running, timeout=15000)
    run_name = first_context.run_controller.run_dir.name  # type: ignore[union-attr]
    first_context.run_controller.shutdown()

    second = make_project(tmp_path / "second", config)
    window = MainWindow(StudioContext(make_settings(settings), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(window)
    window.open_when_shown(lambda: window.set_project(second))  # type: ignore[arg-type]
    window.show()
    qtbot.waitUntil(lambda: window.context.project is not None, timeout=10000)
    new_train, new_runs = window.show_page("page_train"), window.page("page_runs")
    for text in (new_train.header.run_name.text(), new_runs.header.run_name.text(),  # type: ignore[attr-defined]
                 new_train.message.text(), new_train.estimate.text()):  # type: ignore[attr-defined]
        assert run_name not in text and not text.startswith("Estimated VRAM")
    assert new_runs.table.rowCount() == 0 and new_train.banner.isHidden()  # type: ignore[attr-defined]


def test_the_train_page_shows_the_newest_run_beside_an_imported_one_of_another_name(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    """A zip of a run's files, imported as "results", trained in 2023: the Train page shows the run that began
    last, as the Runs table lists it first, not the one whose name sorts last."""
    import datetime as dt

    from studio.core.runs.events import RunFinished, RunStarted
    from tests.core.runs.conftest import write_events

    project = make_project(tmp_path, config)
    for name, day in (("20240101-000000-old", dt.datetime(2024, 1, 1)), ("20240601-000000-new", dt.datetime(2024, 6, 1)),
                      ("results", dt.datetime(2023, 5, 1))):
        began = day.timestamp()
        write_events(project.runs_dir / name / "events.jsonl", [  # type: ignore[attr-defined]
            RunStarted(config={}, world_size=1, total_steps=1, devices=["cpu"], time=began),
            RunFinished(status="completed", step=1, time=began + 1)])
    train, _runs = _pages(qtbot, context)
    context.set_project(project)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: train.header.run_name.text() != "", timeout=10000)
    assert train.header.run_name.text() == "20240601-000000-new"
