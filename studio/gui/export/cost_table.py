"""The Export page's cost table: GPU type x count, fits, time, cost; cheapest and fastest marked."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from studio.core.export.cost import CostRow, format_cost, format_duration

COLUMNS = ("GPUs", "Fits", "VRAM need / have", "Steps", "Time", "Cost", "Best")
CHEAPEST = QColor(206, 238, 206)
FASTEST = QColor(206, 222, 245)
NO_FIT = QColor(150, 150, 150)


class CostTable(QTableWidget):
    """Rows of `CostRow`; choosing a row emits its GPU type id and per-node count."""

    sig_row_chosen = Signal(str, int)  # gpu id, GPUs per node

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setObjectName("export_cost_table")
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.rows: list[CostRow] = []
        self.cellDoubleClicked.connect(self._chosen)

    def set_rows(self, rows: list[CostRow], currency: str = "USD") -> None:
        self.rows = rows
        self.setRowCount(len(rows))
        for number, row in enumerate(rows):
            need = "?" if row.vram_needed_mb is None else f"{row.vram_needed_mb / 1024:.1f}"
            best = " + ".join(word for word, on in (("cheapest", row.cheapest), ("fastest", row.fastest)) if on)
            cells = (row.label, {True: "yes", False: "no", None: "?"}[row.fits], f"{need} / {row.gpu.vram_gb:.0f} GB",
                     str(row.steps), format_duration(row.hours), f"{format_cost(row)} {currency}", best)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column in (3, 4, 5):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if row.cheapest:
                    item.setBackground(QBrush(CHEAPEST))
                elif row.fastest:
                    item.setBackground(QBrush(FASTEST))
                if row.fits is False:
                    item.setForeground(QBrush(NO_FIT))
                    item.setToolTip(f"about {need} GB needed per GPU; the {row.gpu.name} has {row.gpu.vram_gb:.0f} GB")
                elif row.measured:
                    item.setToolTip("speed from a measured figure for this GPU")
                self.setItem(number, column, item)

    def row_text(self, number: int) -> list[str]:
        """The cells of one row as shown (for tests and screenshots)."""
        items = (self.item(number, c) for c in range(self.columnCount()))
        return [item.text() if item is not None else "" for item in items]

    def _chosen(self, number: int, _column: int) -> None:
        row = self.rows[number]
        self.sig_row_chosen.emit(row.gpu.id, row.per_node)
