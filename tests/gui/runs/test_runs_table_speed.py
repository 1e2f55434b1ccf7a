"""The Runs table shows each run's images/s, and where its time went when the pointer rests on its duration."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.runs.records.history import RunSummary
from studio.gui.runs.table import COLUMNS, RunsTable


def test_a_run_s_speed_and_phases_are_in_its_row(qtbot: QtBot, tmp_path: Path) -> None:
    table = RunsTable()
    qtbot.addWidget(table)
    table.set_runs([
        RunSummary(path=tmp_path / "a", name="a", status="completed", duration_s=47.0, images_per_s=9.54,
                   phases="loading 12.3 s, text encoding (CPU) 4.1 s, steps 30.0 s (9.54 images/s)"),
        RunSummary(path=tmp_path / "b", name="b", status="completed", duration_s=20.0),  # an older trainer's run
    ])
    speed, duration = COLUMNS.index("Images/s"), COLUMNS.index("Duration")
    assert [table.item(row, speed).text() for row in range(2)] == ["9.54", ""]
    assert table.item(0, duration).toolTip().startswith("loading 12.3 s, text encoding (CPU) 4.1 s")
    assert table.item(1, duration).toolTip() == ""
