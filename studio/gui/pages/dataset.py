"""The Dataset page: every image with its caption, fast caption editing, bulk edits and validation."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEventLoop, QItemSelectionModel, QSize, Qt, QThreadPool, QTimer
from PySide6.QtGui import QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.core.captions import CaptionConflict, CaptionEdit, CaptionStore
from studio.core.config import TrainConfig
from studio.core.dataset import ImageEntry, ScanResult, kohya_folder
from studio.core.dataset_buckets import bucket_counts
from studio.gui.context import StudioContext
from studio.gui.dataset_bulk import BULK_OPS, BulkDialog
from studio.gui.dataset_editor import CaptionEditor
from studio.gui.dataset_model import DatasetListModel, GridFilter
from studio.gui.dataset_panels import BucketsPanel, ConceptsPanel, ProblemsPanel, TagsPanel
from studio.gui.dataset_tasks import CheckOutcome, CheckTask, ScanOutcome, ScanTask, TaskSignals
from studio.gui.dataset_thumbs import THUMB_SIZE, ThumbnailLoader, cache_dir
from studio.gui.dataset_undo import CaptionCommand
from studio.gui.page import Page
from studio.gui.selftest_options import SelfTestOptions

SAVE_DELAY_MS = 700


class DatasetPage(Page):
    title = "Dataset"
    page_id = "page_dataset"

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.store: CaptionStore | None = None
        self.scans: list[tuple[int, ScanResult]] = []
        self.undo_stack = QUndoStack(self)
        self.loader = ThumbnailLoader(self)
        self.model = DatasetListModel(self.loader, self)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(1)
        self.signals = TaskSignals(self)
        self._generation = 0
        self._scanning = self._checking = False
        self._started = 0.0
        self.first_paint_ms: float | None = None
        self.problems: list[Any] = []
        self._save_timer = QTimer(self, singleShot=True, interval=SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self.save_now)
        self._build()
        self.signals.sig_scanned.connect(self._scanned)
        self.signals.sig_checked.connect(self._checked)
        self.signals.sig_progress.connect(self.problems_panel.set_checking)
        context.sig_project_changed.connect(lambda _p: self.reload())
        context.sig_config_changed.connect(self._config_changed)
        self._config_key: str | None = None
        if context.config is not None:
            self.reload()

    # ------------------------------------------------------------ layout

    def _build(self) -> None:
        self.filter_text = QLineEdit()
        self.filter_text.setPlaceholderText("Filter by file name or caption")
        self.filter_text.setObjectName("dataset_filter")
        self.filter_tag = QLineEdit()
        self.filter_tag.setPlaceholderText("Tag")
        self.filter_tag.setObjectName("dataset_tag_filter")
        self.filter_tag.setMaximumWidth(160)
        self.no_caption = QCheckBox("No caption")
        self.with_problems = QCheckBox("Has problems")
        self.bulk_button = QPushButton("Bulk edit…")
        self.bulk_button.setObjectName("dataset_bulk")
        undo_button, redo_button = QPushButton("Undo"), QPushButton("Redo")
        undo_button.clicked.connect(self.undo_stack.undo)
        redo_button.clicked.connect(self.undo_stack.redo)
        self.undo_stack.canUndoChanged.connect(undo_button.setEnabled)
        self.undo_stack.canRedoChanged.connect(redo_button.setEnabled)
        undo_button.setEnabled(False)
        redo_button.setEnabled(False)
        for action, keys in ((self.undo_stack.createUndoAction(self), QKeySequence.StandardKey.Undo),
                             (self.undo_stack.createRedoAction(self), QKeySequence.StandardKey.Redo)):
            action.setShortcut(keys)
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            self.addAction(action)
        bar = QHBoxLayout()
        for w in (self.filter_text, self.filter_tag, self.no_caption, self.with_problems, self.bulk_button,
                  undo_button, redo_button):
            bar.addWidget(w)
        self.view = QListView()
        self.view.setObjectName("dataset_grid")
        self.view.setViewMode(QListView.ViewMode.IconMode)
        self.view.setResizeMode(QListView.ResizeMode.Adjust)
        self.view.setMovement(QListView.Movement.Static)
        self.view.setUniformItemSizes(True)
        # Lay out 10,000 cells in steps so the first rows paint before the last are placed.
        self.view.setLayoutMode(QListView.LayoutMode.Batched)
        self.view.setBatchSize(1000)
        self.view.setIconSize(QSize(THUMB_SIZE, THUMB_SIZE))
        self.view.setGridSize(QSize(THUMB_SIZE + 16, THUMB_SIZE + 28))
        self.view.setSelectionMode(QListView.SelectionMode.ExtendedSelection)
        self.view.setModel(self.model)
        self.view.selectionModel().currentChanged.connect(lambda cur, _prev: self._show_row(cur.row()))
        self.editor = CaptionEditor()
        self.editor.sig_caption_typed.connect(self._typed)
        self.editor.sig_next.connect(lambda: self.step(1))
        self.editor.sig_previous.connect(lambda: self.step(-1))
        self.concepts_panel, self.tags_panel = ConceptsPanel(), TagsPanel()
        self.problems_panel, self.buckets_panel = ProblemsPanel(), BucketsPanel()
        self.tabs = QTabWidget()
        for panel, name in ((self.concepts_panel, "Concepts"), (self.tags_panel, "Tags"),
                            (self.problems_panel, "Problems"), (self.buckets_panel, "Buckets")):
            self.tabs.addTab(panel, name)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.editor)
        right.addWidget(self.tabs)
        split = QSplitter()
        split.addWidget(self.view)
        split.addWidget(right)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.status_label = QLabel()
        self.status_label.setObjectName("dataset_status")
        self.status_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(split, 1)
        layout.addWidget(self.status_label)
        for signal in (self.filter_text.textChanged, self.filter_tag.textChanged):
            signal.connect(self._refilter)
        for box in (self.no_caption, self.with_problems):
            box.toggled.connect(self._refilter)
        self.bulk_button.clicked.connect(self.open_bulk_dialog)
        self.tags_panel.sig_tag_clicked.connect(self.filter_tag.setText)
        self.problems_panel.sig_path_clicked.connect(self.select_path)
        self.concepts_panel.sig_repeats_changed.connect(self._repeats_changed)

    # ------------------------------------------------------------ loading

    def _config_changed(self, config: TrainConfig) -> None:
        key = json.dumps(config.dataset.model_dump(), sort_keys=True, default=str)
        if key != self._config_key:
            self.reload()

    def reload(self) -> None:
        """Scan the project's dataset again (pending captions are saved first)."""
        self.save_now()
        config = self.context.config
        self._generation += 1
        self.undo_stack.clear()
        self.store, self.scans = None, []
        self.model.set_entries([])
        self.editor.set_entry(None)
        if config is None or self.context.project is None:
            self._config_key = None
            self.status_label.setText("Open a project to see its dataset.")
            return
        self._config_key = json.dumps(config.dataset.model_dump(), sort_keys=True, default=str)
        self._started = time.perf_counter()
        self._scanning = True
        self.first_paint_ms = None
        self.status_label.setText("Reading the dataset…")
        concepts = list(config.dataset.concepts)
        self.pool.start(ScanTask(self._generation, concepts, self.context.project.root, self.signals))

    def _scanned(self, outcome: ScanOutcome) -> None:
        if outcome.generation != self._generation or self.context.config is None:
            return
        self._scanning = False
        self.scans = outcome.scans
        entries = [e for _, scan in outcome.scans for e in scan.entries]
        self.store = CaptionStore(entries, self.context.config.dataset.caption_extension)
        self.model.set_entries(entries)
        self.view.viewport().repaint()
        self.first_paint_ms = (time.perf_counter() - self._started) * 1000
        self.problems = list(outcome.errors)
        self._update_concepts()
        self.tags_panel.set_captions(e.caption for e in entries)
        self.status_label.setText(f"{len(entries)} images. Checking them in the background…")
        if entries:
            self.view.setCurrentIndex(self.model.index(0))
        self._checking = True
        resolution = self.context.config.dataset.resolution
        self.pool.start(CheckTask(self._generation, [s for _, s in outcome.scans], resolution, self.signals))

    def _checked(self, outcome: CheckOutcome) -> None:
        if outcome.generation != self._generation or self.context.config is None:
            return
        self._checking = False
        self.problems.extend(outcome.problems)
        by_path: dict[Path, list[str]] = {}
        for p in self.problems:
            by_path.setdefault(Path(p.path), []).append(p.message)
        self.model.set_problems(by_path)
        self.problems_panel.set_problems(self.problems, len(self.model.entries))
        d = self.context.config.dataset
        counts = bucket_counts(outcome.sizes.values(), d.resolution, d.bucket_step, d.min_bucket, d.max_bucket)
        self.buckets_panel.set_counts(dict(counts), d.resolution, d.buckets)
        errors = sum(p.severity == "error" for p in self.problems)
        self.status_label.setText(
            f"{len(self.model.entries)} images, {errors} errors, {len(self.problems) - errors} warnings.")

    def _update_concepts(self) -> None:
        config = self.context.config
        if config is None:
            return
        rows: list[tuple[int, Path | None, str, int, int]] = []
        for index, scan in self.scans:
            concept = config.dataset.concepts[index]
            rows.append((index, None, concept.path, len(scan.entries), concept.repeats))
            groups: dict[Path, int] = {}
            for entry in scan.entries:
                for parent in entry.path.parents:
                    if parent == scan.folder:
                        break
                    if kohya_folder(parent.name):
                        groups[parent] = groups.get(parent, 0) + 1
                        break
            for folder, n in sorted(groups.items()):
                parsed = kohya_folder(folder.name)
                assert parsed is not None
                rows.append((index, folder, f"    {folder.relative_to(scan.folder)}", n, parsed[0]))
        self.concepts_panel.set_rows(rows)

    # ------------------------------------------------------------ browsing

    def _refilter(self) -> None:
        current = self.editor.entry
        self.model.set_filter(GridFilter(self.filter_text.text(), self.filter_tag.text(),
                                         self.no_caption.isChecked(), self.with_problems.isChecked()))
        if current is not None:
            self.select_path(current.path)

    def _show_row(self, row: int) -> None:
        if row < 0 or self.store is None:
            self.editor.set_entry(None)
            return
        entry = self.model.entry(row)
        self.editor.set_entry(entry, self.store.write_refusal(entry.path))

    def step(self, delta: int) -> None:
        """Move to the next (1) or previous (-1) image shown in the grid."""
        count = self.model.rowCount()
        if count == 0:
            return
        row = min(max(self.view.currentIndex().row() + delta, 0), count - 1)
        self.view.setCurrentIndex(self.model.index(row))
        self.editor.text.setFocus()

    def select_path(self, path: Path) -> None:
        row = self.model.row_of(path)
        if row is not None:
            index = self.model.index(row)
            self.view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            self.view.scrollTo(index)

    def selected_entries(self) -> list[ImageEntry]:
        return [self.model.entry(i.row()) for i in sorted(self.view.selectionModel().selectedIndexes())]

    # ------------------------------------------------------------ editing

    def _typed(self, image: Path, text: str) -> None:
        if self.store is None:
            return
        edit = CaptionEdit(image, self.store.caption(image), text)
        self.undo_stack.push(CaptionCommand(self.store, [edit], f"Edit caption of {image.name}", self._changed,
                                            typing=True))

    def push_edits(self, edits: list[CaptionEdit], title: str) -> None:
        """Apply edits as one undoable step (nothing happens for an empty list)."""
        if self.store is not None and edits:
            self.undo_stack.push(CaptionCommand(self.store, edits, title, self._changed))

    def _changed(self, images: list[Path]) -> None:
        self.model.caption_changed(images)
        current = self.editor.entry
        if current is not None and current.path in set(images) and self.store is not None:
            self.editor.show_caption(self.store.caption(current.path))
        self._save_timer.start()

    def scopes(self) -> dict[str, Mapping[Path, str | None]]:
        if self.store is None:
            return {}
        shown = [self.model.entry(r).path for r in range(self.model.rowCount())]
        return {
            "Selected images": self.store.captions(e.path for e in self.selected_entries()),
            "Images shown": self.store.captions(shown),
            "All images": self.store.captions(),
        }

    def apply_bulk(self, key: str, first: str = "", second: str = "", scope: str = "All images",
                   regex: bool = False, case_sensitive: bool = True) -> int:
        """Run a bulk operation without the dialog; returns how many captions changed."""
        self.editor.commit()
        edits = BULK_OPS[key].run(self.scopes()[scope], first, second, regex, case_sensitive)
        self.push_edits(edits, BULK_OPS[key].title)
        return len(edits)

    def open_bulk_dialog(self) -> None:
        self.editor.commit()
        if self.store is None:
            return
        dialog = BulkDialog(self.scopes(), self)
        if dialog.exec() and dialog.edits:
            self.push_edits(dialog.edits, dialog.operation.currentText())

    # ------------------------------------------------------------ saving

    def save_now(self) -> bool:
        """Write pending captions; returns False when some are still unsaved (conflict or error)."""
        self._save_timer.stop()
        self.editor.commit()
        if self.store is None or not self.store.pending:
            return True
        report = self.store.flush()
        for conflict in report.conflicts:
            if self.ask_conflict(conflict) == "mine":
                report.errors.extend(self.store.keep_ours(conflict).errors)
            else:
                self.store.take_disk_text(conflict)
                self._changed_no_save([conflict.image])
        if report.errors:
            self.status_label.setText(str(report.errors[0]))
            self.context.status(str(report.errors[0]))
        elif report.saved:
            self.context.status(f"Saved {len(report.saved)} caption{'s' if len(report.saved) != 1 else ''}.")
            self.tags_panel.set_captions(self.store.captions().values())
        return not self.store.pending

    def _changed_no_save(self, images: list[Path]) -> None:
        self.model.caption_changed(images)
        if self.editor.entry is not None and self.editor.entry.path in images and self.store is not None:
            self.editor.show_caption(self.store.caption(self.editor.entry.path))

    def ask_conflict(self, conflict: CaptionConflict) -> str:
        """Ask which text to keep; "mine" or "disk"."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Caption changed on disk")
        box.setText(conflict.describe())
        box.setInformativeText(f"Your text:\n{conflict.our_text}\n\nText on disk:\n{conflict.disk_text or '(deleted)'}")
        mine = box.addButton("Keep my text", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Use the text on disk", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        return "mine" if box.clickedButton() is mine else "disk"

    def _repeats_changed(self, index: int, kohya: Path | None, repeats: int) -> None:
        config = self.context.config
        if config is None:
            return
        if kohya is None:
            concepts = list(config.dataset.concepts)
            concepts[index] = concepts[index].model_copy(update={"repeats": repeats})
            dataset = config.dataset.model_copy(update={"concepts": concepts})
            self.context.set_config(config.model_copy(update={"dataset": dataset}))
            return
        parsed = kohya_folder(kohya.name)
        target = kohya.with_name(f"{repeats}_{kohya.name.split('_', 1)[1]}")
        if parsed is None or target == kohya:
            return
        if target.exists():
            self.status_label.setText(f"Cannot rename {kohya.name} to {target.name}: that folder already exists.")
            return
        if not self.save_now():
            self.status_label.setText("Save or resolve the pending captions before renaming folders.")
            return
        try:
            kohya.rename(target)
        except OSError as exc:
            self.status_label.setText(f"Cannot rename {kohya} to {target.name}: {exc.strerror}. Check the folder is writable.")
            return
        self.context.status(f"Renamed {kohya.name} to {target.name}.")
        self.reload()

    # ------------------------------------------------------------ page interface

    def wait_loaded(self, timeout_s: float = 60.0, checked: bool = True) -> bool:
        deadline = time.monotonic() + timeout_s
        loop = QEventLoop()
        while (self._scanning or (checked and self._checking)) and time.monotonic() < deadline:
            loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.005)
        return not (self._scanning or (checked and self._checking))

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        self.wait_loaded()
        return {
            "dataset_images": len(self.model.entries),
            "dataset_first_paint_ms": round(self.first_paint_ms or 0.0, 1),
            "dataset_problems": len(self.problems),
        }

    def can_close(self) -> bool:
        self.save_now()
        return True

    def shutdown(self) -> None:
        self._generation += 1
        if not self.save_now() and self.store is not None:
            self._write_recovery()
        self.pool.clear()
        self.pool.waitForDone(10000)
        self.loader.shutdown()

    def _write_recovery(self) -> None:
        """Captions that could not be saved go to a recovery file, so nothing typed is lost."""
        assert self.store is not None
        unsaved = {str(p): self.store.caption(p) for p in self.store.pending}
        path = cache_dir().parent / f"unsaved-captions-{time.strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps(unsaved, ensure_ascii=False, indent=1), encoding="utf-8")
        self.context.status(f"{len(unsaved)} captions could not be saved; they are kept in {path}.")

