"""The window on small screens: at 1280x720 the Runs table shows at least five runs, the Export cost
table its Time, Cost and Steps; the layout a person arranges is there at the next start."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from studio.core.config.files.toml_file import dump_resolved
from studio.core.project.folder import Project, create_project, default_config
from studio.core.runs.events import EventWriter, RunFinished, RunStarted, Step
from studio.gui.context import StudioContext
from studio.gui.runs.page import RunsPage
from studio.gui.shell.app import window_size
from studio.gui.shell.main_window import MainWindow


def _runs(project: Project, count: int) -> None:
    config = default_config()
    for n in range(count):
        run = project.runs_dir / f"2026010{n}-120000-run{n}"
        run.mkdir(parents=True)
        (run / "config.toml").write_text(dump_resolved(config))
        writer = EventWriter(run / "events.jsonl", flush_interval=0.0)
        start = time.time() - 600
        writer.write(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"], time=start))
        writer.write(Step(step=10, epoch=1, loss=0.1, lr=1e-4, time=start + 60))
        writer.write(RunFinished(status="completed", step=10, outputs=["output/pytorch_lora_weights.safetensors"],
                                 time=start + 61))
        writer.close()


def _window(qtbot, settings: Path, project: Project, size: tuple[int, int]) -> MainWindow:  # type: ignore[no-untyped-def]
    window = MainWindow(StudioContext(QSettings(str(settings), QSettings.Format.IniFormat)))
    qtbot.addWidget(window)
    window.set_project(project)
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    return window


@pytest.mark.parametrize(("size", "rows"), [((1280, 720), 5), ((1024, 700), 4)])
def test_the_runs_table_keeps_rows_in_view(qtbot, tmp_path: Path, size: tuple[int, int], rows: int) -> None:  # type: ignore[no-untyped-def]
    project = create_project(tmp_path / "project")
    _runs(project, 8)
    window = _window(qtbot, tmp_path / "settings.ini", project, size)
    page = window.show_page("page_runs")
    assert isinstance(page, RunsPage)
    page.refresh()
    qtbot.wait(50)
    assert page.table.rowCount() == 8
    assert page.table.visible_rows() >= rows
    # Key columns are whole: the name, the status and the steps of every run.
    header = page.table.horizontalHeader()
    for column in range(3):
        assert header.sectionViewportPosition(column) + header.sectionSize(column) <= page.table.viewport().width()


def test_export_costs_are_visible_at_1280x720(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    project = create_project(tmp_path / "project")
    window = _window(qtbot, tmp_path / "settings.ini", project, (1280, 720))
    page = window.show_page("page_export")
    qtbot.wait(50)
    table = page.table  # type: ignore[attr-defined]
    header = table.horizontalHeader()
    for name in ("GPUs", "Time", "Cost", "Steps"):
        column = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())].index(name)
        assert header.sectionViewportPosition(column) + header.sectionSize(column) <= table.viewport().width(), name
    assert table.viewport().height() // table.verticalHeader().defaultSectionSize() >= 5


def test_splitters_and_columns_are_remembered(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    project = create_project(tmp_path / "project")
    _runs(project, 2)
    settings = tmp_path / "settings.ini"
    window = _window(qtbot, settings, project, (1280, 720))
    page = window.show_page("page_runs")
    assert isinstance(page, RunsPage)
    page.splitter.setSizes([180, 500])  # a short table, tall plots
    page.splitter.splitterMoved.emit(180, 1)  # what dragging the handle emits
    chosen = page.splitter.sizes()
    page.table.horizontalHeader().resizeSection(0, 321)
    window.close()
    window.context.settings.sync()

    again = _window(qtbot, settings, project, (1280, 720))
    page = again.show_page("page_runs")
    assert isinstance(page, RunsPage)
    qtbot.wait(50)
    assert page.table.horizontalHeader().sectionSize(0) == 321
    assert abs(page.splitter.sizes()[0] - chosen[0]) <= 10


def test_the_self_test_size_is_read_as_width_by_height() -> None:
    assert window_size("1024X700") == (1024, 700)
    with pytest.raises(argparse.ArgumentTypeError, match="WIDTHxHEIGHT"):
        window_size("1024*700")
    with pytest.raises(argparse.ArgumentTypeError, match="at least 320x240"):
        window_size("200x100")
