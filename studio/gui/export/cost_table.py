"""The Export page's cost table: GPU type x count, fits, time, cost; cheapest and fastest marked."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from studio.core.export.cost import CostRow, format_cost, format_duration
from studio.gui.base.layout_state import keep_rows_visible

# What decides a choice first (time and cost); the details after.
COLUMNS = ("GPUs", "Time", "Cost", "Steps", "Fits", "VRAM need / have", "Best")
NUMBERS = ("Time", "Cost", "Steps")
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
        self.setWordWrap(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        keep_rows_visible(self, 5)
        self.rows: list[CostRow] = []
        self._items: list[QTableWidgetItem] = []
        self.cellDoubleClicked.connect(self._chosen)

    def set_rows(self, rows: list[CostRow], currency: str = "USD") -> None:
        self.rows = rows
        # The items' Python wrappers live as long as the table holds the items: Qt deletes a replaced item
        # itself, and PySide must still find its wrapper then (a freed one crashed the window on a refresh).
        previous, self._items = self._items, []
        self.setRowCount(len(rows))
        for number, row in enumerate(rows):
            need = "?" if row.vram_needed_mb is None else f"{row.vram_needed_mb / 1024:.1f}"
            best = " + ".join(word for word, on in (("cheapest", row.cheapest), ("fastest", row.fastest),
                                                    ("little gain for the cost", row.little_gain)) if on)
            cells = {"GPUs": row.label, "Fits": {True: "yes", False: "no", None: "?"}[row.fits],
                     "VRAM need / have": f"{need} / {row.gpu.vram_gb:.0f} GB", "Steps": str(row.steps),
                     "Time": format_duration(row.hours_min, row.hours_max), "Cost": f"{format_cost(row)} {currency}", "Best": best}
            for column, name in enumerate(COLUMNS):
                item = QTableWidgetItem(cells[name])
                if name in NUMBERS:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if row.cheapest:
                    item.setBackground(QBrush(CHEAPEST))
                elif row.fastest:
                    item.setBackground(QBrush(FASTEST))
                if row.fits is False:
                    item.setForeground(QBrush(NO_FIT))
                    item.setToolTip(f"about {need} GB needed per GPU; the {row.gpu.name} has {row.gpu.vram_gb:.0f} GB")
                elif row.little_gain:
                    item.setToolTip("more GPUs than this is worth: the cost rises much more than the time falls "
                                    "(against half as many of the same GPU)")
                elif row.measured:
                    item.setToolTip("speed from a measured figure for this GPU")
                self.setItem(number, column, item)
                self._items.append(item)
        del previous  # the replaced items are deleted by now: their wrappers may go

    def row_text(self, number: int) -> dict[str, str]:
        """The cells of one row as shown, by column title (for tests and screenshots)."""
        items = {name: self.item(number, c) for c, name in enumerate(COLUMNS)}
        return {name: item.text() if item is not None else "" for name, item in items.items()}

    def _chosen(self, number: int, _column: int) -> None:
        row = self.rows[number]
        self.sig_row_chosen.emit(row.gpu.id, row.per_node)
