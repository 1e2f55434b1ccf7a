"""Side panels of the Dataset page: concepts with repeats, tag counts, problems, buckets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QSettings,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListView,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_tags import tag_counts
from studio.core.dataset.checks import Problem
from studio.core.dataset.layouts import kohya_folder
from studio.core.dataset.scan import ScanResult
from studio.core.text import plural
from studio.gui.base.layout_state import remember_splitter
from studio.gui.dataset.concepts.concept_editor import ConceptDetails

ConceptRow = tuple[int, Path | None, str, int, int]  # concept index, kohya folder or None, label, images, repeats


def _table(headers: list[str], name: str) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return table


def _number(value: int) -> QTableWidgetItem:
    item = QTableWidgetItem()
    item.setData(Qt.ItemDataRole.DisplayRole, value)
    return item


class TagsPanel(QWidget):
    """Every tag with the number of captions holding it; a click filters the grid by it.

    Counting 10,000 captions is done a slice per timer tick, and the table is only filled
    while it is visible, so neither holds up the grid.
    """

    sig_tag_clicked = Signal(str)
    sig_counts_changed = Signal(object)  # Counter of tag -> captions holding it
    SLICE = 1000  # captions counted per tick

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = _table(["Tag", "Images"], "dataset_tags")
        self.table.setSortingEnabled(True)
        self.table.cellClicked.connect(self._clicked)
        self.counts: Counter[str] = Counter()
        self._stale = False
        self._todo: list[str | None] = []
        self._partial: Counter[str] = Counter()
        self._timer = QTimer(self, interval=0)
        self._timer.timeout.connect(self._count_some)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)

    def _clicked(self, row: int, _column: int) -> None:
        item = self.table.item(row, 0)
        if item is not None:
            self.sig_tag_clicked.emit(item.text())

    def set_counts(self, counts: Counter[str]) -> None:
        self._timer.stop()
        self.counts, self._stale = counts, True
        self.sig_counts_changed.emit(counts)
        if self.isVisible():
            self._fill()

    def recount(self, captions: list[str | None]) -> None:
        """Count the tags of `captions` again, in slices on the GUI thread."""
        self._todo, self._partial = captions, Counter()
        self._timer.start()

    def _count_some(self) -> None:
        chunk, self._todo = self._todo[:self.SLICE], self._todo[self.SLICE:]
        self._partial.update(tag_counts(chunk))
        if not self._todo:
            self.set_counts(self._partial)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self._fill()

    def _fill(self) -> None:
        self._stale = False
        counts = self.counts.most_common(2000)  # the long tail is reachable through the text filter
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(counts))
        for row, (tag, count) in enumerate(counts):
            self.table.setItem(row, 0, QTableWidgetItem(tag))
            self.table.setItem(row, 1, _number(count))
        self.table.setSortingEnabled(True)


class ProblemsModel(QAbstractListModel):
    """Problems as rows; a model (not one item object per row) keeps tens of thousands cheap."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.problems: list[Problem] = []

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.problems)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        problem = self.problems[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            mark = "✗" if problem.severity == "error" else "⚠"
            return f"{mark} {Path(problem.path).name}: {problem.message}"
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{problem.path}\n{problem.message}\nWhat to do: {problem.hint}"
        return None

    def set_problems(self, problems: list[Problem]) -> None:
        """`problems` in panel order (errors first; see dataset_check.panel_order)."""
        self.beginResetModel()
        self.problems = problems
        self.endResetModel()


class ProblemsPanel(QWidget):
    """Validation results; a click selects the image (or shows the file) at fault."""

    sig_path_clicked = Signal(object)  # Path

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel("Not checked yet")
        self.model = ProblemsModel(self)
        self.list = QListView()
        self.list.setObjectName("dataset_problems")
        self.list.setUniformItemSizes(True)
        self.list.setModel(self.model)
        self.list.clicked.connect(lambda index: self.sig_path_clicked.emit(Path(self.model.problems[index.row()].path)))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(self.list)

    def set_problems(self, problems: list[Problem], images: int, errors: int) -> None:
        """`problems` in panel order, `errors` of them errors."""
        self.summary.setText(f"{plural(images, 'image')}: {plural(errors, 'error')}, "
                             f"{plural(len(problems) - errors, 'warning')}")
        self.model.set_problems(problems)

    def count(self) -> int:
        return self.model.rowCount()

    def set_checking(self, done: int, total: int) -> None:
        self.summary.setText(f"Checking images… {done}/{total}")


def concept_rows(scans: list[tuple[int, ScanResult]], concepts: list[ConceptSection]) -> list[ConceptRow]:
    """A row per concept, then one per kohya "N_name" folder inside it with its own image count."""
    rows: list[ConceptRow] = []
    for index, scan in scans:
        concept = concepts[index]
        rows.append((index, None, concept.path, len(scan.entries), concept.repeats))
        for kohya, n in sorted(scan.repeat_folders.items()):
            parsed = kohya_folder(kohya.name)
            assert parsed is not None
            rows.append((index, kohya, f"    {kohya.relative_to(scan.folder)}", n, parsed[0]))
    return rows


class ConceptsPanel(QWidget):
    """Concept folders with image counts; repeats are edited here (kohya folders are renamed), folders
    added and removed, and the chosen concept's captions source, prompts and class images set."""

    sig_repeats_changed = Signal(int, object, int)  # concept index, kohya folder Path or None, new N
    sig_add_folder = Signal(object)  # Path
    sig_remove = Signal(int)  # concept index

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = _table(["Folder", "Images", "Repeats"], "dataset_concepts")
        self.rows: list[ConceptRow] = []
        self.concepts: list[ConceptSection] = []
        self.details = ConceptDetails()
        self.add_button = QPushButton("Add folder…")
        self.add_button.setObjectName("concepts_add")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("concepts_remove")
        self.remove_button.setToolTip("Stop training on this folder (its images stay where they are)")
        self.undo_rename = QPushButton()
        self.undo_rename.setObjectName("concepts_undo_rename")
        self.undo_rename.setVisible(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        buttons.addWidget(self.undo_rename)
        details = QScrollArea()
        details.setWidgetResizable(True)
        details.setWidget(self.details)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table, 2)
        layout.addLayout(buttons)
        layout.addWidget(QLabel("Kohya folders (N_name) are renamed when their repeats change."))
        layout.addWidget(details, 3)
        self.table.currentCellChanged.connect(lambda row, *_: self._show_details(row))
        self.add_button.clicked.connect(self._pick_folder)
        self.start_folder: Callable[[], str] = lambda: ""  # where Add folder… opens: the page sets the project
        self.details.project_folder = lambda: self.start_folder()
        self.remove_button.clicked.connect(self._remove_current)

    def set_rows(self, rows: list[ConceptRow], concepts: list[ConceptSection] | None = None) -> None:
        chosen = self.current_index()
        self.rows = rows
        if concepts is not None:
            self.concepts = concepts
        self.table.setRowCount(len(rows))
        for row, (index, kohya, label, images, repeats) in enumerate(rows):
            self.table.setItem(row, 0, QTableWidgetItem(label))
            self.table.setItem(row, 1, _number(images))
            spin = QSpinBox()
            spin.setRange(1, 10000)
            spin.setValue(repeats)
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(
                lambda value, i=index, k=kohya: self.sig_repeats_changed.emit(i, k, value))
            self.table.setCellWidget(row, 2, spin)
        again = next((r for r, found in enumerate(rows) if found[0] == max(chosen, 0) and found[1] is None), -1)
        if again >= 0:
            self.table.setCurrentCell(again, 0)
        self._show_details(again)

    def current_index(self) -> int:
        """The concept of the chosen row (a kohya folder's row belongs to its concept), or -1."""
        row = self.table.currentRow()
        return self.rows[row][0] if 0 <= row < len(self.rows) else -1

    def refresh_details(self) -> None:
        self._show_details(self.table.currentRow())

    def _show_details(self, row: int) -> None:
        index = self.rows[row][0] if 0 <= row < len(self.rows) else -1
        concept = self.concepts[index] if 0 <= index < len(self.concepts) else None
        self.details.set_concept(index if concept is not None else -1, concept)
        self.remove_button.setEnabled(concept is not None)

    def _pick_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of training images", self.start_folder())
        if folder:
            self.sig_add_folder.emit(Path(folder))

    def _remove_current(self) -> None:
        index = self.current_index()
        if index >= 0:
            self.sig_remove.emit(index)


class BucketsPanel(QWidget):
    """How many images fall in each aspect-ratio bucket at the training resolution."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel("Buckets appear once image sizes are read.")
        self.table = _table(["Bucket (w x h)", "Images"], "dataset_buckets")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.table)

    def set_counts(self, counts: dict[tuple[int, int], int], resolution: int, enabled: bool) -> None:
        state = "" if enabled else " (buckets are off: every image is cropped square)"
        self.label.setText(f"At resolution {resolution}{state}:")
        ordered = sorted(counts.items(), key=lambda kv: -kv[1])
        self.table.setRowCount(len(ordered))
        for row, ((w, h), n) in enumerate(ordered):
            self.table.setItem(row, 0, QTableWidgetItem(f"{w} x {h}"))
            self.table.setItem(row, 1, _number(n))


def lay_out_page(page: QWidget, toolbar: QWidget, grid: QWidget, editor: QWidget, settings: QSettings,
                 panels: tuple[tuple[QWidget, str], ...]) -> tuple[QTabWidget, QLabel]:
    """The Dataset page's layout: the toolbar above, the grid beside the editor over the tabs of `panels` (the
    splitters' sizes kept in `settings`), the status line below; the tabs and the status line."""
    tabs = QTabWidget()
    for panel, name in panels:
        tabs.addTab(panel, name)
    right = QSplitter(Qt.Orientation.Vertical)
    right.addWidget(editor)
    right.addWidget(tabs)
    split = QSplitter()
    split.addWidget(grid)
    split.addWidget(right)
    split.setStretchFactor(0, 3)
    split.setStretchFactor(1, 2)
    remember_splitter(split, settings, "dataset_split")
    remember_splitter(right, settings, "dataset_editor_split")
    status = QLabel()
    status.setObjectName("dataset_status")
    status.setWordWrap(True)
    layout = QVBoxLayout(page)
    layout.addWidget(toolbar)
    layout.addWidget(split, 1)
    layout.addWidget(status)
    return tabs, status
