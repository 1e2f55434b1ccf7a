"""The table of a project's runs (Runs page)."""

from __future__ import annotations

from PySide6.QtCore import QItemSelection, QItemSelectionModel, QSettings, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from studio.core.runs.records.history import RunSummary
from studio.gui.base.layout_state import keep_rows_visible, remember_columns
from studio.gui.widgets.run_header import format_duration

# What a person looks for first comes first; the long Output column last.
COLUMNS = ("Name", "Status", "Steps", "Final loss", "Validation loss", "Started", "Duration", "Images/s",
           "Family / method", "Preset", "Output")
STATUS_COLUMN = COLUMNS.index("Status")
MIN_ROWS = 5


class RunsTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setObjectName("runs_table")
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionsMovable(True)
        header.setStretchLastSection(True)
        keep_rows_visible(self, MIN_ROWS)
        self.resizeColumnsToContents()  # the titles, until there are runs to fit
        self.sized = False  # columns fit their contents once; then a person's widths are kept
        self.summaries: list[RunSummary] = []

    def remember_layout(self, settings: QSettings) -> None:
        self.sized = remember_columns(self.horizontalHeader(), settings, "runs_table")

    def set_runs(self, summaries: list[RunSummary]) -> None:
        selected = {s.path for s in self.selected()}
        self.summaries = summaries
        self.setRowCount(len(summaries))
        keep = QItemSelection()
        for row, s in enumerate(summaries):
            status = s.status + (f" (on {s.machine})" if s.machine else " (remote)" if s.remote else "")
            cells = {
                "Name": s.name,
                "Status": status,
                "Steps": f"{s.steps} / {s.total_steps}" if s.total_steps else str(s.steps),
                "Final loss": f"{s.final_loss:.4f}" if s.final_loss is not None else "",
                "Validation loss": f"{s.validation_loss:.4f}" if s.validation_loss is not None else "",
                "Started": s.started.strftime("%Y-%m-%d %H:%M") if s.started else "",
                "Duration": format_duration(s.duration_s) if s.duration_s else "",
                "Images/s": f"{s.images_per_s:.3g}" if s.images_per_s else "",
                "Family / method": f"{s.family} / {s.method}" if s.family or s.method else "",
                "Preset": s.preset,
                "Output": "; ".join(o.rsplit("/", 1)[-1] for o in s.outputs),
            }
            for col, name in enumerate(COLUMNS):
                item = QTableWidgetItem(cells[name])
                item.setData(Qt.ItemDataRole.UserRole, row)
                if col == STATUS_COLUMN and s.message:
                    item.setToolTip(s.message)
                elif name == "Duration" and s.phases:
                    item.setToolTip(s.phases)  # where the time went: loading, caching, steps, samples, ...
                elif name == "Output" and s.outputs:
                    item.setToolTip("\n".join(f"{o}  (for {r})" if (r := s.output_readers(o)) else o
                                              for o in s.outputs))
                self.setItem(row, col, item)
            if s.path in selected:
                keep.select(self.model().index(row, 0), self.model().index(row, len(COLUMNS) - 1))
        # The runs chosen stay chosen, all of them, wherever a new run moved their rows.
        self.selectionModel().select(keep, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        if summaries and not self.sized:
            self.resizeColumnsToContents()
            self.sized = True

    def visible_rows(self) -> int:
        """How many rows the table shows whole at its present size."""
        return max(0, self.viewport().height() // self.verticalHeader().defaultSectionSize())

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
