"""The list model behind the thumbnail grid: the dataset's images, filtered, with lazy thumbnails.

The grid is filled in two steps: `set_paths` as soon as the folders are listed (names
and thumbnails can show), then `set_entries` once captions are read. Every `data` call
is a call from C++ into Python, so it does as little as possible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPixmap
from PySide6.QtWidgets import QListView

from studio.core.dataset.scan import ImageEntry
from studio.gui.dataset.grid.grid_search import GridSearch
from studio.gui.dataset.grid.thumbnail_loader import THUMB_SIZE, ThumbnailLoader

ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1
PROBLEMS_ROLE = Qt.ItemDataRole.UserRole + 2
CELL = QSize(THUMB_SIZE + 16, THUMB_SIZE + 28)
_PROBLEM_COLOR = QColor("#e0a030")

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


# Captions a person did not write for the image: made from its folder's name or the concept's prompt.
DERIVED_SOURCES = ("folder", "prompt", "none")


def has_own_caption(entry: ImageEntry) -> bool:
    """The image has a caption of its own (a sidecar file, metadata.jsonl), not one made up for it."""
    return bool((entry.caption or "").strip()) and entry.caption_source not in DERIVED_SOURCES


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
        self.paths: list[Path] = []  # every image, in scan order
        self.entries: list[ImageEntry] = []  # same order as paths once captions are read, else []
        self.rows: list[int] = []  # indices into paths that pass the filter
        self.problems: dict[str, list[str]] = {}  # image path -> messages
        self.filter = GridFilter()
        self._row_of: dict[str, int] = {}
        self._keys: list[str] = []  # str(path) for each of paths
        self._search: GridSearch | None = None  # made for entries on the first filter (or handed in with them)
        self._loading = _placeholder("#2b2b2b")
        self._broken = _placeholder("#5a1e1e")
        loader.sig_ready.connect(self._thumb_ready)

    # ------------------------------------------------------------ Qt model

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = index.row()
        if row < 0 or row >= len(self.rows):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.paths[self.rows[row]].name
        if role == Qt.ItemDataRole.DecorationRole:
            path = self.paths[self.rows[row]]
            pixmap = self.loader.pixmap(path)
            if pixmap is not None:
                return pixmap
            return self._broken if self.loader.failed(path) else self._loading
        if role == Qt.ItemDataRole.ForegroundRole:
            return _PROBLEM_COLOR if self.problems and str(self.paths[self.rows[row]]) in self.problems else None
        if role == Qt.ItemDataRole.SizeHintRole:
            return CELL
        if role == Qt.ItemDataRole.ToolTipRole:
            path = self.paths[self.rows[row]]
            if not self.entries:
                return f"{path}\n\n(reading the caption…)"
            caption = self.entries[self.rows[row]].caption
            issues = "\n".join(self.problems.get(str(path), []))
            return f"{path}\n\n{caption if caption is not None else '(no caption)'}" + (
                f"\n\n{issues}" if issues else "")
        if role == ENTRY_ROLE:
            return self.entries[self.rows[row]] if self.entries else None
        if role == PROBLEMS_ROLE:
            return self.problems.get(str(self.paths[self.rows[row]]), [])
        return None

    # ------------------------------------------------------------ content

    def set_paths(self, paths: Sequence[Path], keys: Sequence[str] | None = None) -> None:
        """Show the images of a fresh listing; captions are not known yet. `keys`: str of each path."""
        self.beginResetModel()
        self.paths, self.entries, self.problems = list(paths), [], {}
        self._search = None
        self._keys = list(keys) if keys is not None else [str(p) for p in self.paths]
        self._apply_filter()
        self.endResetModel()

    def set_entries(self, entries: Sequence[ImageEntry], search: GridSearch | None = None) -> None:
        """Captions arrived. When the images are those already shown, rows, scrolling and selection stay.
        `search`: the filter's lookups made for these entries off the GUI thread (else made at the first filter)."""
        entries = list(entries)
        self._search = search if search is not None and search.serves(entries) else None
        if len(entries) == len(self.paths) and all(e.path is p or e.path == p for e, p in zip(entries, self.paths, strict=True)):
            self.entries = entries
            if self.filter.active:
                self.set_filter(self.filter)
            return
        self.beginResetModel()
        self.paths, self.entries = [e.path for e in entries], entries
        self._keys = [str(p) for p in self.paths]
        self._apply_filter()
        self.endResetModel()

    def set_problems(self, problems: dict[str, list[str]]) -> None:
        self.problems = problems
        if self.filter.has_problems:
            self.set_filter(self.filter)
        elif self.rows:
            self.dataChanged.emit(self.index(0), self.index(len(self.rows) - 1), [Qt.ItemDataRole.ForegroundRole])

    def set_filter(self, grid_filter: GridFilter) -> None:
        self.beginResetModel()
        self.filter = grid_filter
        self._apply_filter()
        self.endResetModel()

    def _apply_filter(self) -> None:
        f = self.filter
        if not f.active or not self.entries:
            # Until captions are read a filter cannot be judged; every image shows.
            self.rows = list(range(len(self.paths)))
        else:
            if self._search is None:
                self._search = GridSearch(self.entries)
            rows = self._search.matching(f.text, f.tag)
            if f.no_caption:
                rows = [i for i in rows if not has_own_caption(self.entries[i])]
            if f.has_problems:
                rows = [i for i in rows if self._keys[i] in self.problems]
            self.rows = rows
        self._row_of = {}  # built on first use: most loads never look a path up

    def entry(self, row: int) -> ImageEntry:
        return self.entries[self.rows[row]]

    def row_of(self, path: Path) -> int | None:
        return self._row_for(str(path))

    def _row_for(self, key: str) -> int | None:
        if not self._row_of and self.rows:
            if len(self.rows) == len(self._keys):
                self._row_of = dict(zip(self._keys, range(len(self._keys)), strict=True))
            else:
                self._row_of = {self._keys[i]: r for r, i in enumerate(self.rows)}
        return self._row_of.get(key)

    def caption_changed(self, paths: Sequence[Path]) -> None:
        if len(paths) > 50 and self.rows:
            # One signal for a bulk edit instead of thousands.
            self.dataChanged.emit(self.index(0), self.index(len(self.rows) - 1), [Qt.ItemDataRole.ToolTipRole])
            return
        for path in paths:
            row = self.row_of(path)
            if row is not None:
                index = self.index(row)
                self.dataChanged.emit(index, index, [Qt.ItemDataRole.ToolTipRole])

    def _thumb_ready(self, key: str) -> None:
        row = self._row_for(key)
        if row is not None:
            index = self.index(row)
            self.dataChanged.emit(index, index, [Qt.ItemDataRole.DecorationRole])


def make_grid_view(model: DatasetListModel) -> QListView:
    """The thumbnail grid: icon mode with fixed cells, so Qt lays out 10,000 items without asking each."""
    view = QListView()
    view.setObjectName("dataset_grid")
    view.setViewMode(QListView.ViewMode.IconMode)
    view.setResizeMode(QListView.ResizeMode.Adjust)
    view.setMovement(QListView.Movement.Static)
    view.setUniformItemSizes(True)
    # Lay out the cells in steps so the first rows paint before the last are placed.
    view.setLayoutMode(QListView.LayoutMode.Batched)
    view.setBatchSize(1000)
    view.setIconSize(QSize(THUMB_SIZE, THUMB_SIZE))
    view.setGridSize(CELL)
    view.setSelectionMode(QListView.SelectionMode.ExtendedSelection)
    view.setModel(model)
    return view
