"""Layouts a person arranged stay arranged: splitter positions and table columns are kept in the
settings file (through the context), and tables keep room for a few rows on small screens."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLayout, QSplitter, QTableView, QWidget

PREFIX = "layout/"


def remember_splitter(splitter: QSplitter, settings: QSettings, key: str, default: list[int] | None = None) -> None:
    """Restore the splitter's position saved under `key` (else `default` sizes) and save it when moved."""
    state = settings.value(PREFIX + key)
    if not (isinstance(state, QByteArray) and splitter.restoreState(state)) and default:
        splitter.setSizes(default)
    splitter.splitterMoved.connect(lambda *_: settings.setValue(PREFIX + key, splitter.saveState()))


def remember_columns(header: QHeaderView, settings: QSettings, key: str) -> bool:
    """Restore the column widths and order saved under `key`; save them when a person changes them.
    Returns whether a saved layout was restored (else the caller sizes the columns to their contents)."""
    state = settings.value(PREFIX + key)
    restored = isinstance(state, QByteArray) and header.restoreState(state)

    def save(*_args: object) -> None:
        settings.setValue(PREFIX + key, header.saveState())

    header.sectionResized.connect(save)
    header.sectionMoved.connect(save)
    return restored


def keep_rows_visible(table: QAbstractItemView, rows: int) -> None:
    """A minimum height that shows `rows` rows below the header, so a small window never squeezes a
    table down to one row."""
    row_height = table.verticalHeader().defaultSectionSize() if isinstance(table, QTableView) else 24
    header = table.horizontalHeader().sizeHint().height() if isinstance(table, QTableView) else 0
    scrollbar = table.horizontalScrollBar().sizeHint().height()
    table.setMinimumHeight(header + rows * row_height + scrollbar + 2 * table.frameWidth())


def remove_widgets(layout: QLayout, widgets: list[QWidget]) -> None:
    """Take `widgets` (the ones a page put into `layout`) out of it and delete them later, without asking the
    layout for its items: a layout item's Python wrapper can outlive the item and be handed out again for
    another object at the same address (a menu read back as a QWidgetItem)."""
    for widget in widgets:
        layout.removeWidget(widget)
        widget.deleteLater()
    widgets.clear()
