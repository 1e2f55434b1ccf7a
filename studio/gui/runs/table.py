"""The table of a project's runs (Runs page)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from studio.core.runs.history import RunSummary
from studio.gui.widgets.run_header import format_duration

COLUMNS = ("Name", "Preset", "Family / method", "Status", "Started", "Duration", "Steps", "Final loss", "Output")


class RunsTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setObjectName("runs_table")
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.summaries: list[RunSummary] = []

    def set_runs(self, summaries: list[RunSummary]) -> None:
        selected = {s.path for s in self.selected()}
        self.summaries = summaries
        self.setRowCount(len(summaries))
        for row, s in enumerate(summaries):
            status = s.status + (f" (on {s.machine})" if s.machine else " (remote)" if s.remote else "")
            cells = (
                s.name,
                s.preset,
                f"{s.family} / {s.method}" if s.family or s.method else "",
                status,
                s.started.strftime("%Y-%m-%d %H:%M") if s.started else "",
                format_duration(s.duration_s) if s.duration_s else "",
                f"{s.steps} / {s.total_steps}" if s.total_steps else str(s.steps),
                f"{s.final_loss:.4f}" if s.final_loss is not None else "",
                "; ".join(o.rsplit("/", 1)[-1] for o in s.outputs),
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, row)
                if col == 3 and s.message:
                    item.setToolTip(s.message)
                self.setItem(row, col, item)
            if s.path in selected:
                self.selectRow(row)

    def selected(self) -> list[RunSummary]:
        rows = sorted({index.row() for index in self.selectionModel().selectedRows()})
        return [self.summaries[r] for r in rows if r < len(self.summaries)]

    def select_paths(self, names: list[str]) -> None:
        self.clearSelection()
        mode = self.selectionMode()
        self.setSelectionMode(QAbstractItemView.SelectionMode.MultiSelection)
        for row, s in enumerate(self.summaries):
            if s.name in names:
                self.selectRow(row)
        self.setSelectionMode(mode)
