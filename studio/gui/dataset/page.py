"""The Dataset page: every image with its caption, fast caption editing, bulk edits and validation."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QItemSelectionModel, QTimer
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import QWidget

from studio.core.config.schema import TrainConfig
from studio.core.dataset.captions.caption_store import CaptionConflict, CaptionEdit, CaptionStore, SaveReport
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.scan import ImageEntry, ScanResult
from studio.core.text import plural
from studio.gui.base.event_loop import wait_for
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.dataset.concepts.concept_actions import ConceptActions, scan_key
from studio.gui.dataset.concepts.panels import (
    BucketsPanel,
    ConceptsPanel,
    ProblemsPanel,
    TagsPanel,
    concept_rows,
    lay_out_page,
)
from studio.gui.dataset.editor.editor import CaptionEditor
from studio.gui.dataset.editor.mask_overlay import mask_image
from studio.gui.dataset.edits.caption_tools import CaptionTools
from studio.gui.dataset.edits.saving import (
    CaptionSaver,
    ask_close_unsaved,
    ask_conflict,
    keep_unsaved,
    resolve_conflicts,
)
from studio.gui.dataset.edits.undo import CaptionCommand
from studio.gui.dataset.grid.grid_model import DatasetListModel, make_grid_view
from studio.gui.dataset.grid.thumbnail_loader import ThumbnailLoader
from studio.gui.dataset.grid.toolbar import DatasetToolbar, add_undo_shortcuts
from studio.gui.dataset.scan.helper_process import join_exiting
from studio.gui.dataset.scan.tasks import (
    CheckJob,
    CheckOutcome,
    ListOutcome,
    ScanOutcome,
    list_folders,
    mask_folder,
    owning_images,
    problems_by_image,
    read_folders,
)
from studio.gui.page import Page
from studio.gui.runner.worker import Worker

if TYPE_CHECKING:
    from studio.gui.dataset.captions.review import CaptionReviewDialog

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
        self.worker = Worker(self)
        self.saver = CaptionSaver(self)
        self.saver.sig_report.connect(self._saved)
        self.check: CheckJob | None = None
        self.tools = CaptionTools(self, self)
        self._generation = 0
        self._scanning = self._checking = False
        self._keep_editor = self._reload_after_save = False  # see _refilter and reload_when_saved
        self._started, self._summary = 0.0, ""
        self.first_paint_ms: float | None = None
        self.problems: list[Any] = []
        self._owners: dict[str, Path] = {}  # a file with a problem -> the image it belongs to (see owning_images)
        self._save_timer = QTimer(self, singleShot=True, interval=SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self.save_soon)
        self._tags_timer = QTimer(self, singleShot=True, interval=1000)
        self._tags_timer.timeout.connect(self._update_tags)
        # Asked when the window closes with captions that cannot be saved (how many, why); tests replace it.
        self.confirm_close: Callable[[int, str], bool] = lambda count, why: ask_close_unsaved(self, count, why)
        self._build()
        context.sig_project_changed.connect(lambda _p: self.reload())
        context.sig_config_changed.connect(self._config_changed)
        self._config_key: str | None = None
        if context.config is not None:
            self.reload()

    # ------------------------------------------------------------ layout

    def _build(self) -> None:
        self.toolbar = DatasetToolbar(self.undo_stack)
        self.filter_text, self.filter_tag = self.toolbar.filter_text, self.toolbar.filter_tag
        self.no_caption, self.with_problems = self.toolbar.no_caption, self.toolbar.with_problems
        add_undo_shortcuts(self, self.undo_stack)
        self.view = make_grid_view(self.model)
        self.view.selectionModel().currentChanged.connect(lambda cur, _prev: self._show_row(cur.row()))
        self.editor = CaptionEditor()
        self.editor.mask_for = lambda path: mask_image(self.context.config, path, self._project_root())
        self.editor.sig_caption_typed.connect(self._typed)
        self.editor.sig_next.connect(lambda: self.step(1))
        self.editor.sig_previous.connect(lambda: self.step(-1))
        self.editor.sig_undo.connect(self.undo_stack.undo)
        self.editor.sig_redo.connect(self.undo_stack.redo)
        self.concepts_panel, self.tags_panel = ConceptsPanel(), TagsPanel()
        self.concepts_panel.start_folder = self.context.dialog_folder
        self.problems_panel, self.buckets_panel = ProblemsPanel(), BucketsPanel()
        self.tabs, self.status_label = lay_out_page(
            self, self.toolbar, self.view, self.editor, self.context.settings,
            ((self.concepts_panel, "Concepts"), (self.tags_panel, "Tags"), (self.problems_panel, "Problems"),
             (self.buckets_panel, "Buckets")))
        QWidget.setTabOrder(self.view, self.editor.text)  # Tab from the grid goes to the caption
        self.toolbar.sig_filter_changed.connect(self._refilter)
        self.toolbar.bulk_button.clicked.connect(self.tools.open_bulk_dialog)
        self.toolbar.caption_button.clicked.connect(self.tools.open_caption_dialog)
        self.toolbar.reload_button.clicked.connect(self.reload_when_saved)
        self.tags_panel.sig_tag_clicked.connect(self.filter_tag.setText)
        self.tags_panel.sig_counts_changed.connect(self.editor.set_tags)
        self.problems_panel.sig_path_clicked.connect(self._problem_clicked)
        self.concept_actions = ConceptActions(self)

    # ------------------------------------------------------------ loading

    def _config_changed(self, config: TrainConfig) -> None:
        self.editor.set_family(config.model)  # a family (and T5) chosen on the Model page reads captions its way
        if scan_key(config) != self._config_key:
            self.reload()
        else:  # a DreamBooth prompt or class images: nothing to read again
            self.concepts_panel.concepts = list(config.dataset.concepts)
            self.reload_rows()

    def reload_rows(self) -> None:
        """The Concepts tab again from the last scan (a refused rename puts the spin box back)."""
        if self.context.config is None:
            return
        concepts = list(self.context.config.dataset.concepts)
        if self._scanning:  # the rows come with the scan; the chosen concept's fields show now
            self.concepts_panel.concepts = concepts
            self.concepts_panel.refresh_details()
        elif len(self.scans) == len(concepts):
            self.concepts_panel.set_rows(concept_rows(self.scans, concepts), concepts)

    def reload_when_saved(self) -> None:
        """Reload: captions still being written in the background (seconds, after a bulk edit) are written first, the
        window taking clicks and typing meanwhile (a caption typed then is saved before the dataset is read again)."""
        if self.saver.busy:
            self._reload_after_save = True
            self.status_label.setText("Saving captions; the dataset is read again once they are written…")
            return
        self.reload()

    def reload(self) -> None:
        """Scan the project's dataset again (pending captions are saved first; those that cannot be go to a
        recovery file, as at closing, since the store holding them is replaced)."""
        self._reload_after_save = False
        self._save_or_keep()
        config = self.context.config
        self._generation += 1
        self._stop_check()
        # Caption with… keeps its job and proposals (hours of a model's work) while the same project is read again.
        self.tools.store_replaced(None, self._project_root() if config is not None else None)
        self.undo_stack.clear()
        self.store, self.scans, self.problems, self._owners = None, [], [], {}
        self.model.set_paths([])
        # Thumbnails made again: of an image replaced or repaired since it was shown, or one that could not be read.
        self.loader.forget_all()
        self.editor.set_entry(None)
        if config is None or self.context.project is None:
            self._config_key = None
            self.status_label.setText("Open a project to see its dataset.")
            return
        self._config_key = scan_key(config)
        self.editor.set_family(config.model)
        gc.unfreeze()  # the previous dataset's objects may be collected again
        self._started = time.perf_counter()
        self._scanning = True
        self.first_paint_ms = None
        self.status_label.setText("Reading the dataset…")
        concepts = list(config.dataset.concepts)
        root = self.context.project.root
        self.editor.set_edit_pairs(config.dataset.kind == "edit")  # controls beside each target, its instruction
        self.worker.run(list_folders, self._generation, concepts, root, control_settings(config.dataset, root),
                        on_done=self._listed)

    def _listed(self, outcome: ListOutcome) -> None:
        """Folders listed: paint the grid now, read the captions next."""
        if outcome.generation != self._generation:
            return
        self.model.set_paths(outcome.paths, outcome.keys)
        self.view.viewport().repaint()
        self.first_paint_ms = (time.perf_counter() - self._started) * 1000
        self.status_label.setText(f"{len(self.model.paths)} images. Reading captions…")
        extension = self.context.config.dataset.caption_extension if self.context.config else ".txt"
        self.worker.run(read_folders, outcome, extension, on_done=self._scanned)

    def _scanned(self, outcome: ScanOutcome) -> None:
        if outcome.generation != self._generation or self.context.config is None:
            return
        self._scanning = False
        self.scans = outcome.scans
        entries = outcome.entries
        self.store = outcome.store
        self.tools.store_replaced(self.store, self._project_root())
        self.model.set_entries(entries, outcome.search)
        self.problems = list(outcome.errors)
        concepts = list(self.context.config.dataset.concepts)
        self.concepts_panel.set_rows(concept_rows(self.scans, concepts), concepts)
        self.tags_panel.set_counts(outcome.tags)
        self.status_label.setText(f"{len(entries)} images. Checking them in the background…")
        current = self.view.currentIndex().row()  # an image clicked while the captions were read stays chosen
        if 0 <= current < self.model.rowCount():
            self._show_row(current)
        elif entries:
            self.view.setCurrentIndex(self.model.index(0))
        else:
            self._show_row(-1)
        self._checking = True
        # A dataset is ~100,000 long-lived Python objects; a full garbage collection scanning them
        # all would pause the window for 100-300 ms at random. Frozen, they are skipped (until reload).
        gc.freeze()
        config = self.context.config
        self.check = CheckJob(self._generation, config.dataset, self._project_root(), self, config.model)
        self.check.sig_progress.connect(self.problems_panel.set_checking)
        self.check.sig_done.connect(self._checked)

    def _checked(self, outcome: CheckOutcome) -> None:
        if outcome.generation != self._generation or self.context.config is None:
            return
        self._checking = False
        self.check = None
        if outcome.failure is not None:
            self.status_label.setText(f"The dataset check stopped: {outcome.failure}. Reload the dataset to try again.")
            return
        self.problems = outcome.problems  # the check covers the folders too
        gc.freeze()  # the problems too (see _scanned)
        errors = outcome.errors
        entries = self.store.entries.values() if self.store is not None else ()
        self._owners = owning_images(outcome.by_path, entries, mask_folder(self.context.config.dataset,
                                                                            self._project_root()))
        self.model.set_problems(problems_by_image(outcome.by_path, self._owners))
        self.problems_panel.set_problems(self.problems, len(self.model.paths), errors)
        d = self.context.config.dataset
        self.buckets_panel.set_counts(outcome.buckets, d.resolution, d.buckets)
        item = "edit pair" if self.editor.edit_pairs else "image"
        self._summary = (f"{plural(len(self.model.paths), item)}, {plural(errors, 'error')}, "
                         f"{plural(len(self.problems) - errors, 'warning')}.")
        self.status_label.setText(self._summary)

    def _project_root(self) -> Path | None:
        return self.context.project.root if self.context.project is not None else None

    def _stop_check(self, wait: bool = False) -> None:
        if self.check is not None:
            self.check.cancel(wait)
            self.check.deleteLater()
            self.check = None
        self._checking = False

    def _update_tags(self) -> None:
        if self.store is not None:
            self.tags_panel.recount(list(self.store.captions().values()))

    # ------------------------------------------------------------ browsing

    def _refilter(self) -> None:
        current = self.editor.entry
        self.model.set_filter(self.toolbar.grid_filter())
        if current is not None and self.model.row_of(current.path) is not None:
            # The image shown is still in the grid: it is chosen again, and the editor (its preview, the caption
            # being typed) stays as it is rather than being made again at every keystroke in the filter.
            self._keep_editor = True
            try:
                self.select_path(current.path)
            finally:
                self._keep_editor = False
        elif self.model.rowCount():
            self.view.setCurrentIndex(self.model.index(0))
        else:
            self.editor.set_entry(None, empty_text="No image matches the filter.")
        self._show_counts()

    def _show_counts(self) -> None:
        """The footer: how many images are shown of how many, while a filter is on."""
        shown, total = self.model.rowCount(), len(self.model.paths)
        if self.model.filter.active and self.model.entries:
            text = f"{shown} of {total} images shown (filtered)."
            if not shown:
                text = f"No image of {total} matches the filter; clear it to see them all."
            self.status_label.setText(text)
        elif not (self._scanning or self._checking):
            self.status_label.setText(self._summary)

    def _show_row(self, row: int) -> None:
        if row < 0 or self.store is None:
            self.editor.set_entry(None)
            return
        entry = self.model.entry(row)
        if self._keep_editor and entry is self.editor.entry:
            return
        self.editor.set_entry(entry, self.store.write_refusal(entry.path))

    def step(self, delta: int) -> None:
        """Move to the next (1) or previous (-1) image shown in the grid."""
        count = self.model.rowCount()
        if count == 0:
            return
        row = min(max(self.view.currentIndex().row() + delta, 0), count - 1)
        self.view.setCurrentIndex(self.model.index(row))
        self.editor.text.setFocus()

    def _problem_clicked(self, path: Path) -> None:
        """A problem's file is an image of the grid or one an image owns (its caption, mask, control): go to it."""
        self.select_path(self._owners.get(str(path), path))

    def select_path(self, path: Path) -> None:
        row = self.model.row_of(path)
        if row is not None:
            index = self.model.index(row)
            self.view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            self.view.scrollTo(index)

    def selected_entries(self) -> list[ImageEntry]:
        """The selected images in grid order. Read from the selection's ranges: all 20,000 selected are one range,
        where a list of every index, sorted in Python, took a third of a second."""
        selection = self.view.selectionModel().selection()
        spans = (selection.at(i) for i in range(selection.count()))
        rows = {row for span in spans for row in range(span.top(), span.bottom() + 1)}
        return [self.model.entry(row) for row in sorted(rows)]

    # ------------------------------------------------------------ editing

    def _typed(self, image: Path, text: str) -> None:
        if self.store is None:
            return
        edit = CaptionEdit(image, self.store.caption(image), text)
        self.undo_stack.push(CaptionCommand(self.store, [edit], f"Edit caption of {image.name}", self._changed,
                                            typing=True))

    def push_edits(self, edits: list[CaptionEdit], title: str) -> None:
        """Apply edits as one undoable step (nothing happens for an empty list); saving starts at once."""
        if self.store is not None and edits:
            self.undo_stack.push(CaptionCommand(self.store, edits, title, self._changed))
            self.save_soon()

    def _changed(self, images: list[Path]) -> None:
        self._changed_no_save(images)
        self._save_timer.start()

    # Bulk edits and captioning by a model: see caption_tools.py.
    def apply_bulk(self, key: str, first: str = "", second: str = "", scope: str = "All images",
                   regex: bool = False, case_sensitive: bool = True) -> int:
        return self.tools.apply_bulk(key, first, second, scope, regex, case_sensitive)

    def open_caption_dialog(self) -> CaptionReviewDialog | None:
        return self.tools.open_caption_dialog()

    # ------------------------------------------------------------ saving

    def save_soon(self) -> None:
        """Write pending captions in the background; the window stays responsive."""
        self._save_timer.stop()
        self.editor.commit()
        if self.store is not None and self.store.has_pending:
            self.saver.save(self.store)

    def save_now(self) -> bool:
        """Write pending captions and wait; returns False when some are still unsaved (conflict or error)."""
        self._save_timer.stop()
        self.editor.commit()
        self.saver.wait()
        if self.store is None or not self.store.has_pending:
            return True
        self._saved(self.store.flush())
        return not self.store.has_pending

    def _save_or_keep(self) -> None:
        """Save pending captions; those that cannot be saved go to a recovery file, and the person is told where."""
        if not self.save_now() and self.store is not None:
            keep_unsaved(self.store, self.context.status)

    def _saved(self, report: SaveReport) -> None:
        if self.store is None:
            return
        resolve_conflicts(self.store, report, self.ask_conflict, self._changed_no_save)
        if self._reload_after_save:  # once the saver has started what was typed meanwhile, if anything
            QTimer.singleShot(0, self, lambda: self.reload_when_saved() if self._reload_after_save else None)
        if report.errors:
            self.status_label.setText(str(report.errors[0]))
            self.context.status(str(report.errors[0]))
        elif report.saved:
            self.context.status(f"Saved {len(report.saved)} caption{'s' if len(report.saved) != 1 else ''}.")

    def _changed_no_save(self, images: list[Path]) -> None:
        """Captions changed in the store (an edit, or the text on disk taken in a conflict): the grid, the editor
        and, a moment later, the Tags tab follow."""
        self.model.caption_changed(images)
        self._tags_timer.start()
        current = self.editor.entry
        if current is not None and self.store is not None and current.path in set(images):
            self.editor.show_caption(self.store.caption(current.path))

    def ask_conflict(self, conflict: CaptionConflict, others: int = 0) -> str:
        """Ask which text to keep: "mine" or "disk" (" for all": the same for the `others` still to ask)."""
        return ask_conflict(self, conflict, others)

    # ------------------------------------------------------------ page interface

    def busy(self) -> bool:
        return self._scanning or self._reload_after_save  # the check runs in a helper process: the grid is usable

    def wait_loaded(self, timeout_s: float = 60.0, checked: bool = True) -> bool:
        return wait_for(lambda: not (self.busy() or (checked and self._checking)), timeout_s)

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        self.wait_loaded()
        return {"dataset_images": len(self.model.paths), "dataset_problems": len(self.problems),
                "dataset_first_paint_ms": round(self.first_paint_ms or 0.0, 1)}

    def can_close(self) -> bool:
        """Pending captions are saved; those that cannot be (a full disk, a folder moved or made read-only) are
        the person's to fix first, or to find in the recovery file written at closing, told where before."""
        if self.save_now() or self.store is None:
            return True
        return self.confirm_close(len(self.store.pending), self.status_label.text())

    def shutdown(self) -> None:
        self._generation += 1
        self._save_or_keep()
        self._tags_timer.stop()  # after the save: the text on disk taken in a conflict restarts it
        self.tools.close_caption_dialog()
        self._stop_check(wait=True)
        join_exiting(2.0)
        self.saver.shutdown()
        self.worker.shutdown(10.0)
        self.editor.shutdown()
        self.loader.shutdown()
