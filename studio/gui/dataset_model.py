"""The list model behind the thumbnail grid: the dataset's images, filtered, with lazy thumbnails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPixmap

from studio.core.caption_tags import split_tags
from studio.core.dataset import ImageEntry
from studio.gui.dataset_thumbs import THUMB_SIZE, ThumbnailLoader

ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1
PROBLEMS_ROLE = Qt.ItemDataRole.UserRole + 2

Index = QModelIndex | QPersistentModelIndex


@dataclass
class GridFilter:
    text: str = ""  # in the file name or caption, case-insensitive
    tag: str = ""  # an exact tag
    no_caption: bool = False
    has_problems: bool = False

    @property
    def active(self) -> bool:
        return bool(self.text or self.tag or self.no_caption or self.has_problems)


def _placeholder(color: str) -> QPixmap:
    pixmap = QPixmap(THUMB_SIZE, THUMB_SIZE)
    pixmap.fill(QColor(color))
    painter = QPainter(pixmap)
    painter.setPen(QColor("#888"))
    painter.drawRect(0, 0, THUMB_SIZE - 1, THUMB_SIZE - 1)
    painter.end()
    return pixmap


class DatasetListModel(QAbstractListModel):
    """Rows are the images that pass the filter; thumbnails come from the loader when ready."""

    def __init__(self, loader: ThumbnailLoader, parent: Any = None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.entries: list[ImageEntry] = []
        self.rows: list[int] = []  # indices into entries that pass the filter
        self.problems: dict[Path, list[str]] = {}
        self.filter = GridFilter()
        self._row_of: dict[str, int] = {}
        self._loading = _placeholder("#2b2b2b")
        self._broken = _placeholder("#5a1e1e")
        loader.sig_ready.connect(self._thumb_ready)

    # ------------------------------------------------------------ Qt model

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        entry = self.entries[self.rows[index.row()]]
        if role == Qt.ItemDataRole.DisplayRole:
            return entry.path.name
        if role == Qt.ItemDataRole.DecorationRole:
            pixmap = self.loader.pixmap(entry.path)
            if pixmap is not None:
                return pixmap
            return self._broken if self.loader.failed(entry.path) else self._loading
        if role == Qt.ItemDataRole.ToolTipRole:
            caption = entry.caption if entry.caption is not None else "(no caption)"
            issues = "\n".join(self.problems.get(entry.path, []))
            return f"{entry.path}\n\n{caption}" + (f"\n\n{issues}" if issues else "")
        if role == Qt.ItemDataRole.ForegroundRole:
            if entry.path in self.problems:
                return QColor("#e0a030")
            return None
        if role == Qt.ItemDataRole.SizeHintRole:
            return QSize(THUMB_SIZE + 16, THUMB_SIZE + 28)
        if role == ENTRY_ROLE:
            return entry
        if role == PROBLEMS_ROLE:
            return self.problems.get(entry.path, [])
        return None

    # ------------------------------------------------------------ content

    def set_entries(self, entries: Sequence[ImageEntry]) -> None:
        self.beginResetModel()
        self.entries = list(entries)
        self._apply_filter()
        self.endResetModel()

    def set_problems(self, problems: dict[Path, list[str]]) -> None:
        self.problems = problems
        if self.filter.has_problems:
            self.set_filter(self.filter)
        elif self.rows:
            self.dataChanged.emit(self.index(0), self.index(len(self.rows) - 1))

    def set_filter(self, grid_filter: GridFilter) -> None:
        self.beginResetModel()
        self.filter = grid_filter
        self._apply_filter()
        self.endResetModel()

    def _apply_filter(self) -> None:
        f = self.filter
        text, tag = f.text.lower(), f.tag.strip().lower()
        rows = []
        for i, entry in enumerate(self.entries):
            if f.no_caption and (entry.caption or "").strip():
                continue
            if f.has_problems and entry.path not in self.problems:
                continue
            if text and text not in entry.path.name.lower() and text not in (entry.caption or "").lower():
                continue
            if tag and tag not in (t.lower() for t in split_tags(entry.caption)):
                continue
            rows.append(i)
        self.rows = rows
        self._row_of = {str(self.entries[i].path): r for r, i in enumerate(rows)}

    def entry(self, row: int) -> ImageEntry:
        return self.entries[self.rows[row]]

    def row_of(self, path: Path) -> int | None:
        return self._row_of.get(str(path))

    def caption_changed(self, paths: Sequence[Path]) -> None:
        for path in paths:
            row = self._row_of.get(str(path))
            if row is not None:
                index = self.index(row)
                self.dataChanged.emit(index, index, [Qt.ItemDataRole.ToolTipRole])

    def _thumb_ready(self, key: str) -> None:
        row = self._row_of.get(key)
        if row is not None:
            index = self.index(row)
            self.dataChanged.emit(index, index, [Qt.ItemDataRole.DecorationRole])
